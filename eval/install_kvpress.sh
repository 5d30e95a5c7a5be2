#!/usr/bin/env bash
# Installs the kvpress peer (NVIDIA kvpress with PyPI's torch and
# transformers) into a virtual environment in the cache, once, for
# eval/kvpress_check.py. Not part of the build or the tests: PyPI's torch
# wheel pulls ~3 GB of CUDA libraries even though only its CPU path is used.
# Prints the environment's python.
#
#   PY=$(eval/install_kvpress.sh)
#   $PY eval/kvpress_check.py -m MODEL ...
set -euo pipefail

cache="${SIEVE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sieve}"
venv="$cache/kvpress-venv"
# The versions docs/accuracy.md's cross-check ran with.
pins=(kvpress==0.5.5 torch==2.15.0 transformers==5.2.0 gguf==0.19.0)

if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import kvpress, gguf" 2>/dev/null; then
    echo "$venv/bin/python"
    exit 0
fi
mkdir -p "$cache"
echo "installing ${pins[*]} into $venv (several GB; minutes) ..." >&2
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "${pins[@]}" >&2
echo "$venv/bin/python"
