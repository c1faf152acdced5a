#!/usr/bin/env bash
# A checkpoint saved across hosts, resumed on one host, bit-exactly; --cross-hosts. 4 ranks of FSDP+TP
# (x across 2 hosts, y inside each) train 8 steps and save at steps 4 and 8: every rank writes its
# own hyperslab of the shared file system's file with MPI-IO from its own host. The same mesh
# and scheme then resumes from step 4 with all 4 ranks on one host: its step-8 checkpoint
# (params, m, v) is bit-identical to the 2-host run's (`ckpt diff` status 0), and so are the
# losses of steps 5-8. The start-up plan names the axes across hosts (x on 2 hosts, none on 1).
# With --cross-hosts y, y crosses the hosts instead and x stays inside: only the processes move,
# so the losses are bit-identical to the default placement's.
# usage: ckpt.sh MPIEXEC MESHTRAIN TEXT_FILE WORK_DIR
. "$(dirname "$0")/../ckpt/lib.sh"
. "$(dirname "$0")/netns.sh"
CL_MPIRUN=$MPI
cluster_up 2
FSDP_TP=(--mesh x=2,y=2 --dp x --zero 3 --tensor y)
STEPS=(--steps 8 --save-every 4)

# run_on HOSTFILE LOG ARGS...: meshtrain on the 4 slots of HOSTFILE (from host 0)
run_on() {
  local hf=$1 log=$2
  shift 2
  CL_HOSTFILE=$hf cluster_mpirun -np 4 "$MT" "${MODEL[@]}" "$@" >"$WORK/$log" 2>&1
}
echo "${CL_ADDR[0]} slots=4" >"$WORK/one_host"
run_on "$CL_HOSTFILE" a.log "${STEPS[@]}" "${FSDP_TP[@]}" --ckpt-dir "$WORK/a" \
  --metrics "$WORK/a.jsonl"
if must a.log "4 ranks on 2 hosts" $?; then
  run_on "$WORK/one_host" b.log "${STEPS[@]}" "${FSDP_TP[@]}" --ckpt-dir "$WORK/b" \
    --metrics "$WORK/b.jsonl" --resume "$WORK/a/step_000004.h5"
  if must b.log "4 ranks on 1 host, resumed" $?; then
    if "$MT" ckpt diff "$WORK/a/step_000008.h5" "$WORK/b/step_000008.h5" >"$WORK/diff" 2>&1 &&
       msg=$(losses_match "$WORK/a.jsonl" "$WORK/b.jsonl" 0 4); then
      pass "saved on 2 hosts, resumed on 1: step-8 params, m, v and losses bit-identical ($msg)"
    else
      fail "resume on one host is not bit-identical to the 2-host run"; tail -5 "$WORK/diff"
      echo "     ${msg:-}"
    fi
    no_temp_files "$WORK/a" "$WORK/b" || fail "temp files left behind"
  fi
  grep -q "^hosts: 2 hosts; axes across hosts: x; inside a host: y (default" "$WORK/a.log" &&
    grep -q "^hosts: 1 host; axes across hosts: none; inside a host: xy" "$WORK/b.log" &&
    pass "the plan names the axes across hosts: x on 2 hosts, none on 1" ||
    fail "hosts line: $(grep -h '^hosts:' "$WORK/a.log" "$WORK/b.log")"
  run_on "$CL_HOSTFILE" y.log --steps 8 "${FSDP_TP[@]}" --cross-hosts y --metrics "$WORK/y.jsonl"
  if must y.log "--cross-hosts y" $?; then
    if grep -q "^hosts: 2 hosts; axes across hosts: y; inside a host: x (axes across hosts chosen" \
         "$WORK/y.log" && msg=$(losses_match "$WORK/a.jsonl" "$WORK/y.jsonl" 0 0); then
      pass "--cross-hosts y: y across hosts, x inside; losses bit-identical to x across ($msg)"
    else
      fail "--cross-hosts y: $(grep '^hosts:' "$WORK/y.log"); ${msg:-}"
    fi
  fi
fi
finish
