# Sourced by the script tests of bad input. one_error WANT RC ERR_FILE FRAGMENT: whether a run that
# exited with RC and wrote its stderr to ERR_FILE ended as bad input must: status WANT and exactly
# one "meshtrain: error:" line, holding FRAGMENT. Sets ERR_N (the error lines) and ERR_LINE (the
# first), for the caller's ok/FAIL line.
# A refused run ends with status 2 once every rank has printed what it prints and passed the
# barrier before MPI_Finalize (mesh_exit_error). mpirun then still "kills" the ranks, gone or
# going: SIGCONT, odls_base_sigkill_timeout (1 s) of sleep, SIGTERM, the same sleep, SIGKILL: 2 s
# of every refused mpirun. These scripts signal no job: no grace, a refused case ends ~2 s sooner.
export OMPI_MCA_odls_base_sigkill_timeout=0
one_error() {
  ERR_N=$(grep -c '^meshtrain: error:' "$3")
  ERR_LINE=$(grep -m1 '^meshtrain: error:' "$3")
  [ "$2" -eq "$1" ] && [ "$ERR_N" -eq 1 ] && grep -qF -- "$4" <<<"$ERR_LINE"
}
# one_error_report WANT RC ERR_FILE FRAGMENT ARGS...: one_error's verdict on a run of ARGS, through
# the caller's ok or bad: the error line, or what was wrong and the first lines of ERR_FILE.
one_error_report() {
  local want=$1 rc=$2 ef=$3 frag=$4
  shift 4
  if one_error "$want" "$rc" "$ef" "$frag"; then
    ok "[$*] -> $rc: $ERR_LINE"
  else
    bad "[$*] -> status $rc (want $want), $ERR_N error lines (want 1), want \"$frag\""
    sed 's/^/     | /' "$ef" | head -10
  fi
}
# one_error_case WANT NP FRAGMENT ARGS...: runs the caller's "$MPI" -np NP "$MT" ARGS (stdout and
# stderr into "$WORK"/out and err, with launch.sh's CASE appended, 60 s at most) and reports
# whether it ended as bad input must (one_error_report).
one_error_case() {
  local want=$1 np=$2 frag=$3 out=$WORK/out${CASE:-} err=$WORK/err${CASE:-}
  shift 3
  timeout 60 "$MPI" --oversubscribe --bind-to none -np "$np" "$MT" "$@" >"$out" 2>"$err"
  one_error_report "$want" $? "$err" "$frag" "$@"
}
