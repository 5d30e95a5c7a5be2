#!/usr/bin/env python3
"""Plot `sieve eval -o json` results: accuracy and KL(dense || policy) against
the compression ratio (dense KV rows / kept rows), one marker series per
policy family, one column of panels per context length.

    sieve eval -m MODEL --task passkey,niah_multikey --ctx 4096,8192 \\
        --kv-policy dense,snapkv:budget=512,snapkv:budget=1024 -o json > eval.json
    python3 eval/plot_eval.py eval.json -o eval.png

Accuracy is averaged over the selected tasks (--task picks some; ppl, which
has no accuracy, is left out of the top row), with the Wilson 95% interval of
the pooled samples as error bars. KL is the mean over the same cells, on a
symlog axis because dense-vs-dense is exactly 0. Policies of one name (e.g.
snapkv at several budgets) are joined by a line in order of compression.
Needs matplotlib (apt-get install python3-matplotlib, or pip install
matplotlib); runs headless.
"""
import argparse
import json
import sys
from collections import defaultdict

from eval_common import wilson


def load_cells(path, tasks):
    with open(path) as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or "cells" not in doc:
        sys.exit(f"{path}: expected the object written by `sieve eval -o json` (with \"cells\")")
    cells = [c for c in doc["cells"] if not tasks or c["task"] in tasks]
    if not cells:
        sys.exit(f"{path}: no cells for tasks {sorted(tasks)}")
    return doc["config"], cells


def points_by_ctx(cells):
    """{ctx: {row label: point}} with accuracy pooled over tasks, KL and compression averaged."""
    acc = defaultdict(lambda: defaultdict(lambda: {"k": 0, "n": 0, "kl": [], "comp": [], "ref": False}))
    for c in cells:
        label = f"{c['policy']} ({c['kv_type']})"
        p = acc[c["ctx"]][label]
        p["ref"] = c["reference"]
        p["kv_type"] = c["kv_type"]
        p["name"] = c["policy"].split(":")[0]
        p["k"] += c["n_correct"]
        p["n"] += c["n_scored"]
        if c["kl_mean"] is not None:
            p["kl"].append(c["kl_mean"])
        p["comp"].append(c["compression"])
    return acc


def draw(config, cells, out, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_ctx = points_by_ctx(cells)
    ctxs = sorted(by_ctx)
    fig, axes = plt.subplots(2, len(ctxs), figsize=(4.2 * len(ctxs) + 1, 7), squeeze=False, sharex="col")
    markers = "osD^v<>ph*"
    names = sorted({p["name"] for pts in by_ctx.values() for p in pts.values()})
    for col, ctx in enumerate(ctxs):
        ax_acc, ax_kl = axes[0][col], axes[1][col]
        series = defaultdict(list)
        kl_top = 0.0
        for label, p in by_ctx[ctx].items():
            comp = sum(p["comp"]) / len(p["comp"])
            kl = sum(p["kl"]) / len(p["kl"]) if p["kl"] else None
            kl_top = max(kl_top, kl or 0.0)
            key = f"dense reference ({p['kv_type']})" if p["ref"] else f"{p['name']} ({p['kv_type']})"
            series[key].append((comp, p, kl, label))
        for key, pts in sorted(series.items()):
            pts.sort(key=lambda t: t[0])
            m = markers[names.index(pts[0][1]["name"]) % len(markers)]
            style = dict(marker=m, linestyle="-" if len(pts) > 1 else "none", label=key)
            if pts[0][1]["ref"]:
                style.update(color="black", marker="*", markersize=11)
            scored = [(c, p) for c, p, _, _ in pts if p["n"] > 0]
            if scored:
                xs = [c for c, _ in scored]
                ys = [100 * p["k"] / p["n"] for _, p in scored]
                lo = [y - 100 * wilson(p["k"], p["n"])[0] for y, (_, p) in zip(ys, scored)]
                hi = [100 * wilson(p["k"], p["n"])[1] - y for y, (_, p) in zip(ys, scored)]
                ax_acc.errorbar(xs, ys, yerr=[lo, hi], capsize=3, **style)
            kls = [(c, kl) for c, _, kl, _ in pts if kl is not None]
            if kls and not pts[0][1]["ref"]:
                ax_kl.plot([c for c, _ in kls], [kl for _, kl in kls], **style)
        ax_acc.set_title(f"{ctx} tokens")
        ax_acc.set_ylim(-5, 105)
        ax_acc.set_ylabel("accuracy % (95% Wilson)")
        # symlog: dense against itself is exactly 0, policies span decades.
        ax_kl.set_yscale("symlog", linthresh=1e-4)
        ax_kl.set_ylim(0, max(1e-3, 3 * kl_top))
        ax_kl.set_ylabel("mean KL(dense ‖ policy), nats")
        ax_kl.set_xlabel("compression (dense rows / kept rows)")
        for ax in (ax_acc, ax_kl):
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
    model = config.get("model", "").split("/")[-1]
    tasks = ", ".join(sorted({c["task"] for c in cells}))
    fig.suptitle(title or f"sieve eval: {model} — {tasks}, {config.get('n_samples')} samples per cell")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", help="file written by sieve eval -o json")
    ap.add_argument("-o", "--output", default="eval.png", help="PNG to write (default: %(default)s)")
    ap.add_argument("--task", action="append", default=[], help="only these tasks (repeatable; default: all)")
    ap.add_argument("--title", default="", help="figure title")
    args = ap.parse_args()
    config, cells = load_cells(args.json, set(args.task))
    draw(config, cells, args.output, args.title)


if __name__ == "__main__":
    main()
