#!/usr/bin/env bash
# Bad input to `meshtrain serve` ends every rank with status 2 and one "meshtrain: error:" line
# naming the problem, before anything listens; --help prints the flags and exits 0.
# usage: serve_cli.sh MPIEXEC MESHTRAIN WORK_DIR TEXT_FILE
set -u
MPI=$1 MT=$2 WORK=$3 TXT=$4
. "$(dirname "$0")/../common/one_error.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
fails=0
MODEL=(--layers 2 --d-model 32 --heads 4 --kv-heads 2 --seq-len 64)
# err WANT_FRAGMENT NP ARGS...: status 2 and one error line holding the fragment. The cases run
# concurrently, their verdicts printed in order at the end (launch.sh).
. "$(dirname "$0")/../common/launch.sh"
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; } # collect counts the cases with a FAIL line
err_() {
  local frag=$1 np=$2
  shift 2
  local port=(--port 0) # (--simulate refuses --port: it runs no server)
  [[ " $* " == *" --simulate "* ]] && port=()
  timeout 120 "$MPI" --oversubscribe --bind-to none -np "$np" "$MT" serve "${port[@]}" \
    "${MODEL[@]}" "$@" >"$WORK/out$CASE" 2>"$WORK/err$CASE"
  one_error_report 2 $? "$WORK/err$CASE" "$frag" "$@"
}
err() { launch err_ "$@"; }
# a drafter of 16 positions, and files that exist for the path checks
timeout 120 "$MPI" --oversubscribe -np 1 "$MT" --layers 1 --d-model 32 --heads 4 --kv-heads 2 \
  --seq-len 16 --batch 4 --steps 1 --eval-every 0 --quiet --data "$TXT" \
  --save-final "$WORK/short.h5" >/dev/null 2>&1
: >"$WORK/x.h5"
: >"$WORK/w.jsonl"
err "--kv-block 0: expected a whole number in [1, 4096]" 1 --kv-block 0
err "--batching dynamic: expected one of: continuous static" 1 --batching dynamic
err "--prefix-cache yes: expected one of: on off" 1 --prefix-cache yes
err "--max-batch-tokens 4 < --max-seqs 8" 2 --max-batch-tokens 4 --max-seqs 8 --mesh y=2 --tensor y
err "--host nothost: not an IPv4 or IPv6 address" 2 --host nothost --mesh x=2 --dp x
err "--timeout is refused by serve" 1 --timeout 5
err "--zero 3 (FSDP) is refused" 2 --mesh x=2 --dp x --zero 3
err "the KV pool is too big" 1 --kv-blocks 2000000000 --kv-block 4096
err "--sim-out and --sim-machine go with --simulate" 1 --sim-out "$WORK/x.jsonl"
err "--simulate needs --sim-out" 1 --simulate "$WORK/none.jsonl"
err "--simulate $WORK/none.jsonl: cannot open (No such file" 2 --simulate "$WORK/none.jsonl" \
  --sim-out "$WORK/o"
# every path-taking flag says what is wrong with the path, naming the flag
err "--ckpt $WORK: is a directory, not a file" 1 --ckpt "$WORK"
err "--draft $WORK: is a directory, not a file" 1 --draft "$WORK"
err "--simulate $WORK: is a directory, not a file" 1 --simulate "$WORK" --sim-out "$WORK/o"
err "--sim-out $WORK/x.h5 is also --ckpt" 1 --ckpt "$WORK/x.h5" --simulate "$WORK/w.jsonl" \
  --sim-out "$WORK/x.h5"
err "/no/such.h5" 1 --ckpt /no/such.h5
err "--draft-tokens goes with --draft" 1 --draft-tokens 3
err "--prefill-ranks 1: whole replicas of 1 ranks, fewer than the 1 ranks" 1 --prefill-ranks 1
err "--prefill-ranks 1: whole replicas of 2 ranks" 4 --prefill-ranks 1 --mesh x=2,y=2 --dp x \
  --tensor y
err "--prefill-ranks goes with continuous batching" 2 --prefill-ranks 1 --mesh x=2 --dp x \
  --batching static
err "--prefill-tensor goes with --prefill-ranks" 2 --prefill-tensor 1 --mesh x=2 --dp x
err "--prefill-tensor 2 does not divide --prefill-ranks 3" 4 --prefill-ranks 3 --prefill-tensor 2
err "--prefill-ranks 2: fewer than the 2 ranks, so that some decode" 2 --prefill-ranks 2 \
  --prefill-tensor 1
err "the decode side's 1 ranks as --mesh: " 3 --prefill-ranks 2 --prefill-tensor 2 --mesh y=2 \
  --tensor y
err "the prefill side (3 ranks, --prefill-tensor 3): " 4 --prefill-ranks 3 --prefill-tensor 3
err "/no/draft.h5" 2 --draft /no/draft.h5 --mesh y=2 --tensor y
err "--kv-replicate is unused: the tensor axis has 2 ranks, no more than the 2 kv heads" 2 \
  --kv-replicate --mesh y=2 --tensor y
err "--kv-replicate takes no value" 1 --kv-replicate=1
err "--kv-replicate is unused: the tensor axis has 2 ranks" 3 --kv-replicate --prefill-ranks 1 \
  --prefill-tensor 1 --mesh y=2 --tensor y
# accepted where the prefill side is past K and the decode side is not (the next check speaks)
err "--expert x shards the routed experts, and the model has none" 5 --kv-replicate \
  --prefill-ranks 4 --prefill-tensor 4 --expert x
err "--draft with --batching static-padded" 2 --draft "$WORK/x.h5" --batching static-padded \
  --mesh x=2 --dp x
err "--draft with --simulate" 1 --draft "$WORK/x.h5" --simulate "$WORK/w.jsonl" --sim-out "$WORK/o"
err "context of 16 positions" 3 --draft "$WORK/short.h5" --mesh x=3 --dp x
timeout 60 "$MPI" --oversubscribe -np 1 "$MT" serve --help >"$WORK/help" 2>&1
help_rc=$?
collect
if [ "$help_rc" -eq 0 ] && grep -q -- '--max-batch-tokens' "$WORK/help" && grep -q '/v1/completions' "$WORK/help"; then
  echo "ok   serve --help lists the flags and endpoints"
else
  echo "FAIL serve --help"
  fails=$((fails + 1))
fi
echo "serve_cli: $fails failure(s)"
[ "$fails" -eq 0 ]
