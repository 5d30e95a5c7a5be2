#!/usr/bin/env bash
# Runs a command and checks its exit status and output.
#
#   expect.sh [--stdin TEXT] [--skip-unless FILE] RC STDOUT_REGEX STDERR_REGEX -- COMMAND [ARGS...]
#
# RC is the exact exit status wanted; the regexes are extended (grep -E) and
# must match somewhere in stdout / stderr ("" matches anything). --stdin feeds
# TEXT (printf %b escapes) to the command. --skip-unless exits 77 (CTest's
# SKIP_RETURN_CODE) with the reason when FILE does not exist.
set -u
stdin_text=""
while [ $# -gt 0 ]; do
    case "$1" in
        --stdin) stdin_text="$2"; shift 2 ;;
        --skip-unless)
            if [ ! -e "$2" ]; then
                echo "skipped: $2 is missing (run scripts/fetch_model.sh to fetch the default model)"
                exit 77
            fi
            shift 2 ;;
        *) break ;;
    esac
done
want_rc="$1"; out_re="$2"; err_re="$3"; shift 3
[ "$1" = "--" ] && shift

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%b' "$stdin_text" | "$@" >"$tmp/out" 2>"$tmp/err"
rc=$?

fail=0
if [ "$rc" != "$want_rc" ]; then
    echo "FAIL: exit status $rc, expected $want_rc"
    fail=1
fi
if [ -n "$out_re" ] && ! grep -Eq -- "$out_re" "$tmp/out"; then
    echo "FAIL: stdout does not match /$out_re/"
    fail=1
fi
if [ -n "$err_re" ] && ! grep -Eq -- "$err_re" "$tmp/err"; then
    echo "FAIL: stderr does not match /$err_re/"
    fail=1
fi
if [ "$fail" != 0 ]; then
    echo "command: $*"
    echo "--- stdout"; head -c 4000 "$tmp/out"
    echo; echo "--- stderr"; head -c 4000 "$tmp/err"
fi
exit "$fail"
