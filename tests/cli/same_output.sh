#!/usr/bin/env bash
# Runs a command twice; passes when both runs exit 0 and print the same,
# non-empty stdout (reproducibility: same seed, same text).
#   same_output.sh COMMAND [ARGS...]
set -u
a=$("$@" 2>/dev/null) || { echo "FAIL: first run exited $?: $*"; exit 1; }
b=$("$@" 2>/dev/null) || { echo "FAIL: second run exited $?: $*"; exit 1; }
if [ -z "$a" ]; then echo "FAIL: no output: $*"; exit 1; fi
if [ "$a" != "$b" ]; then
    printf 'FAIL: outputs differ\n--- first\n%s\n--- second\n%s\n' "$a" "$b"
    exit 1
fi
