#!/usr/bin/env bash
# End-to-end `meshtrain generate --draft CKPT --draft-tokens k`: a 2-layer target trained for 150
# steps and a 1-layer drafter for 60 (it agrees with the target about half the time); greedy
# texts with the drafter must be byte-identical to plain greedy decoding's on 1 rank (k = 3) and
# DP×TP 2x2 (k = 2) (test_draft covers more meshes and k in-process); the target as its own
# drafter must have every drafted token kept (alpha 1), and a sampled run must finish with its
# report. Bad input ends with status 2 and one "meshtrain: error:" line naming the problem.
# usage: draft_cli.sh MPIEXEC MESHTRAIN TEXT_FILE WORK_DIR
set -u
. "$(dirname "$0")/../common/cli_case.sh" "$@"
rm -rf "${WORK:?}"/*
TRAIN=(--d-model 32 --heads 4 --kv-heads 2 --seq-len 64 --batch 8 --lr 1e-2 --eval-every 0 --quiet
  --data "$TXT")
run 1 --layers 2 --steps 150 "${TRAIN[@]}" --save-final "$WORK/target.h5" >"$WORK/train.log" 2>&1 &&
  run 1 --layers 1 --steps 60 "${TRAIN[@]}" --save-final "$WORK/draft.h5" >>"$WORK/train.log" 2>&1 ||
  { echo "FAIL training the checkpoints"; cat "$WORK/train.log"; exit 1; }
printf 'ROMEO:\nThe\nFirst Citizen:\nO\nWhat is\nKING HENRY:\n' >"$WORK/prompts.txt"
GEN=(generate --ckpt "$WORK/target.h5" --prompts "$WORK/prompts.txt" --tokens 30 --quiet)
run 1 "${GEN[@]}" --temperature 0 >"$WORK/plain.out" 2>"$WORK/plain.err" ||
  { echo "FAIL the plain run"; cat "$WORK/plain.err"; exit 1; }

# same NAME NP ARGS...: greedy texts with the drafter equal plain greedy's
same() {
  local name=$1 np=$2
  shift 2
  if ! run "$np" "${GEN[@]}" --temperature 0 "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"; then
    echo "FAIL $name: exit status $?"
    sed 's/^/     | /' "$WORK/$name.err" | tail -5
    fails=$((fails + 1))
  elif ! grep -q '^speculative summary' "$WORK/$name.err"; then
    echo "FAIL $name: no speculative summary on stderr"
    fails=$((fails + 1))
  elif cmp -s "$WORK/plain.out" "$WORK/$name.out"; then
    echo "ok   $name ($*): texts identical to plain greedy ($(grep -o 'alpha [0-9.]*' \
      "$WORK/$name.err" | tail -1))"
  else
    echo "FAIL $name ($*): texts differ from plain greedy"
    diff "$WORK/plain.out" "$WORK/$name.out" | head -6
    fails=$((fails + 1))
  fi
}
same np1_k3 1 --draft "$WORK/draft.h5" --draft-tokens 3
same dp2_tp2_k2 4 --draft "$WORK/draft.h5" --draft-tokens 2 --mesh x=2,y=2 --dp x --tensor y
same self_k4 1 --draft "$WORK/target.h5" --draft-tokens 4
if grep -q 'alpha 1.000 |' "$WORK/self_k4.err"; then
  echo "ok   the target as its own drafter keeps every drafted token (alpha 1.000)"
else
  echo "FAIL the target as its own drafter: $(grep '^speculative summary' "$WORK/self_k4.err")"
  fails=$((fails + 1))
fi
if run 1 "${GEN[@]}" --temperature 0.8 --top-k 20 --seed 5 --draft "$WORK/draft.h5" \
  >"$WORK/samp.out" 2>"$WORK/samp.err" && [ "$(grep -c '^KING HENRY:' "$WORK/samp.out")" -eq 1 ] &&
  grep -q '^speculative summary' "$WORK/samp.err"; then
  echo "ok   sampled (T 0.8, top-k 20): the texts and the report"
else
  echo "FAIL the sampled run"
  tail -3 "$WORK/samp.err"
  fails=$((fails + 1))
fi

# err WANT_FRAGMENT NP ARGS...: status 2, one error line holding the fragment
err() {
  local frag=$1 np=$2
  shift 2
  run "$np" generate "$@" >"$WORK/out" 2>"$WORK/err"
  local rc=$?
  if one_error 2 "$rc" "$WORK/err" "$frag"; then
    echo "ok   bad input ($*): $ERR_LINE"
  else
    echo "FAIL bad input ($*): status $rc, $ERR_N error lines, wanted '$frag'"
    tail -3 "$WORK/err"
    fails=$((fails + 1))
  fi
}
P=(--ckpt "$WORK/target.h5" --prompt ROMEO:)
err "--draft-tokens goes with --draft" 1 "${P[@]}" --tokens 8 --draft-tokens 3
err "AllToAll" 4 "${P[@]}" --tokens 8 --prompt The --draft "$WORK/draft.h5" --mesh y=4 --tensor y
run 1 --layers 1 --d-model 32 --heads 4 --kv-heads 2 --seq-len 16 --steps 1 --eval-every 0 \
  --quiet --data "$TXT" --batch 8 --save-final "$WORK/short.h5" >/dev/null 2>&1
err "context of 16 positions" 1 "${P[@]}" --tokens 30 --draft "$WORK/short.h5"
[ "$fails" -eq 0 ] && echo "draft_cli: all passed" || echo "draft_cli: $fails failure(s)"
exit $((fails > 0))
