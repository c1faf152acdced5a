# Shared by the checkpoint shell tests (sourced). Every script is called as
#   SCRIPT MPIEXEC MESHTRAIN TEXT_FILE WORK_DIR [HELPER]
# and ends with status 0 (pass), 1 (fail) or 77 (skip).
set -u
MPI=$1 MT=$2 TXT=$3 WORK=$4
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
# The small model of the equivalence tests; ε = 1e-6 as there (test_equiv.c says why).
MODEL=(--layers 2 --d-model 32 --heads 4 --kv-heads 2 --seq-len 16 --batch 8 --lr 1e-2
       --warmup 1 --eps 1e-6 --eval-every 0 --data "$TXT")
fails=0

# with_model ARGS...: ARGV = MODEL then ARGS, a flag in ARGS replacing MODEL's (meshtrain refuses
# a flag given twice).
with_model() {
  local i a n
  ARGV=()
  for ((i = 0; i < ${#MODEL[@]}; i += n)); do
    n=1 # a switch, or a flag and its value
    [[ $((i + 1)) -lt ${#MODEL[@]} && ${MODEL[i + 1]} != --* ]] && n=2
    for a in "$@"; do [ "$a" = "${MODEL[i]}" ] && continue 2; done
    ARGV+=("${MODEL[@]:i:n}")
  done
  ARGV+=("$@")
}
# drop_from_model FLAG: MODEL without FLAG and its value (meshtrain refuses a flag that does
# nothing with the others given, e.g. AdamW's --eps with --optimizer sgd).
drop_from_model() {
  local i kept=()
  for ((i = 0; i < ${#MODEL[@]}; i++)); do
    if [ "${MODEL[i]}" = "$1" ]; then i=$((i + 1)); else kept+=("${MODEL[i]}"); fi
  done
  MODEL=("${kept[@]}")
}
# run NP LOG ARGS...: meshtrain on NP ranks with MODEL and ARGS, output in $WORK/LOG; its status.
run() {
  local np=$1 log=$2
  shift 2
  with_model "$@"
  timeout 120 "$MPI" --oversubscribe --bind-to none -np "$np" "$MT" "${ARGV[@]}" >"$WORK/$log" 2>&1
}
pass() { echo "ok   $*"; }
fail() {
  echo "FAIL $*"
  fails=$((fails + 1))
}
# must LOG WHAT STATUS: the run must have exited 0, else fail with its log.
must() {
  if [ "$3" -eq 0 ]; then return 0; fi
  fail "$2: meshtrain exited $3"
  sed 's/^/     | /' "$WORK/$1" | tail -15
  return 1
}
# losses_match A.jsonl B.jsonl K FROM: the losses of steps > FROM present in both metrics files
# agree within K·FLT_EPSILON·(|a|+|b|+1) (K = 0: the printed %.9g values are identical). Prints
# the worst deviation in those units.
losses_match() {
  awk -v k="$3" -v from="$4" '
    function val(line, key,   s) { s = line; sub(".*\"" key "\":", "", s); sub("[,}].*", "", s); return s }
    FNR == NR { a[val($0, "step")] = val($0, "loss"); next }
    { s = val($0, "step"); if (s <= from || !(s in a)) next
      n++; x = a[s]; y = val($0, "loss")
      if (k == 0 && x != y) bad++
      d = (x > y ? x - y : y - x) / (1.1920929e-7 * ((x < 0 ? -x : x) + (y < 0 ? -y : y) + 1))
      if (d > worst) worst = d
      if (k > 0 && d > k) bad++ }
    END { printf "%d steps compared, worst %.2f eps units", n, worst
          exit !(n > 0 && bad == 0) }' "$1" "$2"
}
# no_temp_files DIR...: no *.tmp.* left behind by a save.
no_temp_files() {
  local left
  left=$(find "$@" -name '*.tmp.*' 2>/dev/null)
  [ -z "$left" ] || { echo "     temp files left: $left"; return 1; }
}
finish() {
  echo "$(basename "$0" .sh): $fails failure(s)"
  [ "$fails" -eq 0 ]
}
