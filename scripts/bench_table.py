#!/usr/bin/env python3
"""Puts `sieve bench -o jsonl` and `llama-bench -o jsonl` rows side by side.

    scripts/bench_table.py SIEVE.jsonl LLAMA.jsonl > table.md

Rows are joined on (model file name, n_threads, n_prompt, n_gen, n_depth).
Each cell is mean ± std tok/s (median in brackets); the ratio is of medians
(sieve / llama.cpp), the acceptance measure; % bw is sieve's tg bandwidth
fraction as measured in its run.
"""
import json
import os
import statistics
import sys


def load(path):
    rows = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            key = (os.path.basename(r["model_filename"]), int(r["n_threads"]), int(r["n_prompt"]),
                   int(r["n_gen"]), int(r["n_depth"]))
            rows[key] = r
    return rows


def median_ts(r):
    return r.get("median_ts") or statistics.median(r["samples_ts"])


def test_name(key):
    _, _, p, n, d = key
    name = f"pp{p}" if p else f"tg{n}"
    return name + (f" @ d{d}" if d else "")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sieve, llama = load(sys.argv[1]), load(sys.argv[2])
    print("| model file | threads | test | sieve t/s | llama.cpp t/s | sieve ÷ llama.cpp | sieve % bw |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
    for key in sorted(set(sieve) | set(llama), key=lambda k: (k[0], k[1], k[4], -k[2], k[3])):
        s, l = sieve.get(key), llama.get(key)
        cell = lambda r: f"{r['avg_ts']:.2f} ± {r['stddev_ts']:.2f} [{median_ts(r):.2f}]" if r else "—"
        ratio = f"{median_ts(s) / median_ts(l):.2f}" if s and l else "—"
        bw = f"{100 * s['bw_frac']:.1f}" if s and s.get("bw_frac") is not None else ""
        print(f"| {key[0]} | {key[1]} | {test_name(key)} | {cell(s)} | {cell(l)} | {ratio} | {bw} |")


if __name__ == "__main__":
    main()
