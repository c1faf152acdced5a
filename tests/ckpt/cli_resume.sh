#!/usr/bin/env bash
# Resume through the meshtrain CLI on real data (tinyshakespeare, random order):
#  - exact: a 4-rank FSDP+TP run of 8 steps with --save-every 4 vs the same run resumed from its
#    step-4 checkpoint: the step-8 checkpoints (params, m, v) are bit-identical (`ckpt diff`
#    status 0) and so are the printed losses of steps 5-8;
#  - across processes and meshes: 4 ranks (FSDP+TP) -> 1 rank, 1 rank -> 4 ranks (DP),
#    4 ranks -> 2-stage pipeline: losses and final arrays within k = 200 units of
#    FLT_EPSILON·(|a|+|b|+1) of the uninterrupted 1-rank run;
#  - `--resume latest` takes the newest complete checkpoint and ignores a temp file of an
#    interrupted save; --keep 1 deletes older checkpoints only after the new one, and the stale
#    temp file; `ckpt info` prints the header and verifies every checksum;
#  - read_ckpt.py (h5py + numpy, no meshtrain code) reads the 4-rank file and recomputes every
#    checksum from the documented definition (skipped without h5py/numpy).
# usage: cli_resume.sh MPIEXEC MESHTRAIN TEXT_FILE WORK_DIR
. "$(dirname "$0")/lib.sh"
K=200
FSDP_TP=(--mesh x=2,y=2 --dp x --zero 3 --tensor y)
STEPS=(--steps 8 --save-every 4)

run 1 ref.log "${STEPS[@]}" --ckpt-dir "$WORK/ref" --metrics "$WORK/ref.jsonl"
must ref.log "1-rank reference" $? || exit 1
run 4 a.log "${STEPS[@]}" "${FSDP_TP[@]}" --ckpt-dir "$WORK/a" --metrics "$WORK/a.jsonl"
must a.log "4-rank FSDP+TP run" $? || exit 1

# exact resume on the same mesh
run 4 b.log "${STEPS[@]}" "${FSDP_TP[@]}" --ckpt-dir "$WORK/b" --metrics "$WORK/b.jsonl" \
  --resume "$WORK/a/step_000004.h5"
if must b.log "4-rank resume" $?; then
  if "$MT" ckpt diff "$WORK/a/step_000008.h5" "$WORK/b/step_000008.h5" >"$WORK/diff_ab" 2>&1 &&
     msg=$(losses_match "$WORK/a.jsonl" "$WORK/b.jsonl" 0 4); then
    pass "FSDP+TP 4 ranks, 4 steps + resume + 4 steps: step-8 params, m, v and losses bit-identical ($msg)"
  else
    fail "FSDP+TP resume is not bit-identical"; tail -5 "$WORK/diff_ab"; echo "     $msg"
  fi
fi

# across meshes and processes: NAME NP FROM_DIR FLAGS...
cross() {
  local name=$1 np=$2 from=$3
  shift 3
  run "$np" "$name.log" "${STEPS[@]}" "$@" --ckpt-dir "$WORK/$name" --metrics "$WORK/$name.jsonl" \
    --resume "$WORK/$from/step_000004.h5"
  must "$name.log" "$name" $? || return
  local msg
  if msg=$(losses_match "$WORK/ref.jsonl" "$WORK/$name.jsonl" $K 4) &&
     "$MT" ckpt diff "$WORK/ref/step_000008.h5" "$WORK/$name/step_000008.h5" --tol $K \
       >"$WORK/diff_$name" 2>&1; then
    pass "$name: losses of steps 5-8 ($msg) and step-8 arrays within k = $K of the 1-rank run"
  else
    fail "$name: beyond k = $K of the 1-rank run ($msg)"; grep -E "DIFF|differ" "$WORK/diff_$name"
  fi
}
cross fsdp_tp4_to_1rank 1 a
cross 1rank_to_dp4 4 ref --mesh x=4 --dp x
cross fsdp_tp4_to_pipe2 2 a --mesh z=2 --pipeline z

# --resume latest, a stale temp file, --keep
mkdir -p "$WORK/l" && cp "$WORK/a/step_000004.h5" "$WORK/l/" &&
  head -c 1000 "$WORK/a/step_000008.h5" >"$WORK/l/step_000006.h5.tmp.4242"
run 2 l.log "${STEPS[@]}" --ckpt-dir "$WORK/l" --resume latest --keep 1
if must l.log "--resume latest" $?; then
  if grep -q "resumed from $WORK/l/step_000004.h5" "$WORK/l.log" &&
     [ "$(cd "$WORK/l" && ls)" = "step_000008.h5" ]; then
    pass "--resume latest took step 4 past a temp file; --keep 1 left only step_000008.h5"
  else
    fail "--resume latest / --keep 1: $(grep resumed "$WORK/l.log"); left: $(ls "$WORK/l")"
  fi
fi

# ckpt info: header and checksums
if "$MT" ckpt info "$WORK/a/step_000008.h5" >"$WORK/info" 2>&1 &&
   grep -q "step 8 | tokens seen 1024" "$WORK/info" &&
   grep -q "FSDP (ZeRO-3) over X + TP over Y" "$WORK/info" &&
   [ "$(grep -c ' ok$' "$WORK/info")" -eq 36 ]; then
  pass "ckpt info: step, tokens seen, writer's scheme, 36 arrays with verified checksums"
else
  fail "ckpt info"; head -12 "$WORK/info"
fi
# an independent reader (h5py + numpy) of the file the 4-rank job wrote
PY=${PYTHON:-/usr/bin/python3}
"$PY" "$(dirname "$0")/read_ckpt.py" "$WORK/a/step_000008.h5" >"$WORK/py" 2>&1
case $? in
  0) pass "h5py + numpy read the 4-rank file: $(tail -1 "$WORK/py") over $(grep -c "checksum ok" "$WORK/py") arrays" ;;
  77) echo "skip the h5py reader: $(tail -1 "$WORK/py")" ;;
  *) fail "h5py reader"; tail -5 "$WORK/py" ;;
esac
no_temp_files "$WORK" || fail "temp files left behind"
finish
