#!/usr/bin/env bash
# Independent truth for the mixture of experts: PyTorch (bench/torch_moe.py) on the parameters
# meshtrain wrote with --save-init, on the same batch (--data-order sequential, step 0), must give
# meshtrain's loss; and after one SGD step with lr 1, no clipping and no decay, (init − final) is
# meshtrain's gradient of the whole objective (the cross-entropy, the balance and the z-losses),
# which must match PyTorch's autograd for every parameter, the router's and every expert's
# included. Every block MoE (4 experts, top-2, a shared expert of its own width) with a capacity
# factor that drops slots, GQA and N·H != D on purpose.
# Tolerances: loss |a − b| ≤ 1e-5·(|a| + |b|); gradient max|Δ| ≤ 1e-3·max|g| per parameter.
# Skips (status 77) when /usr/bin/python3 cannot import torch and h5py.
# usage: torch_moe_parity.sh MPIEXEC MESHTRAIN TORCH_MOE TEXT_FILE WORK_DIR NP
set -u
. "$(dirname "$0")/../common/torch_args.sh" "$@"
mkdir -p "$WORK"
rm -f "$WORK"/init.h5 "$WORK"/final.h5 "$WORK"/m.jsonl
B=4
"$MPI" --oversubscribe --bind-to none -np "$NP" "$MT" --layers 2 --d-model 64 --heads 4 \
  --kv-heads 2 --head-dim 24 --d-ff 96 --seq-len 32 --batch $B --steps 1 --optimizer sgd --lr 1 \
  --warmup 0 --weight-decay 0 --clip 0 --data "$TXT" --data-order sequential \
  --experts 4 --moe-top-k 2 --shared-experts 1 --expert-d-ff 40 --capacity-factor 0.75 \
  --aux-loss-coef 0.1 --router-z-loss-coef 0.01 \
  --eval-every 0 --save-init "$WORK/init.h5" --save-final "$WORK/final.h5" \
  --metrics "$WORK/m.jsonl" --quiet || { echo "FAIL: meshtrain exited $?"; exit 1; }
mt=$(sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$WORK/m.jsonl" | head -1)
drop=$(sed -n 's/.*"moe_dropped":\([^,]*\),.*/\1/p' "$WORK/m.jsonl" | head -1)
out=$("$PY" "$REF" --check "$WORK/init.h5" --final "$WORK/final.h5" --lr 1 --data "$TXT" \
  --batch $B) || { echo "FAIL: torch_moe.py failed"; exit 1; }
echo "$out"
pt=$(sed -n 's/^loss //p' <<<"$out")
worst=$(sed -n 's/^grad worst rel //p' <<<"$out")
echo "meshtrain loss $mt (dropped share $drop), PyTorch loss $pt, worst gradient deviation $worst"
awk -v a="$mt" -v b="$pt" -v g="$worst" -v d="$drop" 'BEGIN {
  lok = (a - b <= 1e-5 * (a + b)) && (b - a <= 1e-5 * (a + b)); gok = (g + 0 <= 1e-3); dok = d > 0
  printf "%s loss within 1e-5 relative\n%s gradients within 1e-3 of max |g|\n", lok ? "ok  " : "FAIL", gok ? "ok  " : "FAIL"
  printf "%s the capacity factor dropped slots (%s of them)\n", dok ? "ok  " : "FAIL", d
  exit !(lok && gok && dok) }'
