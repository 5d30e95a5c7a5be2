#!/usr/bin/env bash
# sieve eval end to end on a small model: dense against itself must give KL
# exactly 0 and 100% top-1 agreement on every sample, every sample appears
# once per row, and --dump-samples writes one line per generated sample.
#
#   eval_selfcheck.sh SIEVE MODEL N_EXPECTED [EVAL ARGS...]
# N_EXPECTED: samples per row (tasks x lengths x --samples).
set -u
sieve="$1"; model="$2"; n_want="$3"; shift 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! "$sieve" eval -m "$model" -o jsonl --dump-samples "$tmp/samples.jsonl" "$@" >"$tmp/out" 2>"$tmp/err"; then
    echo "FAIL: sieve eval exited non-zero"; cat "$tmp/err"; exit 1
fi
fail=0
n_ref=$(grep -c '"reference":true' "$tmp/out")
n_dense=$(grep -c '"policy":"dense","kv_type":"[a-z0-9]*","reference":false' "$tmp/out")
n_exact=$(grep '"reference":false' "$tmp/out" | grep -c '"kl_mean":0.0,"kl_max":0.0,"agreement":1.0,')
n_dump=$(grep -c '"prompt_ids":\[' "$tmp/samples.jsonl")
n_err=$(grep -vc '"error":""' "$tmp/out")
[ "$n_ref" = "$n_want" ] || { echo "FAIL: $n_ref reference lines, expected $n_want"; fail=1; }
[ "$n_dense" = "$n_want" ] || { echo "FAIL: $n_dense dense lines, expected $n_want"; fail=1; }
[ "$n_exact" = "$n_want" ] || { echo "FAIL: $n_exact of $n_dense dense lines have KL exactly 0 and agreement 1"; fail=1; }
[ "$n_dump" = "$n_want" ] || { echo "FAIL: --dump-samples wrote $n_dump samples, expected $n_want"; fail=1; }
[ "$n_err" = 0 ] || { echo "FAIL: $n_err lines carry an engine error"; fail=1; }
if [ "$fail" != 0 ]; then
    echo "--- stdout"; head -c 3000 "$tmp/out"; echo; echo "--- stderr"; head -c 2000 "$tmp/err"
fi
exit "$fail"
