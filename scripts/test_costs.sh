#!/usr/bin/env bash
# test_costs.sh BUILD [SECONDS]: the MT_LONG_TESTS list of tests/CMakeLists.txt from the timings
# CTest kept of the last runs in BUILD (Testing/Temporary/CTestCostData.txt: name, runs, mean
# seconds): every test whose mean took at least SECONDS (default 20), longest first, as the
# set(...) to paste over the old one. Take it from a full suite run on an idle machine: a run of
# a few tests only updates those, and a loaded machine stretches every figure.
set -euo pipefail
data=${1:?usage: test_costs.sh BUILD [SECONDS]}/Testing/Temporary/CTestCostData.txt
min=${2:-20}
[ -s "$data" ] || { echo "test_costs.sh: no $data (run ctest in that build first)" >&2; exit 2; }
awk -v min="$min" '$0 == "---" { exit } NF == 3 && $3 >= min { printf "%s:%d\n", $1, $3 + 0.5 }' \
  "$data" | sort -t: -k2,2nr -k1,1 |
  awk 'BEGIN { line = "set(MT_LONG_TESTS" }
       { if (length(line) + length($0) + 1 > 99) { print line; line = "   " } line = line " " $0 }
       END { print line ")" }'
