#!/bin/sh
# expect.sh STATUS REGEX CMD...: runs CMD and fails unless it exits with STATUS and its output
# (stdout and stderr together) matches the extended regular expression REGEX.
want=$1
re=$2
shift 2
out=$("$@" 2>&1)
got=$?
printf '%s\n' "$out" | tail -n 5
[ "$got" -eq "$want" ] || { echo "FAIL: exit status $got, expected $want"; exit 1; }
printf '%s\n' "$out" | grep -Eq -- "$re" || { echo "FAIL: output does not match /$re/"; exit 1; }
echo "ok: status $got, output matches /$re/"
