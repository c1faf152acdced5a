#!/bin/bash
# expect_fail.sh RC PATTERN COUNT -- COMMAND...
# Passes if COMMAND exits with status RC ("nonzero": any status but 0) and PATTERN (grep -E)
# occurs exactly COUNT times in its combined output ("+": at least once). Prints the output.
rc_want=$1 pattern=$2 count_want=$3
shift 4
out=$(timeout 60 "$@" 2>&1)
rc=$?
echo "$out"
n=$(printf '%s\n' "$out" | grep -cE -- "$pattern")
if [ "$rc" = 124 ]; then echo "expect_fail: TIMEOUT (a hang)"; exit 1; fi
if [ "$rc_want" = nonzero ]; then [ "$rc" != 0 ] || { echo "expect_fail: exit 0, wanted failure"; exit 1; }
elif [ "$rc" != "$rc_want" ]; then echo "expect_fail: exit $rc, wanted $rc_want"; exit 1; fi
if [ "$count_want" = + ]; then [ "$n" -ge 1 ] || { echo "expect_fail: '$pattern' not found"; exit 1; }
elif [ "$n" != "$count_want" ]; then echo "expect_fail: '$pattern' found $n times, wanted $count_want"; exit 1; fi
echo "expect_fail: ok (exit $rc, '$pattern' x$n)"
