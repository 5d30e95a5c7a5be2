#!/usr/bin/env bash
# End-to-end checks of `sieve bench-serve` over real loopback HTTP against
# fake_openai_server.py. Usage: bench_serve_e2e.sh SIEVE_BINARY CASE
# Each case starts its own fake server (flags per case), runs bench-serve, and
# checks exit status, messages and the --json / --csv numbers.
set -euo pipefail
sieve=$1
case_name=$2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    rm -rf "$tmp"
}
trap cleanup EXIT

fail() { echo "FAIL ($case_name): $*" >&2; echo "--- stdout" >&2; cat "$tmp/out" >&2 || true; echo "--- stderr" >&2; cat "$tmp/err" >&2 || true; exit 1; }

# start_server [fake server flags...]: sets $url
start_server() {
    python3 "$here/fake_openai_server.py" --port-file "$tmp/port" --lifetime 100 "$@" &
    server_pid=$!
    for _ in $(seq 100); do [ -f "$tmp/port" ] && break; sleep 0.1; done
    [ -f "$tmp/port" ] || fail "fake server did not start"
    url="http://127.0.0.1:$(cat "$tmp/port")"
}

# bench EXPECTED_RC args...: runs bench-serve, checks its exit status
bench() {
    local want=$1; shift
    local rc=0
    "$sieve" bench-serve "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
    [ "$rc" = "$want" ] || fail "exit status $rc, expected $want"
}

# check PYTHON_EXPRESSION_OVER_runs: asserts on the parsed --json file
check() {
    python3 - "$tmp/o.json" "$1" <<'EOF' || fail "check failed: $1"
import json, sys
runs = json.load(open(sys.argv[1]))
ok = eval(sys.argv[2], {"runs": runs, "all": all, "len": len, "any": any, "set": set, "abs": abs})
sys.exit(0 if ok else 1)
EOF
}

grep_err() { grep -q -- "$1" "$tmp/err" || fail "stderr lacks '$1'"; }

case "$case_name" in
completions_ids)
    start_server --n-vocab 300
    bench 0 "$url" --num-prompts 8 --max-concurrency 3 --input-len 16 --output-len 6 --seed 5 \
        --json "$tmp/o.json" --csv "$tmp/o.csv"
    grep -q "Successful requests: *8" "$tmp/out" || fail "table lacks 8 successes"
    grep -q "P99 TTFT (ms):" "$tmp/out" || fail "table lacks TTFT p99"
    grep_err "random token ids"
    check 'len(runs) == 1 and runs[0]["completed"] == 8 and runs[0]["failed"] == 0'
    check 'runs[0]["max_concurrency"] == 3 and runs[0]["total_output_tokens"] == 48 and runs[0]["total_input_tokens"] == 128'
    check 'all(r["ok"] and r["usage_reported"] and r["output_tokens"] == 6 and len(r["itl_ms"]) == 5 for r in runs[0]["requests"])'
    check 'all(r["ttft_ms"] > 0 and r["e2e_ms"] >= r["ttft_ms"] and r["tpot_ms"] > 0 for r in runs[0]["requests"])'
    check 'runs[0]["ttft_ms"]["n"] == 8 and runs[0]["itl_ms"]["n"] == 40 and runs[0]["ttft_ms"]["p99"] >= runs[0]["ttft_ms"]["median"]'
    check 'abs(runs[0]["output_throughput"] * runs[0]["duration_s"] - 48) < 1e-6'
    [ "$(wc -l <"$tmp/o.csv")" = 2 ] || fail "csv should have a header and one row"
    head -1 "$tmp/o.csv" | grep -q "ttft_p99_ms" || fail "csv header lacks ttft_p99_ms"
    # --vocab-size overrides the server's: ids below 100 are accepted by a 300-token server.
    bench 0 "$url" --num-prompts 2 --prompt-kind ids --vocab-size 100 --output-len 2
    ;;
chat_sweep)
    start_server
    bench 0 "$url/v1/" --endpoint chat --sweep 1,2,4 --num-prompts 4 --input-len 20 --output-len 3 --json "$tmp/o.json"
    [ "$(grep -c "Successful requests: *4" "$tmp/out")" = 3 ] || fail "expected three runs of 4 successes"
    grep_err "random words"
    check '[r["max_concurrency"] for r in runs] == [1, 2, 4] and all(r["completed"] == 4 for r in runs)'
    check 'all(q["output_tokens"] == 3 and q["prompt_tokens"] == 20 for r in runs for q in r["requests"])'
    ;;
