#!/usr/bin/env bash
# Prefix caching through the server (docs/serving.md, "Prefix caching"): NUM
# requests that share a PREFIX-token system prompt, each with its own IN-token
# question and OUT output tokens, C at a time, through `sieve serve` with its
# prefix cache, `sieve serve --no-prefix-cache`, and (if LLAMA_SERVER is set)
# llama-server, whose slots keep their last prompt (cache_prompt, on by
# default). One engine at a time, each freshly started; every engine sees the
# same requests (one --seed). The first request is a warm-up (it computes the
# prefix where a cache keeps it), as a deployed system prompt would be.
#
#   eval/serve_prefix.sh OUT_DIR [MODEL]
# Environment: PREFIX (2000), IN (100), OUT (64), NUM (64), C (4), THREADS (2),
# SEED (7), SIEVE (./build/sieve), LLAMA_SERVER (a llama-server binary).
set -euo pipefail
out=${1:?usage: serve_prefix.sh OUT_DIR [MODEL]}
model=${2:-$HOME/.cache/sieve/SmolLM2-135M-Instruct.Q4_1.gguf}
sieve=${SIEVE:-./build/sieve}
prefix=${PREFIX:-2000}
in_len=${IN:-100}
out_len=${OUT:-64}
num=${NUM:-64}
conc=${C:-4}
threads=${THREADS:-2}
seed=${SEED:-7}
mkdir -p "$out"
port=18183
ctx=$((prefix + in_len + out_len + 16))
vocab=$("$sieve" info "$model" 2>/dev/null | sed -n 's/.*n_vocab *\([0-9]\+\).*/\1/p' | head -1)
vocab=${vocab:-49152}

. "$(dirname "$0")/serve_common.sh"

bench() {  # $1 label
    "$sieve" bench-serve "http://127.0.0.1:$port" --random-prefix-len "$prefix" --input-len "$in_len" \
        --output-len "$out_len" --num-prompts "$num" --max-concurrency "$conc" --seed "$seed" --warmup 1 \
        --prompt-kind ids --vocab-size "$vocab" --json "$out/$1.json" | tee "$out/$1.txt"
    curl -sf "http://127.0.0.1:$port/metrics" > "$out/$1.metrics" || true
}

serve_sieve() {  # $1 label, then extra serve flags
    local label=$1
    shift
    "$sieve" serve -m "$model" --port $port -np "$conc" -c "$ctx" -t "$threads" "$@" > "$out/server_$label.log" 2>&1 &
    srv=$!
    wait_up "$port"
    bench "$label"
    kill "$srv"
    wait "$srv" 2>/dev/null || true
}

serve_sieve sieve_cache
serve_sieve sieve_nocache --no-prefix-cache

if [ -n "${LLAMA_SERVER:-}" ]; then
    "$LLAMA_SERVER" -m "$model" --port $port -np "$conc" -c $((conc * ctx)) -t "$threads" -fa on \
        > "$out/server_llama.log" 2>&1 &
    srv=$!
    wait_up "$port"
    bench llama-server
    kill "$srv"
    wait "$srv" 2>/dev/null || true
fi

python3 - "$out" <<'PY'
import json, os, statistics, sys
out = sys.argv[1]
rows = {}
for label in ("sieve_cache", "sieve_nocache", "llama-server"):
    path = os.path.join(out, label + ".json")
    if not os.path.exists(path):
        continue
    run = json.load(open(path))[0]
    ok = [r for r in run["requests"] if r["ok"]]
    rows[label] = {
        "completed": run["completed"], "failed": run["failed"],
        "ttft_p50_ms": statistics.median(r["ttft_ms"] for r in ok),
        "ttft_p90_ms": sorted(r["ttft_ms"] for r in ok)[int(0.9 * (len(ok) - 1))],
        "tpot_p50_ms": statistics.median(r["tpot_ms"] for r in ok if r["tpot_ms"] is not None),
        "output_tok_s": run["output_throughput"], "request_s": run["request_throughput"],
        "cached_frac": run.get("total_cached_tokens", 0) / max(1, run["total_input_tokens"]),
    }
print("\n| engine | done | TTFT p50 ms | TTFT p90 ms | TPOT p50 ms | output tok/s | req/s | input from cache |")
print("|---|---|---|---|---|---|---|---|")
for label, r in rows.items():
    print(f"| {label} | {r['completed']} ({r['failed']} failed) | {r['ttft_p50_ms']:.1f} | {r['ttft_p90_ms']:.1f} | "
          f"{r['tpot_p50_ms']:.2f} | {r['output_tok_s']:.1f} | {r['request_s']:.3f} | {100 * r['cached_frac']:.1f}% |")
if "sieve_cache" in rows and "sieve_nocache" in rows:
    a, b = rows["sieve_cache"], rows["sieve_nocache"]
    print(f"\nsieve cache / no cache: TTFT p50 {a['ttft_p50_ms'] / b['ttft_p50_ms']:.3f}, "
          f"output throughput {a['output_tok_s'] / b['output_tok_s']:.2f}x")
if "sieve_cache" in rows and "llama-server" in rows:
    a, b = rows["sieve_cache"], rows["llama-server"]
    print(f"sieve cache / llama-server: TTFT p50 {a['ttft_p50_ms'] / b['ttft_p50_ms']:.3f}, "
          f"output throughput {a['output_tok_s'] / b['output_tok_s']:.2f}x")
json.dump(rows, open(os.path.join(out, "summary.json"), "w"), indent=1)
PY
