#!/usr/bin/env bash
# Writes the random-weight, real-shaped benchmark models into the model cache
# (docs/benchmarks.md lists them; speed depends on shapes and weight types,
# not values). Skips files that already exist. Needs make_bench_model, built
# with the tests:
#
#   cmake --build build --target make_bench_model
#   scripts/bench_models.sh [BUILD_DIR]        -> prints the paths, one a line
#
# Files (in $SIEVE_CACHE, else $XDG_CACHE_HOME/sieve, else ~/.cache/sieve):
#   bench-smollm2-135m.{Q8_0,Q4_0}.gguf      (~145 / ~80 MB)
#   bench-qwen2.5-0.5b.Q8_0.gguf             (~530 MB)
#   bench-llama3.2-1b.{Q4_0,F16}.gguf        (~700 MB / ~2.5 GB)
# The SmolLM2 Q4_1 file as shipped comes from scripts/fetch_model.sh. The
# Q4_K_M variants are made from these with llama.cpp's llama-quantize, as
# docs/benchmarks.md describes; this script does not build or call llama.cpp.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
tool="$build/tests/cli/make_bench_model"
if [ ! -x "$tool" ]; then
    echo "error: $tool not found; build it first: cmake --build $build --target make_bench_model" >&2
    exit 1
fi
cache="${SIEVE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sieve}"
mkdir -p "$cache"

make_one() {  # shape type
    local out="$cache/bench-$1.$2.gguf"
    if [ ! -s "$out" ]; then
        echo "writing $out ..." >&2
        "$tool" "$1" "$2" "$out.tmp"
        mv "$out.tmp" "$out"
    fi
    echo "$out"
}

make_one smollm2-135m Q8_0
make_one smollm2-135m Q4_0
make_one qwen2.5-0.5b Q8_0
make_one llama3.2-1b Q4_0
make_one llama3.2-1b F16
