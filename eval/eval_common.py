"""Helpers shared by the scripts that read `sieve eval` output
(plot_eval.py, kvpress_check.py); they mirror sieve's C++ definitions so the
scripts and the tool report the same numbers."""
import math


def wilson(k, n, z=1.96):
    """Wilson score interval of k successes in n (src/sieve/eval/eval_metrics.h)."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def default_max_tokens(task):
    """sieve eval's generated tokens per task (eval_task_max_tokens in eval_run.cpp)."""
    if task in ("passkey", "niah_multikey", "code"):
        return 32
    return 128 if task in ("vt", "cwe") else 64
