#!/usr/bin/env bash
# Batched decode through the server (docs/serving.md, "Batched decode"):
# `sieve serve` (and, if LLAMA_SERVER is set, llama-server on the same file,
# one engine at a time), then one `sieve bench-serve` run per concurrency
# with fresh prompts (its own --seed per point), streamed /v1/completions,
# random token-id prompts, ignore_eos. NUM requests per point (default: 8, or
# C when C > 8), so C <= 8 is the 512/128 workload of the earlier tables.
#
#   eval/serve_batched.sh OUT_DIR [MODEL]
# Environment: CONC (default "1 2 4 8 16"), IN / OUT lengths (512 / 128),
# THREADS (2), SIEVE (./build/sieve), LLAMA_SERVER (a llama-server binary;
# its slots: max(CONC) of IN+OUT+16 tokens each), LLAMA_CONC (default: CONC).
# LLAMA_ARGS: extra llama-server arguments (e.g. --no-repack).
set -euo pipefail
out=${1:?usage: serve_batched.sh OUT_DIR [MODEL]}
model=${2:-$HOME/.cache/sieve/SmolLM2-135M-Instruct.Q4_1.gguf}
sieve=${SIEVE:-./build/sieve}
in_len=${IN:-512}
out_len=${OUT:-128}
threads=${THREADS:-2}
conc=${CONC:-"1 2 4 8 16"}
llama_conc=${LLAMA_CONC:-$conc}
mkdir -p "$out"
port=18182
max_c=1
for c in $conc $llama_conc; do [ "$c" -gt "$max_c" ] && max_c=$c; done
ctx=$((in_len + out_len + 16))
vocab=$("$sieve" info "$model" 2>/dev/null | sed -n 's/.*n_vocab *\([0-9]\+\).*/\1/p' | head -1)
vocab=${vocab:-49152}

. "$(dirname "$0")/serve_common.sh"

run_points() {  # $1 label, $2 concurrencies
    for c in $2; do
        local n=$(( c > 8 ? c : 8 ))
        "$sieve" bench-serve "http://127.0.0.1:$port" --input-len "$in_len" --output-len "$out_len" \
            --num-prompts "$n" --max-concurrency "$c" --seed $((2000 + c)) --warmup 0 \
            --prompt-kind ids --vocab-size "$vocab" --json "$out/${1}_c$c.json" | tee "$out/${1}_c$c.txt"
    done
}

"$sieve" serve -m "$model" --port $port -np "$max_c" -c "$ctx" -t "$threads" > "$out/server_sieve.log" 2>&1 &
srv=$!
wait_up "$port"
run_points sieve "$conc"
kill "$srv"; wait "$srv" 2>/dev/null || true

if [ -n "${LLAMA_SERVER:-}" ]; then
    "$LLAMA_SERVER" -m "$model" --port $port -np "$max_c" -c $((max_c * ctx)) -t "$threads" -fa on ${LLAMA_ARGS:-} \
        > "$out/server_llama.log" 2>&1 &
    srv=$!
    wait_up "$port"
    run_points llama-server "$llama_conc"
    kill "$srv"; wait "$srv" 2>/dev/null || true
fi
