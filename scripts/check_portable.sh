#!/usr/bin/env bash
# Compile-checks the kernels and the core for a plain x86-64 CPU (SSE2 only:
# every kernel's portable C++ path), with warnings as errors, so code that
# needs AVX2 outside its #if guards is caught without a second full build.
# A full portable build and test run: cmake -DSIEVE_ARCH=x86-64 (README).
#
#   scripts/check_portable.sh [COMPILER]     # default c++
set -euo pipefail
cd "$(dirname "$0")/.."
cxx="${1:-c++}"
jobs=$(nproc)
printf '%s\n' src/sieve/kernels/cpu/*.cpp src/sieve/core/*.cpp |
    xargs -P "$jobs" -I{} "$cxx" -std=c++20 -O2 -march=x86-64 -Wall -Wextra -Wshadow -Wno-unused-parameter \
        -Werror -Isrc -fsyntax-only {}
echo "portable compile check: ok"
