#!/usr/bin/env python3
"""Plot the dense baseline: the reference row's accuracy per task against the
context length, one panel per model, from any number of `sieve eval -o json`
files (each cell's reference row; a (model, task, length) given twice is an
error). Error bars are the Wilson 95% intervals; where a task has several
answers and the files carry RULER's partial-credit score, it is drawn dashed. The ppl task, which has no
accuracy, gets its own panel per model: the perplexity of the scored tail.

    python3 eval/plot_baseline.py qwen-*.json smol-*.json -o docs/accuracy-baseline.png

Needs matplotlib (apt-get install python3-matplotlib); runs headless.
"""
import argparse
import json
import os
import sys
from collections import defaultdict


def load(paths):
    """{model: {task: {ctx: cell}}} of reference cells."""
    out = defaultdict(lambda: defaultdict(dict))
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        if not isinstance(doc, dict) or "cells" not in doc:
            sys.exit(f"{path}: expected the object written by `sieve eval -o json` (with \"cells\")")
        model = os.path.basename(doc["config"]["model"])
        for c in doc["cells"]:
            if not c["reference"]:
                continue
            if c["ctx"] in out[model][c["task"]]:
                sys.exit(f"{path}: {model} {c['task']} @{c['ctx']} is in two files")
            out[model][c["task"]][c["ctx"]] = c
    if not out:
        sys.exit("no reference cells in the files given")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("-o", "--output", required=True, help="PNG to write")
    args = ap.parse_args()
    data = load(args.files)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = sorted(data)
    has_ppl = any("ppl" in data[m] for m in models)
    n_rows = 2 if has_ppl else 1
    fig, axes = plt.subplots(n_rows, len(models), figsize=(8 * len(models), 4.2 * n_rows), squeeze=False)
    for j, model in enumerate(models):
        ax = axes[0][j]
        for i, task in enumerate(sorted(t for t in data[model] if t != "ppl")):
            cells = data[model][task]
            ctxs = sorted(cells)
            # Tasks at one length side by side, not on top of each other.
            xs = [c * (1 + 0.025 * i) for c in ctxs]
            acc = [100 * cells[c]["accuracy"] for c in ctxs]
            lo = [a - 100 * cells[c]["acc_lo"] for a, c in zip(acc, ctxs)]
            hi = [100 * cells[c]["acc_hi"] - a for a, c in zip(acc, ctxs)]
            line = ax.errorbar(xs, acc, yerr=[lo, hi], marker="o", capsize=3,
                               label=f"{task} (n={cells[ctxs[0]]['n_scored']})")
            # RULER's partial-credit score, dashed, where the files have it and it differs.
            ruler = [cells[c].get("ruler") for c in ctxs]
            if all(r is not None for r in ruler) and any(abs(r - cells[c]["accuracy"]) > 1e-9
                                                        for r, c in zip(ruler, ctxs)):
                ax.plot(xs, [100 * r for r in ruler], linestyle="--", marker="x",
                        color=line[0].get_color(), label=f"{task}, RULER score")
        ax.set_xscale("log", base=2)
        ax.set_ylim(-5, 105)
        ax.set_xlabel("prompt tokens")
        ax.set_ylabel("dense accuracy %")
        ax.set_title(model, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))  # beside, not over the lines
        if has_ppl:
            ax = axes[1][j]
            cells = data[model].get("ppl", {})
            if cells:
                ctxs = sorted(cells)
                ax.plot(ctxs, [cells[c]["ppl_ref"] for c in ctxs], marker="o")
            else:
                ax.text(0.5, 0.5, "ppl not run", ha="center", transform=ax.transAxes)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("prompt tokens")
            ax.set_ylabel("perplexity of the scored tail")
            ax.grid(alpha=0.3)
    fig.suptitle("sieve eval: the dense reference by task and length")
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
