#!/usr/bin/env bash
# Builds sieve and runs the whole test suite:
#   1. Release build with warnings as errors; every CTest test (unit tests,
#      model-vs-reference tests, CLI tests); the kernels compile-checked for
#      x86-64 without AVX2 (scripts/check_portable.sh);
#   2. the unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer,
#      and the server fault tests (tests/server/test_faults.py) against the
#      sanitized server;
#   3. short libFuzzer runs of the GGUF reader and of the HTTP request path
#      (SIEVE_FUZZ_SECONDS each, default 30; 0 skips them).
# Needs what scripts/install_deps.sh installs, and the default model (fetched
# here into the cache if it is not there yet).
#
#   scripts/test.sh            # everything
#   SIEVE_SKIP_ASAN=1 scripts/test.sh   # quicker local loop: no sanitizer pass
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=$(nproc)
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)

scripts/fetch_model.sh >/dev/null

echo "== release build ==" >&2
cmake -S . -B build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DSIEVE_WERROR=ON >/dev/null
cmake --build build -j "$jobs"
echo "== tests ==" >&2
ctest --test-dir build --output-on-failure -j "$jobs"
echo "== portable compile check (x86-64 without AVX2) ==" >&2
scripts/check_portable.sh

if [ -z "${SIEVE_SKIP_ASAN:-}" ]; then
    echo "== unit tests under ASan/UBSan ==" >&2
    cmake -S . -B build-asan "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSIEVE_WERROR=ON \
        -DSIEVE_SANITIZE=ON -DSIEVE_BENCH=OFF >/dev/null
    cmake --build build-asan -j "$jobs"
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        ctest --test-dir build-asan --output-on-failure -j "$jobs" -L unit
    echo "== faults on the wire against the ASan/UBSan server ==" >&2
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        ctest --test-dir build-asan --output-on-failure -R '^server\.faults$'
fi

fuzz_seconds="${SIEVE_FUZZ_SECONDS:-30}"
if [ "$fuzz_seconds" -gt 0 ]; then
    echo "== libFuzzer: GGUF reader and request path, ${fuzz_seconds}s each ==" >&2
    tests/fuzz/run.sh "$fuzz_seconds" all
fi
