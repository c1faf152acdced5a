# Sourced by the script tests of bad input. one_error WANT RC ERR_FILE FRAGMENT: whether a run that
# exited with RC and wrote its stderr to ERR_FILE ended as bad input must: status WANT and exactly
# one "meshtrain: error:" line, holding FRAGMENT. Sets ERR_N (the error lines) and ERR_LINE (the
# first), for the caller's ok/FAIL line.
one_error() {
  ERR_N=$(grep -c '^meshtrain: error:' "$3")
  ERR_LINE=$(grep -m1 '^meshtrain: error:' "$3")
  [ "$2" -eq "$1" ] && [ "$ERR_N" -eq 1 ] && grep -qF -- "$4" <<<"$ERR_LINE"
}
# one_error_case WANT NP FRAGMENT ARGS...: runs the caller's "$MPI" -np NP "$MT" ARGS (stdout and
# stderr into "$WORK"/out and err, 60 s at most) and reports through the caller's ok or bad
# whether it ended as bad input must (one_error), with the error line or the first lines of
# stderr.
one_error_case() {
  local want=$1 np=$2 frag=$3
  shift 3
  timeout 60 "$MPI" --oversubscribe --bind-to none -np "$np" "$MT" "$@" >"$WORK/out" 2>"$WORK/err"
  local rc=$?
  if one_error "$want" "$rc" "$WORK/err" "$frag"; then
    ok "[$*] -> $rc: $ERR_LINE"
  else
    bad "[$*] -> status $rc (want $want), $ERR_N error lines (want 1), want \"$frag\""
    sed 's/^/     | /' "$WORK/err" | head -10
  fi
}
