#!/usr/bin/env bash
# End-to-end `meshtrain generate`: a small model trained for a few steps on 2 ranks (a checkpoint
# from one mesh), then greedy generation of 6 prompts of unequal length on meshes 1, TP 2, TP 4
# (kv heads split by the AllToAll algorithm, and replicated) and DP×TP 2x2: the texts on stdout
# must be byte-identical to the 1-rank run's; a sampled run (temperature, top-k, seed) too; with
# the bf16 KV cache (--kv-dtype bf16) on 1 and 2 ranks and sharded over 3 (--kv-shard) too, whose bytes a position equal
# meshplan --infer's price of a 2-byte cache (and fp32's of a 4-byte one). (DP 2
# and DP 3 are in test_gen, against the training forward.) Bad input ends with status 2 and one
# "meshtrain: error:" line naming the problem and the flag to change, found before any work:
# nothing else on stderr, nothing on stdout, no --csv file.
# usage: gen_cli.sh MPIEXEC MESHTRAIN TEXT_FILE WORK_DIR
set -u
. "$(dirname "$0")/../common/cli_case.sh" "$@"
rm -rf "${WORK:?}"/*
export MESHTRAIN_QUICK_START=1 # the texts, not the timing, are under test
MODEL=(--layers 2 --d-model 32 --heads 4 --kv-heads 2 --seq-len 64)
run 2 "${MODEL[@]}" --batch 8 --steps 60 --lr 3e-3 --eval-every 0 --quiet --data "$TXT" \
  --mesh x=2 --dp x --save-final "$WORK/ck.h5" >"$WORK/train.log" 2>&1 ||
  { echo "FAIL training the checkpoint"; cat "$WORK/train.log"; exit 1; }
printf 'ROMEO:\nThe\nFirst Citizen:\nO\nWhat is\nKING HENRY:\n' >"$WORK/prompts.txt"
GEN=(generate --ckpt "$WORK/ck.h5" --prompts "$WORK/prompts.txt" --tokens 24)

# The cases below run concurrently, their verdicts printed in order at the end (launch.sh).
. "$(dirname "$0")/../common/launch.sh"
# same NAME NP REF ARGS...: stdout of this mesh equals the REF run's
same_() {
  local name=$1 np=$2 ref=$3
  shift 3
  if ! run "$np" "${GEN[@]}" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"; then
    echo "FAIL $name: exit status $?"
    sed 's/^/     | /' "$WORK/$name.err" | tail -5
  elif cmp -s "$WORK/$ref.out" "$WORK/$name.out"; then
    echo "ok   $name ($*): texts identical to the 1-rank run"
  else
    echo "FAIL $name ($*): texts differ from the 1-rank run"
    diff "$WORK/$ref.out" "$WORK/$name.out" | head -10
  fi
}
same() { launch same_ "$@"; }
run 1 "${GEN[@]}" --temperature 0 >"$WORK/one.out" 2>"$WORK/one.err" ||
  { echo "FAIL the 1-rank run"; cat "$WORK/one.err"; exit 1; }
[ "$(wc -l <"$WORK/one.out")" -ge 6 ] && grep -q '^ROMEO:' "$WORK/one.out" ||
  { echo "FAIL the 1-rank run printed no texts"; exit 1; }
grep -q 'TTFT' "$WORK/one.err" && grep -q 'ms/token' "$WORK/one.err" ||
  { echo "FAIL no TTFT / ms/token report on stderr"; exit 1; }
run 1 "${GEN[@]}" --temperature 0.8 --top-k 20 --seed 5 >"$WORK/samp.out" 2>"$WORK/samp.err"
same tp2 2 one --temperature 0 --mesh y=2 --tensor y
same tp4_alltoall 4 one --temperature 0 --mesh y=4 --tensor y
same tp4_replicated 4 one --temperature 0 --mesh y=4 --tensor y --kv-replicate
same dp2_tp2 4 one --temperature 0 --mesh x=2,y=2 --dp x --tensor y
same sampled_dp2_tp2 4 samp --temperature 0.8 --top-k 20 --seed 5 --mesh x=2,y=2 --dp x --tensor y
# the bf16 KV cache: the same greedy texts as the fp32 cache on this checkpoint
same kv_bf16 1 one --temperature 0 --kv-dtype bf16
same kv_bf16_tp2 2 one --temperature 0 --kv-dtype bf16 --mesh y=2 --tensor y
same kv_bf16_kvshard3 3 one --temperature 0 --kv-dtype bf16 --mesh z=3 --kv-shard z
same kv_bf16_cp3 3 one --temperature 0 --kv-dtype bf16 --mesh z=3 --cp z

# the cache's bytes a position (every layer, K and V) as meshplan --infer prices them: 2 bytes an
# element with --kv-dtype bf16, 4 with fp32; the run's compute dtype the same, and the header's
# C (the rate decode's and prefill's book prices are at) that dtype's products' rate
kv_bytes_() {
  local dt=$1 eb=$2 got want
  run 1 "${GEN[@]}" --temperature 0 --kv-dtype "$dt" --compute-dtype "$dt" >/dev/null \
    2>"$WORK/kv_$dt.err"
  got=$(sed -n 's/.*KV cache '"$dt"', \([0-9]*\) bytes a position.*/\1/p' "$WORK/kv_$dt.err")
  want=$("$(dirname "$MT")/meshplan" --infer --layers 2 --d-model 32 --heads 4 --kv-heads 2 \
    --head-dim 8 --d-ff 128 --vocab 256 --context 30 --batch 1 --chip v5p --topology 1x1x1 \
    --kv-bytes "$eb" |
    sed -n 's/^KV cache ([0-9]* B per element): \([0-9]*\) bytes per token.*/\1/p')
  if [ -n "$got" ] && [ "$got" = "$want" ] &&
     grep -q "^generate | .* C [0-9.]* GFLOP/s ($dt products;" "$WORK/kv_$dt.err"; then
    echo "ok   --kv-dtype $dt: $got bytes a position, as meshplan --infer --kv-bytes $eb; C of $dt products"
  else
    echo "FAIL --kv-dtype $dt: generate says '$got' bytes a position, meshplan '$want' (or C not of $dt products)"
    grep "^generate | [0-9]* prompts" "$WORK/kv_$dt.err" | sed 's/^/     | /'
  fi
}
launch kv_bytes_ bf16 2
launch kv_bytes_ fp32 4

