#!/usr/bin/env bash
# The README's first command: install what is missing, build, fetch the
# default model and run the main job on it: an OpenAI-compatible server.
#   scripts/quickstart.sh                         # sieve serve on 127.0.0.1:8080
#   scripts/quickstart.sh serve --port 9000       # any subcommand with its flags
#   scripts/quickstart.sh run -p "Your question"  # one chat answer on stdout
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install_deps.sh
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S . -B build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target sieve
model=$(scripts/fetch_model.sh)

cmd="${1:-serve}"
[ $# -gt 0 ] && shift
if [ "$cmd" = "serve" ]; then
    cat >&2 <<MSG
sieve serve is starting on the default model. From another terminal:
  curl -s http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"messages": [{"role": "user", "content": "What is the capital of Japan?"}], "max_tokens": 64}'
MSG
fi
exec ./build/sieve "$cmd" -m "$model" "$@"
