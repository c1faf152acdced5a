#!/usr/bin/env bash
# End-to-end `meshtrain generate --kv-shard AXIS`: a small model trained for a few steps on 2
# ranks, then generation of 4 prompts of unequal length with the KV cache's positions sharded over
# 3 and 4 ranks, on 2 with --dp and with --tensor, with --cp (the prefill's prompts over the axis
# too) on 3 and with --tensor, and of a fresh initialisation: the texts on stdout must be
# byte-identical to the 1-rank run's (greedy, and sampled with a seed), and the start-up line
# must show each rank's share of the positions, ceil(S/P) of S. Bad input (an unknown axis, an
# axis used twice, a mode that cannot shard the cache, --cp with another algorithm or another
# --kv-shard axis) ends with status 2 and one "meshtrain: error:" line naming it.
# After the training run the cases are independent: two at a time (launch.sh), the 1-rank
# references and the bad input first, then the sharded runs against them.
# usage: kvshard_cli.sh MPIEXEC MESHTRAIN TEXT_FILE WORK_DIR
set -u
. "$(dirname "$0")/../common/cli_case.sh" "$@"
. "$(dirname "$0")/../common/launch.sh"
LAUNCH_MAX=2
export MESHTRAIN_QUICK_START=1 # no machine measurement: nothing here is timed
rm -rf "${WORK:?}"/*
MODEL=(--layers 2 --d-model 32 --heads 4 --kv-heads 2 --seq-len 64)
run 2 "${MODEL[@]}" --batch 8 --steps 60 --lr 1e-2 --eval-every 0 --quiet --data "$TXT" \
  --mesh x=2 --dp x --save-final "$WORK/ck.h5" >"$WORK/train.log" 2>&1 ||
  { echo "FAIL training the checkpoint"; cat "$WORK/train.log"; exit 1; }
printf 'ROMEO:\nThe\nFirst Citizen:\nO\n' >"$WORK/prompts.txt"
S=$((14 + 30)) # the longest prompt + --tokens
GEN=(generate --ckpt "$WORK/ck.h5" --prompts "$WORK/prompts.txt" --tokens 30 --quiet)

# same NAME NP P REF ARGS...: stdout equals REF's, and each rank holds ceil(S/P) positions
same_case() {
  local name=$1 np=$2 p=$3 ref=$4
  shift 4
  local share="positions round-robin over z: $(((S + p - 1) / p)) of $S per rank"
  if ! run "$np" "${GEN[@]}" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"; then
    echo "FAIL $name: exit status $?"
    sed 's/^/     | /' "$WORK/$name.err" | tail -5
    fails=$((fails + 1))
  elif ! cmp -s "$WORK/$ref.out" "$WORK/$name.out"; then
    echo "FAIL $name ($*): texts differ from the 1-rank run"
    diff "$WORK/$ref.out" "$WORK/$name.out" | head -10
    fails=$((fails + 1))
  elif ! grep -qF "$share" "$WORK/$name.err"; then
    echo "FAIL $name ($*): no \"$share\" on the start-up line"
    head -1 "$WORK/$name.err"
    fails=$((fails + 1))
  else
    echo "ok   $name ($*): texts identical to the 1-rank run; $share"
  fi
}
# ref NAME ARGS...: the 1-rank run of ARGS, its texts in NAME.out
ref() {
  local name=$1
  shift
  run 1 "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" ||
    { echo "FAIL the 1-rank run $name"; cat "$WORK/$name.err"; return; }
  [ "$(wc -l <"$WORK/$name.out")" -ge 4 ] || echo "FAIL the 1-rank run $name printed no texts"
}
# a fresh initialisation (seed 3): its near-uniform logits pick varied bytes, not a trained
# model's few favourites
FRESH=(generate "${MODEL[@]}" --prompts "$WORK/prompts.txt" --tokens 30 --quiet --seed 3)
launch ref one "${GEN[@]}" --temperature 0
launch ref samp "${GEN[@]}" --temperature 0.8 --top-k 20 --seed 5
launch ref fresh "${FRESH[@]}" --temperature 0

# err WANT_FRAGMENT NP ARGS...: status 2, one error line holding the fragment
err_case() {
  local frag=$1 np=$2
  shift 2
  run "$np" "$@" >"$WORK/out$CASE" 2>"$WORK/err$CASE"
  one_error_report 2 $? "$WORK/err$CASE" "$frag" "$@"
}
err() { launch err_case "$@"; }
P=(--prompt a --prompt b --tokens 4)
err "--kv-shard z: the mesh has no axis z" 2 generate "${P[@]}" --mesh x=2 --kv-shard z
err "--kv-shard z is also --tensor" 2 generate "${P[@]}" --mesh z=2 --tensor z --kv-shard z
err "--kv-shard x is also in --dp x" 2 generate "${P[@]}" --mesh x=2 --dp x --kv-shard x
err "--kv-shard xz: name one mesh axis" 2 generate "${P[@]}" --mesh x=2 --kv-shard xz
err "--kv-shard is not supported with --bench" 2 generate --mesh z=2 --kv-shard z --bench
err "--kv-shard is not supported with --draft" 2 generate "${P[@]}" --mesh z=2 --kv-shard z \
  --ckpt "$WORK/ck.h5" --draft "$WORK/ck.h5"
err "--kv-shard with --tensor over 4 ranks > K = 2 kv heads needs --kv-replicate" 4 \
  generate "${P[@]}" "${MODEL[@]}" --mesh y=4,z=1 --tensor y --kv-shard z
err "--cp-alg ring: generate's prefill gathers the prompt's keys and values" 2 generate "${P[@]}" \
  --mesh z=2 --cp z --cp-alg ring
err "--cp z with --kv-shard x: the prefill's shards of the prompt are the cache's" 4 \
  generate "${P[@]}" --mesh x=2,z=2 --cp z --kv-shard x
err "--cp is not supported with --draft" 2 generate "${P[@]}" --mesh z=2 --cp z \
  --ckpt "$WORK/ck.h5" --draft "$WORK/ck.h5"
err "--cp z is also the --dp axis" 2 generate "${P[@]}" --mesh z=2 --dp z --cp z
err "unknown flag --kv-shard" 2 "${MODEL[@]}" --mesh z=2 --kv-shard z --steps 1
collect
grep -q '^ROMEO:' "$WORK/one.out" || { echo "FAIL the 1-rank run printed no texts"; exit 1; }
[ -s "$WORK/samp.out" ] && [ -s "$WORK/fresh.out" ] || { echo "FAIL a 1-rank reference"; exit 1; }

same() { launch same_case "$@"; }
same kv3 3 3 one --temperature 0 --mesh z=3 --kv-shard z
same kv4 4 4 one --temperature 0 --mesh z=4 --kv-shard z
same dp2_kv2 4 2 one --temperature 0 --mesh x=2,z=2 --dp x --kv-shard z
same tp2_kv2 4 2 one --temperature 0 --mesh y=2,z=2 --tensor y --kv-shard z
# --cp: the prefill's prompts over the axis too, the cache as --kv-shard lays it out
same cp3 3 3 one --temperature 0 --mesh z=3 --cp z
same tp2_cp2 4 2 one --temperature 0 --mesh y=2,z=2 --tensor y --cp z
same sampled_kv3 3 3 samp --temperature 0.8 --top-k 20 --seed 5 --mesh z=3 --kv-shard z
GEN=("${FRESH[@]}")
same fresh_kv3 3 3 fresh --temperature 0 --mesh z=3 --kv-shard z
collect
for c in cp3 tp2_cp2; do
  grep -qF "the prefill's prompts so too (--cp)" "$WORK/$c.err" ||
    { echo "FAIL $c: the start-up line does not say the prefill's prompts are sharded"
      fails=$((fails + 1)); }
done
echo "kvshard_cli: $fails failure(s)"
[ "$fails" -eq 0 ]
