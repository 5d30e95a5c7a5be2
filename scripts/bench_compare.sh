#!/usr/bin/env bash
# Runs `sieve bench` and a peer's `llama-bench` alternately on the same GGUF
# files with the same flags, so each ratio compares runs minutes apart at most,
# and prints the side-by-side table (scripts/bench_table.py).
#
#   scripts/bench_compare.sh SIEVE LLAMA_BENCH OUT_DIR [bench flags] -- MODEL...
#
#   SIEVE        the sieve binary (e.g. build/sieve)
#   LLAMA_BENCH  a llama-bench binary built separately (this project neither
#                builds nor ships llama.cpp); set LD_LIBRARY_PATH for it if needed
#   OUT_DIR      receives sieve.jsonl, llama.jsonl and table.md (appended to)
#   flags        passed to both, e.g. -p 512 -n 128 -d 0,8192 -t 2 -r 5
#   LLAMA_BENCH_FLAGS (environment) extra flags for llama-bench only, e.g. "-fa 1"
#
# sieve's rows also carry the machine's read bandwidth, measured once here
# and passed to every run (--bandwidth), so % bw compares like with like.
set -euo pipefail
if [ $# -lt 5 ]; then
    sed -n '2,17p' "$0" >&2
    exit 2
fi
sieve="$1"; llama="$2"; out="$3"; shift 3
flags=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do flags+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ $# -ge 1 ] || { echo "error: no model files after --" >&2; exit 2; }
mkdir -p "$out"
root="$(cd "$(dirname "$0")/.." && pwd)"

bw=$("$sieve" bench -m "$1" -p 1 -n 0 -r 1 -o jsonl 2>/dev/null | head -1 |
     python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["bw_gbps"])')
echo "read bandwidth: $bw GB/s" >&2
for m in "$@"; do
    [ -s "$m" ] || { echo "error: $m is missing" >&2; exit 1; }
    echo "== $(basename "$m"): llama-bench" >&2
    # shellcheck disable=SC2086 # LLAMA_BENCH_FLAGS is a list of words
    "$llama" -m "$m" "${flags[@]}" ${LLAMA_BENCH_FLAGS:-} -o jsonl >>"$out/llama.jsonl"
    echo "== $(basename "$m"): sieve bench" >&2
    "$sieve" bench -m "$m" "${flags[@]}" --bandwidth "$bw" -o jsonl >>"$out/sieve.jsonl"
done
python3 "$root/scripts/bench_table.py" "$out/sieve.jsonl" "$out/llama.jsonl" | tee "$out/table.md"
