#!/usr/bin/env bash
# Builds the GGUF fuzzer with clang and runs it over a working corpus seeded
# from the committed broken files and the tiny model.
#
#   tests/fuzz/run.sh [SECONDS] [extra libFuzzer flags...]     (default 60 s)
#
# Needs: clang and libclang-rt-<version>-dev (Debian). Crashing inputs are
# written to $build/fuzz-artifacts/; reproduce one with
#   $build/tests/fuzz/fuzz_gguf FILE
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build="${SIEVE_FUZZ_BUILD:-$root/build-fuzz}"
seconds="${1:-60}"
[ $# -gt 0 ] && shift
models="${SIEVE_TEST_MODELS:-$root/tests/data/models}"

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DSIEVE_FUZZ=ON -DSIEVE_NATIVE=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target fuzz_gguf

corpus="$build/fuzz-corpus/gguf"
mkdir -p "$corpus" "$build/fuzz-artifacts"
cp "$root"/tests/data/gguf_broken/*.gguf "$corpus"/
if [ -f "$models/stories260K.gguf" ]; then
    cp "$models/stories260K.gguf" "$corpus"/
else
    echo "note: $models/stories260K.gguf not found; fuzzing from the broken files only" >&2
fi

# The tiny model (~1.2 MB) bounds max_len; most mutations hit the header anyway.
exec "$build/tests/fuzz/fuzz_gguf" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=1300000 -print_final_stats=1 -artifact_prefix="$build/fuzz-artifacts/" "$@" "$corpus"
