#!/usr/bin/env python3
"""Markdown tables from `sieve eval -o json` files, one table per context
length, in the layout docs/accuracy.md uses: a row per (policy, KV type), per
task the accuracy with its 95% Wilson interval and k/n (and RULER's
partial-credit score where it differs), the mean / max KL
against the reference and top-1 agreement over the teacher-forced steps
(perplexity reference → policy for ppl), then the KV compression and the
row's wall time summed over the tasks (seconds of engine time: the forced
and free runs, or the reference's run).

    python3 eval/eval_table.py eval-8k.json [eval-16k.json ...]

Several files may give the same length (a later file's rows are added to
the table; a row present in two files is an error: nothing is averaged).

    python3 eval/eval_table.py --baseline OUTDIR/*.json

is the dense-baseline layout (eval/run_baseline.sh's files): only the
reference rows, a row per task, per model and length the accuracy with its
interval and k/n, RULER's partial-credit score and the reference's wall time
(perplexity of the scored tail for ppl).

    python3 eval/eval_table.py --pool half1.json half2.json

pools the samples of runs split by seed (the same rows, disjoint seeds: a
long eval run in parts, `--seed S --samples N --depths ...`) into one cell
per row, recomputed from the samples as `sieve eval` computes a cell (k/n,
Wilson interval, mean over samples of KL and agreement, worst KL, perplexity
over the steps, compression over the rows); the wall time is the parts'
sum. A seed in two files is an error.

    python3 eval/eval_table.py --seeds eval-32k.json

lists, per (task, length) and policy row, the samples (by seed) it loses that
the reference gets right and those it gets that the reference loses, each
with its output, the first teacher-forced step whose argmax parts from the
reference's and the reference's lead there (nats; files from before the
lead was recorded show "?").
"""
import argparse
import json
import math
import os
import sys

from eval_common import wilson

