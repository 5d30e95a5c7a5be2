#!/usr/bin/env bash
# Runs a command and checks its exit status and output.
#
#   expect.sh [--stdin TEXT] [--require FILE] RC STDOUT_REGEX STDERR_REGEX -- COMMAND [ARGS...]
#
# RC is the exact exit status wanted; the regexes are extended (grep -E) and
# must match somewhere in stdout / stderr ("" matches anything). --stdin feeds
# TEXT (printf %b escapes) to the command. --require FILE fails the test with
# the reason when FILE does not exist (the default model is fetched by
# scripts/test.sh; a missing file is a broken setup, not a reason to skip).
set -u
stdin_text=""
while [ $# -gt 0 ]; do
    case "$1" in
        --stdin) stdin_text="$2"; shift 2 ;;
        --require)
            if [ ! -e "$2" ]; then
                echo "FAIL: $2 is missing (run scripts/fetch_model.sh to fetch the default model)"
                exit 1
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
