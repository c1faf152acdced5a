# Sourced by the PyTorch parity tests after tests/common/torch_args.sh. The model both sides run
# (2 layers, GQA, N·H != D), one SGD step with lr 1 and nothing else touching the update, so that
# (init − final) is the gradient:
#   parity_train ARGS...: meshtrain on NP ranks with ARGS added, its batch B (4) of the text in
#     order; writes WORK/init.h5, final.h5 and m.jsonl, sets MT_LOSS (step 1's loss); a failed
#     run prints FAIL and exits 1;
#   parity_ref ARGS...: REF --check on those files and the same batch, with ARGS added; sets OUT
#     (its output, also printed); a failure prints FAIL and exits 1;
#   parity_close A B G: prints and returns whether loss A is within 1e-5 relative of loss B and
#     the worst gradient deviation G (relative to max |g|) is within 1e-3: the fp32 tolerances.
B=4
parity_train() {
  mkdir -p "$WORK"
  rm -f "$WORK"/init.h5 "$WORK"/final.h5 "$WORK"/m.jsonl
  "$MPI" --oversubscribe --bind-to none -np "$NP" "$MT" --layers 2 --d-model 64 --heads 4 \
    --kv-heads 2 --head-dim 24 --d-ff 96 --seq-len 32 --batch $B --steps 1 --optimizer sgd \
    --lr 1 --warmup 0 --weight-decay 0 --clip 0 --data "$TXT" --data-order sequential \
    --eval-every 0 --save-init "$WORK/init.h5" --save-final "$WORK/final.h5" \
    --metrics "$WORK/m.jsonl" --quiet "$@" || { echo "FAIL: meshtrain exited $?"; exit 1; }
  MT_LOSS=$(sed -n 's/.*"loss":\([^,]*\),.*/\1/p' "$WORK/m.jsonl" | head -1)
}
parity_ref() {
  OUT=$("$PY" "$REF" --check "$WORK/init.h5" --final "$WORK/final.h5" --lr 1 --data "$TXT" \
    --batch $B "$@") || { echo "FAIL: $(basename "$REF") failed"; exit 1; }
  echo "$OUT"
}
parity_close() {
  awk -v a="$1" -v b="$2" -v g="$3" 'BEGIN {
    lok = (a - b <= 1e-5 * (a + b)) && (b - a <= 1e-5 * (a + b)); gok = (g + 0 <= 1e-3)
    printf "%s loss within 1e-5 relative\n%s gradients within 1e-3 of max |g|\n",
           lok ? "ok  " : "FAIL", gok ? "ok  " : "FAIL"
    exit !(lok && gok) }'
}
