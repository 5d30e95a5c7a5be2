#!/usr/bin/env bash
# The dense baseline of docs/accuracy.md: every task at every length on the
# two models, 20 samples per cell, one `sieve eval` run (and one JSON file)
# per model x length x task, so a run that is stopped loses at most one cell
# and a second call resumes where the first stopped (cells whose file exists
# are skipped). Each file's reference row is the baseline; its `dense` row is
# the harness self-check (KL 0), nearly free through the shared prefill.
#
#   eval/run_baseline.sh OUTDIR                 # everything, cheapest first
#   eval/run_baseline.sh OUTDIR qwen0.5b:16384  # one model at one length
#   SIEVE=build/sieve SAMPLES=20 THREADS=2 eval/run_baseline.sh OUTDIR
#
# Then: python3 eval/plot_baseline.py OUTDIR/*.json -o docs/accuracy-baseline.png
#       python3 eval/eval_table.py OUTDIR/*.json
set -euo pipefail

out="${1:?usage: eval/run_baseline.sh OUTDIR [model:ctx ...]}"
shift
sieve="${SIEVE:-build/sieve}"
samples="${SAMPLES:-20}"
threads="${THREADS:-$(nproc)}"
tasks="${TASKS:-passkey niah_multikey niah_multivalue niah_multiquery vt cwe fwe code ppl}"
here="$(cd "$(dirname "$0")/.." && pwd)"

# SmolLM2's "8k" cell is 8064 tokens: its context is 8192, and a prompt
# leaves room for the longest answer budget of the tasks (128 tokens, vt and
# cwe), so every task of the cell has the same length.
if [ $# -eq 0 ]; then
    set -- smollm2:2048 smollm2:4096 smollm2:8064 \
        qwen0.5b:2048 qwen0.5b:4096 qwen0.5b:8192 qwen0.5b:16384
fi

model_path() {
    case "$1" in
        smollm2) "$here/scripts/fetch_model.sh" ;;
        qwen0.5b) "$here/scripts/fetch_long_model.sh" 0.5b ;;
        qwen1.5b) "$here/scripts/fetch_long_model.sh" 1.5b ;;
        *) echo "unknown model '$1' (expected smollm2, qwen0.5b or qwen1.5b)" >&2; exit 2 ;;
    esac
}

mkdir -p "$out"
for cell in "$@"; do
    name="${cell%%:*}"
    ctx="${cell#*:}"
    case "$ctx" in
        ''|*[!0-9]*) echo "bad cell '$cell' (expected MODEL:CTX, e.g. qwen0.5b:4096)" >&2; exit 2 ;;
    esac
    model="$(model_path "$name")"
    for task in $tasks; do
        file="$out/$name-$ctx-$task.json"
        [ -s "$file" ] && continue
        echo "$(date -u +%FT%TZ) start $name $ctx $task" >&2
        start=$(date +%s)
        "$sieve" eval -m "$model" --task "$task" --ctx "$ctx" --samples "$samples" \
            --kv-policy dense -t "$threads" -o json >"$file.tmp"
        mv "$file.tmp" "$file"
        echo "$(date -u +%FT%TZ) done  $name $ctx $task $(( $(date +%s) - start )) s" >&2
    done
done
