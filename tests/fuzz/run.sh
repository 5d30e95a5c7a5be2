#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs them, each for SECONDS,
# over a working corpus seeded from committed inputs:
#   gguf     the GGUF reader and model-config check (fuzz_gguf.cpp), seeded
#            from tests/data/gguf_broken/ and the tiny model;
#   request  the HTTP request path: JSON guards, every endpoint's body parser,
#            kv_policy, chat templates (fuzz_request.cpp), seeded from
#            tests/fuzz/seeds/request/ with tests/fuzz/request.dict.
#
#   tests/fuzz/run.sh [SECONDS] [gguf|request|all] [extra libFuzzer flags...]
#
# SECONDS defaults to 60 and applies to each target; the target to all.
#   tests/fuzz/run.sh 30                       # CI: both targets, 30 s each
#   tests/fuzz/run.sh 3600 request             # one hour on the request path
#   tests/fuzz/run.sh 3600 request -fork=8     # the same hour on 8 processes
#
# The working corpus ($build/fuzz-corpus/TARGET) keeps what a run learns, so
# a later run starts from there. Crashing inputs are written to
# $build/fuzz-artifacts/; reproduce one with $build/tests/fuzz/fuzz_TARGET FILE,
# and commit the fixed one to the target's seeds (tests/fuzz/seeds/request/).
# Needs: clang and libclang-rt-<version>-dev (Debian).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build="${SIEVE_FUZZ_BUILD:-$root/build-fuzz}"
seconds="${1:-60}"
[ $# -gt 0 ] && shift
target=all
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
    target=$1
    shift
fi
case "$target" in
    gguf) targets=(gguf) ;;
    request) targets=(request) ;;
    all) targets=(gguf request) ;;
    *) echo "unknown fuzz target '$target': expected gguf, request or all" >&2; exit 2 ;;
esac
models="${SIEVE_TEST_MODELS:-$root/tests/data/models}"

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DSIEVE_FUZZ=ON -DSIEVE_NATIVE=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target "${targets[@]/#/fuzz_}"
mkdir -p "$build/fuzz-artifacts"

run_gguf() {
    local corpus="$build/fuzz-corpus/gguf"
    mkdir -p "$corpus"
    cp "$root"/tests/data/gguf_broken/*.gguf "$corpus"/
    if [ -f "$models/stories260K.gguf" ]; then
        cp "$models/stories260K.gguf" "$corpus"/
    else
        echo "note: $models/stories260K.gguf not found; fuzzing from the broken files only" >&2
    fi
    # The tiny model (~1.2 MB) bounds max_len; most mutations hit the header anyway.
    "$build/tests/fuzz/fuzz_gguf" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -max_len=1300000 -print_final_stats=1 -artifact_prefix="$build/fuzz-artifacts/gguf-" "$@" "$corpus"
}

run_request() {
    local corpus="$build/fuzz-corpus/request"
    mkdir -p "$corpus"
    cp "$root"/tests/fuzz/seeds/request/* "$corpus"/
    # Bodies past a few KiB add no new paths (the parsers are linear) and slow
    # each run; one input parsed four ways well under a second, so 5 s is a hang.
    "$build/tests/fuzz/fuzz_request" -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 \
        -max_len=8192 -dict="$root/tests/fuzz/request.dict" -print_final_stats=1 \
        -artifact_prefix="$build/fuzz-artifacts/request-" "$@" "$corpus"
}

for t in "${targets[@]}"; do
    echo "== fuzz_$t for ${seconds}s ==" >&2
    "run_$t" "$@"
done