# decode's weight bytes a step (generate --bench's CSV, batch 1, MB): the matrices at 4 bytes an
# element in fp32 and at 2 in bf16 (their bf16 copies), the norms' gains and the embedding's row
# at 4: 38912 matrix elements (2 layers of 15360, the unembedding 8192), 160 gains, 32 floats of
# the row; 156416 B in fp32, 78592 B in bf16 (the gains at 2 bytes would give 78272). And the
# decode bound's line says where the bandwidth was read and that these weights fit in the cache.
# The book's price of batch 64's step (one, at position 8) is at the rate of the compute dtype's
# products, the roofline line says which (bf16: the bf16 kernels', not sgemm's): ms_book_flops =
# KV / BW + FLOPs / C with BW and C as printed and the FLOPs counted by hand, 64 rows of
# 2 x 38912 + attention's 4 x 9 keys x 32 (N H) x 2 layers = 5128192.
wbytes_() {
  local dt=$1 want=$2 got price
  run 1 generate --ckpt "$WORK/ck.h5" --bench --bench-batches 1,64 --bench-prompt 8 --tokens 2 \
    --compute-dtype "$dt" --csv "$WORK/wb_$dt.csv" >/dev/null 2>"$WORK/wb_$dt.err"
  got=$(awk -F, 'NR == 2 {print $9}' "$WORK/wb_$dt.csv" 2>/dev/null)
  price=$(sed -n "s/^decode roofline .* BW \([0-9.]*\) GB\/s, C \([0-9.]*\) GFLOP\/s ($dt products;.*/\1 \2/p" \
    "$WORK/wb_$dt.err" | awk -v f="$WORK/wb_$dt.csv" '{ bw = $1 * 1e9; c = $2 * 1e9
      while ((getline l < f) > 0) { split(l, r, ","); if (r[1] == 64) { got = r[7]; kv = r[10] } }
      want = 1e3 * (kv * 1e6 / bw + 5128192 / c); d = got - want
      tol = 2e-4 + want * (0.006e9 / bw + 0.006e9 / c) # the CSV to 1e-4 ms, BW and C to 0.005
      printf "%s %.4f %s", (d < 0 ? -d : d) <= tol ? "ok" : "no", want, got }')
  if [ "$got" = "$want" ] && [ "${price%% *}" = ok ] &&
     grep -q "^decode bound | batch 1: .* ($dt) | BW read from a [0-9]* MB buffer, last-level cache .* the weights \(FIT in\|against an unknown\)" "$WORK/wb_$dt.err"; then
    echo "ok   generate --bench --compute-dtype $dt: decode reads $got MB of weights a step; batch 64's priced at $dt products' C: ${price#ok } ms"
  else
    echo "FAIL generate --bench --compute-dtype $dt: weight_mb '$got', want $want (or no decode bound line); batch 64's price at $dt products' C (want, got): '$price'"
    sed 's/^/     | /' "$WORK/wb_$dt.err" | tail -5
  fi
}
launch wbytes_ fp32 0.1564
launch wbytes_ bf16 0.0786

