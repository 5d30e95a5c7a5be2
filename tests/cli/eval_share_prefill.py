#!/usr/bin/env python3
"""sieve eval with the prompt KV shared between rows (the default) against
--no-prefix-cache (every run computes its whole prompt): every sample's
result is the same, field for field (answers, KL, agreement, NLL, rows
kept) — only the timings and the cached-token counts differ. Rows that may
reuse the prompt (dense, quest, streaming; snapkv all but its window) map
all of it from the cache but the last block; h2o, which scores every prompt
query, reports none; without sharing nothing comes from the cache. Samples
run in groups of -np (5 samples at -np 2: groups of 2, 2 and 1).

  eval_share_prefill.py SIEVE MODEL
"""
import json
import subprocess
import sys

sieve, model = sys.argv[1], sys.argv[2]
policies = ["dense", "snapkv:keep=0.5", "h2o:keep=0.5", "quest:budget=64,page=16", "streaming:keep=0.5"]
base = [sieve, "eval", "-m", model, "--task", "passkey,ppl", "--ctx", "384", "--samples", "5",
        "-t", "2", "-np", "2", "--ppl-tokens", "24", "-o", "json"]
for p in policies:
    base += ["--kv-policy", p]


def run(extra):
    p = subprocess.run(base + extra, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"FAIL: sieve eval {' '.join(extra)} exited {p.returncode}: {p.stderr[-2000:]}")
    return json.loads(p.stdout)


shared, alone = run([]), run(["--no-prefix-cache"])
fail = []
if not shared["config"]["share_prefill"] or alone["config"]["share_prefill"]:
    fail.append("config.share_prefill does not say which mode ran")
if len(shared["samples"]) != len(alone["samples"]) or len(shared["samples"]) != 2 * 5 * 6:
    fail.append(f"{len(shared['samples'])} / {len(alone['samples'])} samples, expected 60 each")
timing = {"prefill_ms", "decode_ms", "cached_tokens"}
cached = {}
for a, b in zip(shared["samples"], alone["samples"]):
    what = f"{a['policy']} {a['task']} seed {a['seed']}"
    for k in a:
        if k not in timing and a[k] != b[k]:
            fail.append(f"{what}: {k} differs: {str(a[k])[:60]} vs {str(b[k])[:60]}")
    if b["cached_tokens"] != 0:
        fail.append(f"{what}: {b['cached_tokens']} cached tokens without sharing")
    if a["error"]:
        fail.append(f"{what}: error {a['error']}")
    cached.setdefault(a["policy"], []).append(a["cached_tokens"])
    # Whole 16-token blocks of the prompt, less the token that must be
    # computed for the first logits; snapkv also computes its 32-query window.
    least = {"dense": 16, "quest:budget=64,page=16": 16, "streaming:keep=0.5": 16, "snapkv:keep=0.5": 32 + 16}
    if a["policy"] in least and a["cached_tokens"] < a["n_prompt"] - least[a["policy"]]:
        fail.append(f"{what}: {a['cached_tokens']} of {a['n_prompt']} prompt tokens from the cache")
    if a["policy"] == "dense" and (a["kl_max"] != 0.0 or a["agreement"] != 1.0):
        fail.append(f"{what}: dense against the reference: KL max {a['kl_max']}, agreement {a['agreement']}")
for pol in ("dense", "snapkv:keep=0.5", "quest:budget=64,page=16", "streaming:keep=0.5"):
    if len(cached.get(pol, [])) != 10:
        fail.append(f"{pol}: {len(cached.get(pol, []))} samples, expected 10")
if any(cached.get("h2o:keep=0.5", [1])):
    fail.append(f"h2o: cached tokens {cached.get('h2o:keep=0.5')}, expected none (it scores every query)")
if fail:
    print("FAIL:\n  " + "\n  ".join(fail[:30]))
    sys.exit(1)
print(f"ok: {len(shared['samples'])} samples identical; cached tokens per row: "
      + ", ".join(f"{p} {min(v)}-{max(v)}" for p, v in cached.items()))
