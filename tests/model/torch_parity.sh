#!/usr/bin/env bash
# Independent truth: PyTorch (bench/torch_ref.py) on the parameters meshtrain wrote with
# --save-init, on the same batch (--data-order sequential, step 0), must give meshtrain's loss;
# and after one SGD step with lr 1, no clipping and no decay, (init − final) is meshtrain's
# gradient, which must match PyTorch's autograd. GQA (K < N) and N·H != D on purpose.
# Tolerances: loss |a − b| ≤ 1e-5·(|a| + |b|); gradient max|Δ| ≤ 1e-3·max|g| per parameter.
# Skips (status 77) when /usr/bin/python3 cannot import torch and h5py.
# usage: torch_parity.sh MPIEXEC MESHTRAIN TORCH_REF TEXT_FILE WORK_DIR NP
set -u
. "$(dirname "$0")/../common/torch_args.sh" "$@"
mkdir -p "$WORK"
rm -f "$WORK"/init.h5 "$WORK"/final.h5 "$WORK"/m.jsonl
B=4
"$MPI" --oversubscribe --bind-to none -np "$NP" "$MT" --layers 2 --d-model 64 --heads 4 \
  --kv-heads 2 --head-dim 24 --d-ff 96 --seq-len 32 --batch $B --steps 1 --optimizer sgd --lr 1 \
  --min-lr 0 --warmup 0 --weight-decay 0 --clip 0 --data "$TXT" --data-order sequential \
  --eval-every 0 --save-init "$WORK/init.h5" --save-final "$WORK/final.h5" \
  --metrics "$WORK/m.jsonl" --quiet || { echo "FAIL: meshtrain exited $?"; exit 1; }
mt=$(sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$WORK/m.jsonl" | head -1)
out=$("$PY" "$REF" --check "$WORK/init.h5" --final "$WORK/final.h5" --lr 1 --data "$TXT" \
  --batch $B) || { echo "FAIL: torch_ref.py failed"; exit 1; }
echo "$out"
pt=$(sed -n 's/^loss //p' <<<"$out")
worst=$(sed -n 's/^grad worst rel //p' <<<"$out")
echo "meshtrain loss $mt, PyTorch loss $pt, worst gradient deviation $worst (relative to max |g|)"
awk -v a="$mt" -v b="$pt" -v g="$worst" 'BEGIN {
  lok = (a - b <= 1e-5 * (a + b)) && (b - a <= 1e-5 * (a + b)); gok = (g + 0 <= 1e-3)
  printf "%s loss within 1e-5 relative\n%s gradients within 1e-3 of max |g|\n",
         lok ? "ok  " : "FAIL", gok ? "ok  " : "FAIL"
  exit !(lok && gok) }'