# err FRAGMENT NP ARGS...: checked before any work: status 2, one error line holding the fragment,
# no report of work begun on stderr (generate's, prefill's, decode's or the roofline's lines),
# nothing on stdout, and no file left by --csv (each case its own gbN.csv: concurrent runs on one
# file would be refused by its lock instead of by the check under test)
err_() {
  local frag=$1 np=$2 i=$CASE
  shift 2
  run "$np" generate "$@" >"$WORK/out$i" 2>"$WORK/err$i"
  local rc=$? lines
  lines=$(grep -cE '^(generate \||prefill \||decode|B_crit| +batch )' "$WORK/err$i")
  if one_error 2 "$rc" "$WORK/err$i" "$frag" && [ "$lines" -eq 0 ] && ! [ -s "$WORK/out$i" ] &&
     ! compgen -G "$WORK/gb*.csv" >/dev/null; then
    echo "ok   [$*] -> 2: $ERR_LINE"
  else
    echo "FAIL [$*] -> status $rc (want 2), $ERR_N error lines (want 1), $lines report lines" \
         "(want 0), stdout $(wc -c <"$WORK/out$i") bytes (want 0), want \"$frag\""
    sed 's/^/     | /' "$WORK/err$i" | head -10
    compgen -G "$WORK/gb*.csv" | sed 's/^/     | left /'
  fi
}
err() { launch err_ "$@"; }
LONG=$(printf 'a%.0s' $(seq 70))
err "--prompt 2 is empty" 2 --prompt x --prompt ""
err "longer than --seq-len 64" 2 --ckpt "$WORK/ck.h5" --prompt "$LONG"
err "more than --seq-len 64" 2 --ckpt "$WORK/ck.h5" --prompt abc --tokens 62
err "checkpoint has --d-model 32, flags say 64" 2 --ckpt "$WORK/ck.h5" --d-model 64 --prompt a
err "3 prompts do not divide over the 2 replicas" 2 --mesh x=2 --dp x --prompt a --prompt b \
  --prompt c
err "do not divide over the 2 tensor ranks that share a kv head" 4 --mesh y=4 --tensor y \
  --kv-heads 2 --prompt a --prompt b --prompt c
err "the KV cache is too big" 2 --seq-len 1000000 --tokens 999000 --prompt a --prompt b \
  --layers 64 --d-model 512 --heads 8
err "--zero 3 (FSDP) is refused for generation" 2 --mesh x=2 --dp x --zero 3 --prompt a \
  --prompt b
err "no prompt" 2
err "--expert x shards the routed experts, and the model has none" 2 --ckpt "$WORK/ck.h5" \
  --mesh x=2 --dp x --expert x --prompt a --prompt b
err "--prompts /no/such/file" 2 --prompts /no/such/file
# checks before any work, on the flag the user can change; alternatives; the real limits
B=(--ckpt "$WORK/ck.h5" --bench)
err "--csv $WORK: cannot create it (is a directory)" 2 "${B[@]}" --csv "$WORK"
err "--csv $WORK/ck.h5 is also --ckpt: the table would overwrite an input" 2 "${B[@]}" \
  --csv "$WORK/ck.h5"
err "--bench-prompt 64 + --tokens 4 = 68 positions, more than --seq-len 64" 2 "${B[@]}" \
  --bench-batches 1,2 --tokens 4 --csv "$WORK/gb1.csv"
err "--bench-batches: batch 1: 1 prompts do not divide over the 2 replicas" 2 "${B[@]}" \
  --mesh x=2 --dp x --bench-batches 2,1 --bench-prompt 8 --tokens 4 --csv "$WORK/gb2.csv"
err "--csv does nothing in meshtrain generate without --bench" 2 --prompt a --csv "$WORK/gb3.csv"
err "--prompt does nothing in meshtrain generate --bench" 2 "${B[@]}" --prompt a
err "--prompts $WORK: is a directory, not a file" 2 --prompts "$WORK"
err "--ckpt $WORK: is a directory, not a file" 2 --ckpt "$WORK" --prompt a
err "--prompt and --prompts are alternatives" 2 --prompt a --prompts "$WORK/prompts.txt"
err "--tokens 99999999999999999999: expected a whole number from 1 to 1073741824" 2 --prompt a \
  --tokens 99999999999999999999
err "--lr does nothing in meshtrain generate" 2 --prompt a --lr 0.1
err "--kv-dtype fp8: expected fp32, bf16 or auto" 2 --prompt a --kv-dtype fp8
err "--metrics does nothing in meshtrain generate" 2 --prompt a --metrics "$WORK/m.jsonl"
collect
echo "gen_cli: $fails failure(s)"
[ "$fails" -eq 0 ]