random_lengths_rate)
    # Poisson arrivals at 200/s, lengths in [out/2, 3*out/2]; the fake server
    # reports its token counts, so they show the lengths that were asked for.
    start_server --delay-ms 1
    bench 0 "$url" --num-prompts 24 --request-rate 200 --input-len 10 --output-len 8 --random-range-ratio 0.5 \
        --seed 9 --json "$tmp/o.json"
    check 'runs[0]["completed"] == 24 and runs[0]["request_rate"] == 200'
    check 'all(4 <= q["output_tokens"] <= 12 and 5 <= q["input_len"] <= 15 for q in runs[0]["requests"])'
    check 'len(set(q["output_tokens"] for q in runs[0]["requests"])) > 1'
    check 'all(q["prompt_tokens"] == q["input_len"] for q in runs[0]["requests"])'
    ;;
no_usage_text)
    # No usage chunk and no vocabulary size: text prompts, tokens counted as chunks.
    start_server --no-usage --n-vocab 0
    bench 0 "$url" --num-prompts 3 --output-len 4 --input-len 7 --json "$tmp/o.json"
    grep_err "random words"
    check 'all(not q["usage_reported"] and q["output_tokens"] == 4 for q in runs[0]["requests"])'
    bench 1 "$url" --num-prompts 3 --prompt-kind ids
    grep_err "pass --vocab-size N"
    ;;
http_errors)
    # Every third request gets HTTP 500: counted as failed, first error printed.
    start_server --fail-every 3
    bench 0 "$url" --num-prompts 9 --max-concurrency 1 --warmup 0 --output-len 2 --json "$tmp/o.json"
    grep -q "Failed requests: *3" "$tmp/out" || fail "table lacks 3 failures"
    grep_err "3 of 9 requests failed; first error: HTTP 500: injected failure"
    check 'runs[0]["failed"] == 3 and runs[0]["completed"] == 6 and runs[0]["total_output_tokens"] == 12'
    check 'sum(1 for q in runs[0]["requests"] if q.get("http_status") == 500) == 3'
    # A wrong model name fails the warm-up with the server's message.
    bench 1 "$url" --model no-such-model --num-prompts 2
    grep_err "warm-up request failed: HTTP 404: model 'no-such-model' not found"
    # Without warm-up every request fails; the run says so and exits non-zero.
    bench 1 "$url" --model no-such-model --num-prompts 2 --warmup 0
    grep_err "no request succeeded"
    ;;
timeout)
    # The server stalls after the first token; --timeout 1 bounds each request.
    start_server --stall-ms 30000
    bench 1 "$url" --num-prompts 2 --warmup 0 --timeout 1 --output-len 3 --json "$tmp/o.json"
    grep_err "timed out after 1.0 s"
    check 'runs[0]["failed"] == 2'
    ;;
unreachable)
    # A port nothing listens on: a closed loopback port refuses at once.
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    bench 1 "http://127.0.0.1:$port"
    grep_err "cannot connect to http://127.0.0.1:$port"
    bench 1 "http://127.0.0.1:$port" --model m --vocab-size 10 --warmup 1
    grep_err "warm-up request failed: cannot connect"
    ;;
usage)
    bench 2
    grep_err "no server URL given"
    bench 2 ftp://x
    grep_err "expected http://HOST:PORT"
    bench 2 http://127.0.0.1:1 --endpoint chat --prompt-kind ids
    grep_err "needs --endpoint completions"
    bench 2 http://127.0.0.1:1 --sweep 1,,4
    grep_err "expected a list like"
    bench 2 http://127.0.0.1:1 --request-rate -3
    grep_err "request-rate: expected a number"
    bench 2 http://127.0.0.1:1 --bogus
    grep_err "unknown option '--bogus'"
    bench 0 --help
    grep -q "usage: sieve bench-serve URL" "$tmp/out" || fail "no usage on --help"
    ;;
*)
    echo "unknown case '$case_name'" >&2
    exit 2
    ;;
esac
echo "ok ($case_name)"
