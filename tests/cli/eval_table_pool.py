#!/usr/bin/env python3
"""A long eval split by seed and pooled: sieve eval over 4 samples against
the same 4 run as 2 + 2 (--seed, --samples, --depths at the whole run's
depths, i / 3: not exact in a float, so a depth read at float precision
shows). Every sample of the parts equals the whole run's, field for field
(timings and cache counts aside), and `eval/eval_table.py --pool` of the
parts prints the whole run's table (its wall-time column aside); a seed in
two files is refused.

  eval_table_pool.py SIEVE MODEL EVAL_TABLE
"""
import json
import os
import subprocess
import sys
import tempfile

sieve, model, table = sys.argv[1], sys.argv[2], sys.argv[3]
base = [sieve, "eval", "-m", model, "--task", "passkey,niah_multikey", "--ctx", "384", "-t", "2", "-np", "2",
        "--kv-policy", "snapkv:keep=0.5", "--kv-policy", "quest:budget=64,page=16", "-o", "json"]
TIMING = {"prefill_ms", "decode_ms", "cached_tokens"}


def run(extra, path):
    p = subprocess.run(base + extra, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"FAIL: sieve eval {' '.join(extra)} exited {p.returncode}: {p.stderr[-2000:]}")
    with open(path, "w") as f:
        f.write(p.stdout)
    return json.loads(p.stdout)


def samples(doc):
    return {(s["policy"], s["task"], s["seed"]): {k: v for k, v in s.items() if k not in TIMING}
            for s in doc["samples"]}


def tables(args):
    p = subprocess.run([sys.executable, table] + args, capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        sys.exit(f"FAIL: eval_table.py {' '.join(args)} exited {p.returncode}: {p.stderr}")
    # every table row without its last column (wall s)
    return [line.rsplit("|", 2)[0] for line in p.stdout.splitlines() if line.startswith("|")]


with tempfile.TemporaryDirectory() as tmp:
    whole, a, b = (os.path.join(tmp, n) for n in ("whole.json", "a.json", "b.json"))
    w = samples(run(["--samples", "4"], whole))
    parts = samples(run(["--samples", "2", "--seed", "0", "--depths", repr(0.0) + "," + repr(1 / 3)], a))
    parts.update(samples(run(["--samples", "2", "--seed", "2", "--depths", repr(2 / 3) + "," + repr(1.0)], b)))
    if len(w) != 2 * 4 * 3 or set(w) != set(parts):
        sys.exit(f"FAIL: samples {sorted(w)} against the parts' {sorted(parts)}")
    for key, s in w.items():
        if s != parts[key]:
            diff = {k: (s[k], parts[key].get(k)) for k in s if s[k] != parts[key].get(k)}
            sys.exit(f"FAIL: sample {key} differs between the whole run and its part: {diff}")
    want, got = tables([whole]), tables(["--pool", a, b])
    if want != got or len(want) < 5:
        sys.exit("FAIL: pooled table differs:\n" + "\n".join(want) + "\n---\n" + "\n".join(got))
    p = subprocess.run([sys.executable, table, "--pool", a, a], capture_output=True, text=True, timeout=60)
    if p.returncode == 0 or "is in two files" not in p.stderr:
        sys.exit(f"FAIL: a seed in two files was not refused: rc {p.returncode}, {p.stderr!r}")
print("ok: 4 samples = 2 + 2, sample for sample, and the pooled table is the whole run's")
