# Sourced by the shell tests whose independent cases run concurrently (each mostly waits for
# mpirun's start-up and teardown). Needs WORK (the test's directory) and fails (its count).
# launch FUNCTION ARGS...: runs FUNCTION ARGS in the background, at most LAUNCH_MAX (default 3) at
#   a time, with CASE set to ".N" (N: the launch's number, for the case's own files in WORK); its
#   output is the case's verdict.
# collect: waits for the cases, prints their verdicts in launch order and counts each verdict
#   with a FAIL line in fails.
LAUNCH_N=0
launch() {
  local i=$LAUNCH_N
  LAUNCH_N=$((LAUNCH_N + 1))
  while [ "$(jobs -rp | wc -l)" -ge "${LAUNCH_MAX:-3}" ]; do wait -n; done
  (CASE=.$i "$@" >"$WORK/verdict.$i" 2>&1) &
}
collect() {
  local i
  wait
  for ((i = 0; i < LAUNCH_N; i++)); do
    cat "$WORK/verdict.$i"
    grep -q '^FAIL' "$WORK/verdict.$i" && fails=$((fails + 1))
  done
  LAUNCH_N=0
}
