# Sourced by a shell test of the meshtrain command with its arguments, `. cli_case.sh "$@"`, the
# arguments being MPIEXEC MESHTRAIN TEXT_FILE WORK_DIR (tests/CMakeLists.txt, mt_add_cli_test):
# sets MPI, MT, TXT and WORK (made), counts failures in `fails` through ok and bad (each prints
# its line), and brings run NP ARGS... (run_mt.sh) and case_ WANT NP FRAGMENT ARGS...
# (one_error_case: a run that must end as bad input), same_h5 A B GROUPS DATASET... (whether
# two checkpoints hold the same datasets bit for bit), and moe_counts FILE and moe_some_dropped
# FILE SLOTS STEPS (the experts' counts of a --metrics file).
MPI=$1 MT=$2 TXT=$3 WORK=$4
. "$(dirname "${BASH_SOURCE[0]}")/one_error.sh"
. "$(dirname "${BASH_SOURCE[0]}")/run_mt.sh"
mkdir -p "$WORK"
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
case_() { one_error_case "$@"; }

# same_h5 A B GROUPS DATASET...: status 0 if every /GROUP/DATASET (GROUPS: a space-separated list,
# e.g. "params optimizer/m optimizer/v") of checkpoint A equals B's bit for bit (h5diff).
same_h5() {
  local a=$1 b=$2 groups=$3 d g
  shift 3
  for d in "$@"; do
    for g in $groups; do
      h5diff -q "$a" "$b" "/$g/$d" "/$g/$d" >/dev/null 2>&1 || return 1
    done
  done
}

# moe_counts FILE: for each step of the --metrics FILE, "KEPT DROPPED": the step's expert_tokens
# summed, and its dropped share.
moe_counts() {
  sed -E 's/.*"moe_dropped":([^,]*),"expert_tokens":\[(.*)\]\}/\1 \2/' "$1" |
    awk '{ s = 0; n = split($2, v, /[^0-9]+/); for (i = 1; i <= n; i++) s += v[i]; print s, $1 }'
}

# moe_some_dropped FILE SLOTS STEPS: status 0 if FILE has STEPS steps and in each, kept +
# dropped share·SLOTS = SLOTS (within 0.01) with at least one slot dropped.
moe_some_dropped() {
  moe_counts "$1" |
    awk -v n="$2" -v steps="$3" '{ d = $2 * n; if (d < 1 || $1 + d < n - 0.01 || $1 + d > n + 0.01) bad = 1 }
                                 END { exit bad || NR != steps }'
}
