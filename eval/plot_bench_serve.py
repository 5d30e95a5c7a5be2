#!/usr/bin/env python3
"""Plot `sieve bench-serve --json` results: output-token throughput and TTFT
(median and p99) against max concurrency, one line per input file.

    sieve bench-serve URL --sweep 1,2,4,8,16 --json sieve.json
    python3 eval/plot_bench_serve.py sieve.json llama.json -o serving.png

Labels default to the file names; --label sets them in order. Needs
matplotlib (pip install matplotlib); runs headless.
"""
import argparse
import json
import os
import sys


def load_runs(path):
    with open(path) as f:
        runs = json.load(f)
    if not isinstance(runs, list) or not runs:
        sys.exit(f"{path}: expected a JSON array of runs as written by sieve bench-serve --json")
    points = []
    for i, r in enumerate(runs):
        try:
            c = int(r["max_concurrency"])
            points.append((c, float(r["output_throughput"]), float(r["ttft_ms"]["median"]),
                           float(r["ttft_ms"]["p99"]), int(r["failed"])))
        except (KeyError, TypeError, ValueError) as e:
            sys.exit(f"{path}: run {i} lacks a field ({e}); is this a bench-serve --json file?")
    if any(p[0] == 0 for p in points) and len(points) > 1:
        sys.exit(f"{path}: runs with unbounded concurrency cannot be placed on a concurrency axis")
    return sorted(points)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+", help="files written by sieve bench-serve --json")
    ap.add_argument("-o", "--output", default="bench_serve.png", help="PNG to write (default: %(default)s)")
    ap.add_argument("--label", action="append", default=[], help="series label, once per input file")
    ap.add_argument("--title", default="", help="figure title")
    args = ap.parse_args()
    if args.label and len(args.label) != len(args.json):
        sys.exit(f"--label given {len(args.label)} times for {len(args.json)} files")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_tp, ax_ttft) = plt.subplots(1, 2, figsize=(11, 4.2))
    all_conc = set()
    for i, path in enumerate(args.json):
        label = args.label[i] if args.label else os.path.splitext(os.path.basename(path))[0]
        pts = load_runs(path)
        conc = [p[0] for p in pts]
        all_conc.update(conc)
        line, = ax_tp.plot(conc, [p[1] for p in pts], marker="o", label=label)
        ax_ttft.plot(conc, [p[2] for p in pts], marker="o", color=line.get_color(), label=f"{label} p50")
        ax_ttft.plot(conc, [p[3] for p in pts], marker="^", linestyle="--", color=line.get_color(),
                     label=f"{label} p99")
        for c, *_rest, failed in pts:
            if failed:
                print(f"{path}: concurrency {c}: {failed} failed requests", file=sys.stderr)
    for ax in (ax_tp, ax_ttft):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(all_conc), [str(c) for c in sorted(all_conc)])
        ax.minorticks_off()
        ax.set_xlabel("max concurrency")
        ax.grid(True, alpha=0.3)
        ax.legend()
    ax_tp.set_ylabel("output tokens / s")
    ax_tp.set_title("output-token throughput")
    ax_ttft.set_ylabel("ms")
    ax_ttft.set_title("time to first token")
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
