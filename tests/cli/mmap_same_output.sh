#!/usr/bin/env bash
# Runs a sieve command with and without --mmap; passes when both exit 0 and
# print the same, non-empty stdout (where the weights live changes no token).
#   mmap_same_output.sh COMMAND [ARGS...]
set -u
a=$("$@" 2>/dev/null) || { echo "FAIL: copied weights: exited $?: $*"; exit 1; }
b=$("$@" --mmap 2>/dev/null) || { echo "FAIL: --mmap: exited $?: $* --mmap"; exit 1; }
if [ -z "$a" ]; then echo "FAIL: no output: $*"; exit 1; fi
if [ "$a" != "$b" ]; then
    printf 'FAIL: outputs differ\n--- copied\n%s\n--- --mmap\n%s\n' "$a" "$b"
    exit 1
fi
echo "ok: same text with and without --mmap"
