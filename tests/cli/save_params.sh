#!/usr/bin/env bash
# --save-init writes the same global parameters whatever the mesh and sharding: a 1-rank file is
# compared with h5diff (exact) to files written by 2 ranks (DP), 4 ranks (ZeRO-3 over x, tensor
# over y) and 4 ranks (ZeRO-1 over x, tensor over y, where blocks are replicated and one copy is
# written). GQA with K = 2 so kv heads are split over the tensor axis.
# usage: save_params.sh MPIEXEC MESHTRAIN TEXT_FILE WORK_DIR
set -u
MPI=$1 MT=$2 TXT=$3 WORK=$4
mkdir -p "$WORK"
model=(--layers 2 --d-model 64 --heads 4 --kv-heads 2 --d-ff 128 --seq-len 16 --batch 4
       --steps 0 --data "$TXT" --quiet)
save() { # NAME NP FLAGS...
  local name=$1 np=$2
  shift 2
  rm -f "$WORK/$name.h5"
  "$MPI" --oversubscribe --bind-to none -np "$np" "$MT" "${model[@]}" "$@" \
    --save-init "$WORK/$name.h5" >"$WORK/$name.log" 2>&1 ||
    { echo "FAIL: $name: meshtrain exited $?"; cat "$WORK/$name.log"; return 1; }
}
fails=0
save ref 1 || exit 1
for spec in "dp2 2" "fsdp_tp 4 --mesh x=2,y=2 --dp x --zero 3 --tensor y" \
            "zero1_tp 4 --mesh x=2,y=2 --dp x --zero 1 --tensor y"; do
  read -r name np flags <<<"$spec"
  # shellcheck disable=SC2086
  if save "$name" "$np" $flags && h5diff "$WORK/ref.h5" "$WORK/$name.h5" /params /params \
       >"$WORK/$name.diff" 2>&1; then
    echo "ok   $name ($np ranks $flags): /params identical to the 1-rank file"
  else
    echo "FAIL $name ($np ranks $flags) differs from the 1-rank file:"
    head -20 "$WORK/$name.diff"
    fails=$((fails + 1))
  fi
done
echo "save_params: $fails failure(s)"
[ "$fails" -eq 0 ]
