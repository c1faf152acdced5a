# Sourced by the shell tests that launch meshtrain again and again. Needs MPI (mpirun) and MT
# (meshtrain).
# run NP ARGS...: meshtrain ARGS on NP ranks under mpirun, ended after 120 s.
run() {
  local np=$1
  shift
  timeout 120 "$MPI" --oversubscribe --bind-to none -np "$np" "$MT" "$@"
}
