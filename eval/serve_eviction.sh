#!/usr/bin/env bash
# Serving with KV eviction against dense, at the same KV memory (docs/serving.md):
# for each policy, `sieve serve --kv-memory M --kv-policy P`, then one
# `sieve bench-serve` run per concurrency with fresh prompts (its own --seed),
# C requests per point (one wave), streamed /v1/completions, random token ids.
# While each point runs, /metrics is polled: the most sequences running at
# once and the preemptions are written beside the bench-serve JSON.
#
#   eval/serve_eviction.sh OUT_DIR [MODEL]
# Environment: POLICIES (default "dense layerwise:keep=0.1 snapkv:keep=0.1"),
# CONC (default "1 2 4 8 16"), IN / OUT lengths (4000 / 500), KV_MEMORY
# (default: two dense IN+OUT sequences), VOCAB (random prompt ids below it: 49152), THREADS (2), SIEVE (./build/sieve),
# LLAMA_SERVER (a llama-server binary: also measured, with the same KV bytes
# as -np 2 slots of IN+OUT tokens, at the concurrencies in LLAMA_CONC, default "8").
# SERVE_ARGS: extra `sieve serve` arguments (e.g. --max-batch-tokens 256).
# LLAMA_ARGS: extra llama-server arguments (e.g. --no-repack where its AMX path
# fails).
set -euo pipefail
out=${1:?usage: serve_eviction.sh OUT_DIR [MODEL]}
model=${2:-$HOME/.cache/sieve/SmolLM2-135M-Instruct.Q4_1.gguf}
sieve=${SIEVE:-./build/sieve}
in_len=${IN:-4000}
out_len=${OUT:-500}
threads=${THREADS:-2}
policies=${POLICIES:-"dense layerwise:keep=0.1 snapkv:keep=0.1"}
conc=${CONC:-"1 2 4 8 16"}
mkdir -p "$out"

# Two dense sequences of IN+OUT rows: 16 KiB pages of f16 rows (head_dim 64:
# 128 rows a page), 2 x K/V lanes of every layer and KV head.
if [ -z "${KV_MEMORY:-}" ]; then
    lanes=$("$sieve" info "$model" -c 16 2>/dev/null | sed -n 's/.* \([0-9]\+\) lanes.*/\1/p' | head -1)
    lanes=${lanes:-180}
    rows=$((in_len + out_len))
    pages=$(( (rows + 127) / 128 ))
    KV_MEMORY=$(( 2 * lanes * pages * 16384 ))
fi
echo "KV memory: $KV_MEMORY bytes" | tee "$out/config.txt"
port=18181

. "$(dirname "$0")/serve_common.sh"

# Polls /metrics until the file $1.stop exists; writes "max_running preemptions".
poll_metrics() {
    local f=$1 max=0
    while [ ! -e "$f.stop" ]; do
        r=$(curl -s "http://127.0.0.1:$port/metrics" | sed -n 's/^sieve:num_requests_running \([0-9.e+]*\)$/\1/p' | cut -d. -f1)
        [ -n "$r" ] && [ "$r" -gt "$max" ] && max=$r
        sleep 0.2
    done
    p=$(curl -s "http://127.0.0.1:$port/metrics" | sed -n 's/^sieve:num_preemptions_total \([0-9.e+]*\)$/\1/p')
    echo "$max ${p:-?}" > "$f"
    rm -f "$f.stop"
}

run_points() {  # $1 label, $2 concurrencies
    local label=$1
    for c in $2; do
        local tag="$out/${label}_c$c"
        poll_metrics "$tag.metrics" &
        local poller=$!
        "$sieve" bench-serve "http://127.0.0.1:$port" --input-len "$in_len" --output-len "$out_len" \
            --num-prompts "$c" --max-concurrency "$c" --seed $((1000 + c)) --warmup 0 \
            --prompt-kind ids --vocab-size "${VOCAB:-49152}" --json "$tag.json" | tee "$tag.txt"
        touch "$tag.metrics.stop"
        wait "$poller"
        echo "max running, preemptions: $(cat "$tag.metrics")" | tee -a "$tag.txt"
    done
}

for p in $policies; do
    label=$(echo "$p" | tr ':=,/' '____')
    "$sieve" serve -m "$model" --port $port -np 16 -c $((in_len + out_len + 16)) -t "$threads" \
        --kv-memory "$KV_MEMORY" --kv-page-size 16KiB --kv-policy "$p" ${SERVE_ARGS:-} > "$out/server_$label.log" 2>&1 &
    srv=$!
    wait_up "$port"
    run_points "sieve_$label" "$conc"
    curl -s "http://127.0.0.1:$port/metrics" > "$out/metrics_$label.txt"
    kill -TERM $srv
    wait $srv || true
done

if [ -n "${LLAMA_SERVER:-}" ]; then
    # The same KV bytes: llama.cpp's f16 KV for two slots of IN+OUT tokens.
    "$LLAMA_SERVER" -m "$model" --port $port -np 2 -c $((2 * (in_len + out_len + 16))) -t "$threads" -fa on ${LLAMA_ARGS:-} \
        > "$out/server_llama.log" 2>&1 &
    srv=$!
    wait_up "$port"
    run_points "llama" "${LLAMA_CONC:-8}"
    kill -TERM $srv
    wait $srv || true
fi