TASK_ORDER = ["passkey", "niah_multikey", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe", "code", "ppl"]


def fmt_acc(c, ruler=True):
    if c["accuracy"] is None:
        return "—"
    s = "%.0f [%.1f, %.1f] (%d/%d)" % (100 * c["accuracy"], 100 * c["acc_lo"], 100 * c["acc_hi"],
                                       c["n_correct"], c["n_scored"])
    # RULER's partial-credit score, where the file has it and it says more.
    if ruler and c.get("ruler") is not None and abs(c["ruler"] - c["accuracy"]) > 1e-9:
        s += " · RULER %.1f" % (100 * c["ruler"])
    return s


def fmt_num(x):
    if x is None:
        return "—"
    if x == 0:
        return "0"
    return "%.3g" % x


def cell_cols(c):
    if c["task"] == "ppl":
        return [f"{c['ppl_ref']:.3f}" + ("" if c["reference"] else f" → {c['ppl']:.3f}"),
                "—" if c["reference"] else f"{fmt_num(c['kl_mean'])} / {fmt_num(c['kl_max'])}",
                "—" if c["reference"] else "%.1f%%" % (100 * c["agreement"])]
    return [fmt_acc(c),
            "—" if c["reference"] else f"{fmt_num(c['kl_mean'])} / {fmt_num(c['kl_max'])}",
            "—" if c["reference"] else "%.1f%%" % (100 * c["agreement"])]


def baseline(paths):
    """A row per task, columns per (model, length): the reference rows only."""
    cells = {}  # (model, ctx) -> {task: cell}
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        model = os.path.basename(doc["config"]["model"]).split(".gguf")[0]
        for c in doc["cells"]:
            if not c["reference"]:
                continue
            col = cells.setdefault((model, c["ctx"]), {})
            if c["task"] in col:
                sys.exit(f"{path}: {model} {c['task']} @{c['ctx']} is in two files")
            col[c["task"]] = c
    cols = sorted(cells)
    tasks = [t for t in TASK_ORDER if any(t in cells[k] for k in cols)]
    tasks += sorted({t for k in cols for t in cells[k]} - set(tasks))
    head = ["task"]
    for model, ctx in cols:
        head += [f"{model} @{ctx}: acc % [95% CI] (k/n)", "RULER %", "wall s"]
    print("| " + " | ".join(head) + " |")
    print("|---|" + "---|---:|---:|" * len(cols))
    for t in tasks:
        row = [t]
        for k in cols:
            c = cells[k].get(t)
            if c is None:
                row += ["not run", "", ""]
            elif t == "ppl":
                row += [f"ppl {c['ppl_ref']:.3f} (scored tail)", "—", "%.0f" % (c["wall_ms"] / 1000)]
            else:
                ruler = "—" if c.get("ruler") is None else "%.1f" % (100 * c["ruler"])
                row += [fmt_acc(c, ruler=False), ruler, "%.0f" % (c["wall_ms"] / 1000)]
        print("| " + " | ".join(row) + " |")


def pooled_cells(paths):
    """Cells recomputed from the samples of several files (disjoint seeds)."""
    groups, walls = {}, {}  # (task, ctx, policy, kv, reference) -> [samples]; -> wall ms
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        for s in doc["samples"]:
            key = (s["task"], s["ctx"], s["policy"], s["kv_type"], s["reference"])
            if any(o["seed"] == s["seed"] for o in groups.get(key, [])):
                sys.exit(f"{path}: seed {s['seed']} of {s['policy']} ({s['kv_type']}) {s['task']} @{s['ctx']} "
                         "is in two files (--pool takes runs split by seed)")
            groups.setdefault(key, []).append(s)
        for c in doc["cells"]:
            key = (c["task"], c["ctx"], c["policy"], c["kv_type"], c["reference"])
            walls[key] = walls.get(key, 0.0) + c["wall_ms"]
    cells = []
    for key, ss in groups.items():
        task, ctx, policy, kv, ref = key
        scored = [s for s in ss if s["scored"]]
        k = sum(1 for s in scored if s["correct"])
        lo, hi = wilson(k, len(scored))
        stepped = [s for s in ss if s["n_steps"] > 0]
        n_tok = sum(s["n_steps"] for s in stepped)
        mean = (lambda f: sum(s[f] for s in stepped) / len(stepped)) if stepped else (lambda f: None)
        kept = sum(s["rows_dense"] / s["compression"] for s in ss if s["compression"])
        cells.append({
            "task": task, "ctx": ctx, "policy": policy, "kv_type": kv, "reference": ref,
            "n_scored": len(scored), "n_correct": k, "accuracy": k / len(scored) if scored else None,
            "acc_lo": lo, "acc_hi": hi,
            "ruler": (sum(s["ruler"] for s in scored) / len(scored)  # files from before it: None
                      if scored and all("ruler" in s for s in scored) else None),
            "kl_mean": None if ref else mean("kl_mean"),
            "kl_max": None if ref or not stepped else max(s["kl_max"] for s in stepped),
            "agreement": None if ref else mean("agreement"),
            "ppl_ref": math.exp(sum(s["nll_ref"] * s["n_steps"] for s in stepped) / n_tok) if n_tok else None,
            "ppl": math.exp(sum(s["nll"] * s["n_steps"] for s in stepped) / n_tok) if n_tok else None,
            "compression": sum(s["rows_dense"] for s in ss) / kept if kept else 0.0,
            "wall_ms": walls.get(key, 0.0),
        })
    return cells


def seeds(paths):
    """Per (task, length) and policy row: samples lost and gained against the reference."""
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        ref = {}  # (task, ctx, seed) -> sample of the reference row
        for s in doc["samples"]:
            if s["reference"] and s["scored"]:
                ref[(s["task"], s["ctx"], s["seed"])] = s
        print(f"{path}:")
        rows = {}  # (task, ctx, policy, kv) -> [samples]
        for s in doc["samples"]:
            if not s["reference"] and s["scored"]:
                rows.setdefault((s["task"], s["ctx"], s["policy"], s["kv_type"]), []).append(s)
        for (task, ctx, policy, kv), samples in rows.items():
            lost, gained = [], []
            for s in sorted(samples, key=lambda x: x["seed"]):
                r = ref.get((task, ctx, s["seed"]))
                if r is None or r["correct"] == s["correct"]:
                    continue
                step, lead = s.get("first_disagree"), s.get("disagree_margin")
                if step is None:  # a file from before the fields
                    where = "step ?"
                elif step == -1:
                    where = "no forced step differs"
                else:
                    where = f"parts at step {step}, reference lead " + ("?" if lead is None else "%.2f" % lead)
                (lost if r["correct"] else gained).append(f"{s['seed']} ({s['output'].strip()!r}; {where})")
            n_ok = sum(1 for s in samples if s["correct"])
            n_ref = sum(1 for s in samples if (task, ctx, s["seed"]) in ref and ref[(task, ctx, s["seed"])]["correct"])
            print(f"  {task} @{ctx} {policy} ({kv}): {n_ok}/{len(samples)} (reference {n_ref})")
            print(f"    lost: {', '.join(lost) if lost else 'none'}")
            if gained:
                print(f"    gained: {', '.join(gained)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--baseline", action="store_true",
                    help="reference rows only, a row per task, columns per model and length")
    ap.add_argument("--seeds", action="store_true",
                    help="per policy row, the samples lost and gained against the reference")
    ap.add_argument("--pool", action="store_true",
                    help="one table from runs split by seed: cells recomputed from the samples")
    args = ap.parse_args()
    if args.baseline:
        return baseline(args.files)
    if args.seeds:
        return seeds(args.files)
    by_ctx = {}  # ctx -> {(policy, kv): {task: cell}}
    tasks_of = {}
    sources = [("the pooled files", pooled_cells(args.files))] if args.pool else []
    for path in [] if args.pool else args.files:
        with open(path) as f:
            sources.append((path, json.load(f)["cells"]))
    for path, path_cells in sources:
        for c in path_cells:
            row = (c["policy"], c["kv_type"])
            cells = by_ctx.setdefault(c["ctx"], {}).setdefault(row, {})
            if c["task"] in cells:
                sys.exit(f"{path}: {row[0]} ({row[1]}) {c['task']} @{c['ctx']} is in two files")
            cells[c["task"]] = c
            ts = tasks_of.setdefault(c["ctx"], [])
            if c["task"] not in ts:
                ts.append(c["task"])
    for ctx in sorted(by_ctx):
        tasks = tasks_of[ctx]
        head = ["policy", "KV"]
        for t in tasks:
            head += [f"{t} @{ctx} " + ("ppl ref → run" if t == "ppl" else "acc % [95% CI]"), "KL mean / max",
                     "top-1 agree"]
        head += ["compression", "wall s"]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * 2 + ("---|---|---:|" * len(tasks)) + "---:|---:|")
        for (policy, kv), cells in by_ctx[ctx].items():
            cols = [policy, kv]
            comp, wall = [], 0.0
            for t in tasks:
                c = cells.get(t)
                if c is None:
                    cols += ["not run", "", ""]
                    continue
                cols += cell_cols(c)
                comp.append(c["compression"])
                wall += c["wall_ms"] / 1000
            cols.append("%.2f×" % (sum(comp) / len(comp)) if comp else "—")
            cols.append("%.0f" % wall)
            print("| " + " | ".join(cols) + " |")
        print()


if __name__ == "__main__":
    main()
