#!/usr/bin/env bash
# Independent truth for generation: PyTorch (bench/torch_infer.py, its own KV cache over
# bench/torch_ref.py's model) on the parameters of a checkpoint meshtrain trained, each prompt
# alone, teacher-forced with the tokens `meshtrain generate` printed on NP ranks (a DP×TP 2x2 mesh
# at 4, 1 rank at 1): every token must be PyTorch's argmax or within 1e-4·(1 + max |logit|) of it.
# GQA (K = 2 < N = 4), prompts of unequal length in one batch.
# Skips (status 77) when /usr/bin/python3 cannot import torch and h5py.
# usage: torch_gen.sh MPIEXEC MESHTRAIN TORCH_INFER TEXT_FILE WORK_DIR NP
set -u
. "$(dirname "$0")/../common/torch_args.sh" "$@"
rm -rf "$WORK" && mkdir -p "$WORK"
"$MPI" --oversubscribe --bind-to none -np 1 "$MT" --layers 2 --d-model 48 --heads 4 --kv-heads 2 \
  --seq-len 64 --batch 8 --steps 60 --lr 3e-3 --eval-every 0 --quiet --data "$TXT" \
  --save-final "$WORK/ck.h5" >"$WORK/train.log" 2>&1 || { echo "FAIL: training"; exit 1; }
printf 'ROMEO:\nThe\nFirst Citizen:\nO\n' >"$WORK/prompts.txt"
MESH=()
[ "$NP" -eq 4 ] && MESH=(--mesh x=2,y=2 --dp x --tensor y)
"$MPI" --oversubscribe --bind-to none -np "$NP" "$MT" generate --ckpt "$WORK/ck.h5" \
  --prompts "$WORK/prompts.txt" --tokens 32 --temperature 0 "${MESH[@]}" >"$WORK/texts.out" \
  2>"$WORK/gen.err" || { echo "FAIL: generate"; cat "$WORK/gen.err"; exit 1; }
"$PY" "$REF" --check "$WORK/ck.h5" --prompts "$WORK/prompts.txt" --texts "$WORK/texts.out" \
  --tokens 32
