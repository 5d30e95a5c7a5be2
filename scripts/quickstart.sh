#!/usr/bin/env bash
# The README's first command: install what is missing, build, fetch the
# default model and run the main job on it.
#   scripts/quickstart.sh                 # a chat answer from the default model
#   scripts/quickstart.sh -p "Your question" -n 128
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install_deps.sh
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S . -B build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target sieve
model=$(scripts/fetch_model.sh)

if [ $# -eq 0 ]; then
    set -- -p "What are three good reasons to learn to cook at home?" -n 160
fi
exec ./build/sieve run -m "$model" "$@"
