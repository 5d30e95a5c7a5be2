#!/usr/bin/env bash
# calibrate_lserve.sh SIEVE MODEL: calibrate a head profile, generate with
# lserve over it, and check that a profile of another shape is refused.
set -euo pipefail
sieve="$1"
model="$2"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$sieve" calibrate -m "$model" --ctx 600 --samples 2 --sink 16 --recent 64 -t 1 -o "$dir/p.json" 2>/dev/null
out=$("$sieve" run -m "$model" -p "Once upon a time" -n 40 --temp 0 -t 1 \
      --kv-policy "lserve:static=0.5,sink=8,recent=16,budget=32,page=16,profile=$dir/p.json" 2>"$dir/err") || {
    echo "sieve run with lserve failed:"; cat "$dir/err"; exit 1; }
[ -n "$out" ] || { echo "no output"; exit 1; }
# Another shape: one layer fewer.
python3 - "$dir/p.json" "$dir/bad.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
p["n_layer"] -= 1
p["scores"] = p["scores"][:-1]
json.dump(p, open(sys.argv[2], "w"))
PY
if "$sieve" run -m "$model" -p "Once" -n 4 -t 1 --kv-policy "lserve:profile=$dir/bad.json" >/dev/null 2>"$dir/err2"; then
    echo "a profile of another shape was accepted"; exit 1
fi
grep -q "make one for this model with \`sieve calibrate\`" "$dir/err2" || { echo "unexpected error:"; cat "$dir/err2"; exit 1; }
echo ok
