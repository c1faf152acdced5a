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
. "$(dirname "$0")/parity.sh"
parity_train --experts 4 --moe-top-k 2 --shared-experts 1 --expert-d-ff 40 \
  --capacity-factor 0.75 --aux-loss-coef 0.1 --router-z-loss-coef 0.01
mt=$MT_LOSS
drop=$(sed -n 's/.*"moe_dropped":\([^,]*\),.*/\1/p' "$WORK/m.jsonl" | head -1)
parity_ref
pt=$(sed -n 's/^loss //p' <<<"$OUT")
worst=$(sed -n 's/^grad worst rel //p' <<<"$OUT")
echo "meshtrain loss $mt (dropped share $drop), PyTorch loss $pt, worst gradient deviation $worst"
parity_close "$mt" "$pt" "$worst"
close=$?
dok=$(awk -v d="$drop" 'BEGIN {print (d > 0)}')
printf "%s the capacity factor dropped slots (%s of them)\n" "$([ "$dok" = 1 ] && echo "ok  " || echo FAIL)" "$drop"
[ "$close" = 0 ] && [ "$dok" = 1 ]
