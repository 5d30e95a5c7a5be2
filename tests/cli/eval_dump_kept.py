#!/usr/bin/env python3
"""`sieve eval --dump-kept` end to end on a small model.

    eval_dump_kept.py SIEVE MODEL N_SAMPLES [EVAL ARGS...]

Runs dense and two SnapKV policies (max and avg pooling, keep=0.5) with
--dump-kept and checks every line against what the policy must keep: dense
lanes hold every prompt position; a SnapKV lane holds floor(0.5 n)
distinct ascending positions in [0, n), the last `window` of them the
observation window, and the count equals the sample's rows_kept in the
JSONL output. --exact (f32 activations) must run the same way.
"""
import json
import subprocess
import sys
import tempfile


def main():
    sieve, model, n_want = sys.argv[1], sys.argv[2], int(sys.argv[3])
    extra = sys.argv[4:]
    window = 16
    policies = ["dense", f"snapkv:keep=0.5,window={window},pool=5,pooling=max",
                f"snapkv:keep=0.5,window={window},pool=5,pooling=avg"]
    fail = []
    with tempfile.TemporaryDirectory() as tmp:
        for exact in (False, True):
            dump = f"{tmp}/kept.jsonl"
            cmd = [sieve, "eval", "-m", model, "-o", "jsonl", "--dump-kept", dump] + extra
            for p in policies:
                cmd += ["--kv-policy", p]
            if exact:
                cmd.append("--exact")
            run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if run.returncode != 0:
                print(f"FAIL: {' '.join(cmd)} exited {run.returncode}\n{run.stderr[-2000:]}")
                return 1
            rows = {}
            for line in run.stdout.splitlines():
                s = json.loads(line)
                if not s["reference"]:
                    rows[(s["policy"], s["task"], s["seed"])] = s
            with open(dump) as f:
                kept = [json.loads(line) for line in f if line.strip()]
            tag = "exact" if exact else "q8"
            if len(kept) != len(policies) * n_want:
                fail.append(f"{tag}: {len(kept)} --dump-kept lines, expected {len(policies) * n_want}")
            for k in kept:
                n, lanes = k["n_prompt"], k["kept"]
                where = f"{tag} {k['policy']} {k['task']} seed {k['seed']}"
                if len(lanes) != k["n_layer"] * k["n_head_kv"]:
                    fail.append(f"{where}: {len(lanes)} lanes, expected {k['n_layer'] * k['n_head_kv']}")
                    continue
                s = rows.get((k["policy"], k["task"], k["seed"]))
                if s is None:
                    fail.append(f"{where}: no matching sample in the JSONL output")
                    continue
                if [len(p) for p in lanes] != [r for layer in s["rows_kept"] for r in layer]:
                    fail.append(f"{where}: lane sizes differ from rows_kept")
                for i, pos in enumerate(lanes):
                    if k["policy"] == "dense":
                        if pos != list(range(n)):
                            fail.append(f"{where} lane {i}: dense lane is not 0..{n - 1}")
                        continue
                    if len(pos) != n // 2 or len(set(pos)) != len(pos) or pos != sorted(pos) \
                            or pos[0] < 0 or pos[-1] >= n:
                        fail.append(f"{where} lane {i}: {len(pos)} positions, expected {n // 2} distinct "
                                    f"ascending in [0, {n})")
                    elif pos[-window:] != list(range(n - window, n)):
                        fail.append(f"{where} lane {i}: the observation window is not kept")
            # The two poolings choose differently somewhere (else the key does nothing).
            # (sieve labels a policy with its keys sorted.)
            by = {}
            for k in kept:
                mode = "max" if "pooling=max" in k["policy"] else "avg" if "pooling=avg" in k["policy"] else "-"
                by.setdefault((k["task"], k["seed"]), {})[mode] = k["kept"]
            if any(set(v) != {"max", "avg", "-"} for v in by.values()):
                fail.append(f"{tag}: expected one line per sample for each pooling and dense")
            elif all(v["max"] == v["avg"] for v in by.values()):
                fail.append(f"{tag}: pooling=max and pooling=avg kept the same rows on every sample")
    for f in fail[:20]:
        print("FAIL:", f)
    return 1 if fail else 0


if __name__ == "__main__":
    sys.exit(main())
