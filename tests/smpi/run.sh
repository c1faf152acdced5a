#!/usr/bin/env bash
# tests/smpi's driver.
#   run.sh build SRC DIR WERROR                  configure and build the SMPI tree DIR from SRC
#   run.sh run SRC DIR CHIP TOPOLOGY EXE ARGS... run DIR/EXE on the simulated slice (bench/simpod)
#   run.sh dryrun SRC DIR CHIP TOPOLOGY ARGS...  run DIR/simpod-dryrun there and check it against
#                                                the calculator (its serial step within 15%, its
#                                                compute within 2%, the AllGather and ReduceScatter
#                                                bytes each rank sends within 0.65-1.05 of its own)
#   run.sh nodata SRC DIR CHIP TOPOLOGY ARGS...  run DIR/simpod-dryrun there with and without
#                                                --no-data: the simulated step times, the loss, the
#                                                FLOPs charged and every collective's calls and
#                                                bytes must be identical
#   run.sh overlap SRC DIR CHIP TOPOLOGY ARGS... run DIR/simpod-dryrun there with and without
#                                                --overlap: the loss, FLOPs and every collective's
#                                                calls and bytes must be identical; the step without
#                                                within 15% of the calculator's serial step, the step
#                                                with within 15% of its overlapped one, and the time
#                                                saved 0.5-1.15 of the calculator's (serial − overlapped)
# Exits 77 (CTest: skipped) where SimGrid's smpicc/smpirun are not installed.
set -euo pipefail
mode="$1" src="$2" dir="$3"
shift 3
if ! command -v smpicc >/dev/null || ! command -v smpirun >/dev/null; then
  echo "SKIP: SimGrid's smpicc/smpirun not installed (Debian 12: apt-get install libsimgrid-dev)"
  exit 77
fi
if [ "$mode" = build ]; then
  cmake -S "$src" -B "$dir" -DMESHTRAIN_SMPI=ON -DCMAKE_BUILD_TYPE=Release \
        -DMESHTRAIN_WERROR="${1:-OFF}" >/dev/null
  exec cmake --build "$dir" -j 2 --target test_coll test_simlink test_simlap simpod_platform simpod-dryrun
fi
if [ "$mode" = nodata ]; then
  chip="$1" topo="$2"
  shift 2
  run() { "$src/bench/simpod" --chip "$chip" --topology "$topo" "$dir/simpod-dryrun" --chip "$chip" "$@"; }
  # what the simulation measured: the step times (simulated), loss, FLOPs, per-op calls and bytes
  pick() { grep -E '^(simulated step|compute charged|  coll )' <<<"$1"; }
  with="$(run "$@")"
  without="$(run "$@" --no-data)"
  echo "$without"
  grep -q '^dry run: .*data none' <<<"$without" || { echo "FAIL: --no-data was not on"; exit 1; }
  [ "$(pick "$with" | grep -c '  coll ')" -ge 2 ] || { echo "FAIL: no collectives"; exit 1; }
  if ! diff <(pick "$with") <(pick "$without"); then
    echo "FAIL: --no-data changed the simulated step (above: < with data, > without)"
    exit 1
  fi
  echo "identical with and without data:"
  pick "$with"
  exit 0
fi
if [ "$mode" = overlap ]; then
  chip="$1" topo="$2"
  shift 2
  run() { "$src/bench/simpod" --chip "$chip" --topology "$topo" "$dir/simpod-dryrun" --chip "$chip" "$@"; }
  pick() { grep -E '^(compute charged|  coll )' <<<"$1"; }
  loss() { sed -n 's/^simulated step: .*loss //p' <<<"$1"; }
  without="$(run "$@")"
  with="$(run "$@" --overlap)"
  echo "$with"
  [ "$(pick "$with" | grep -c '  coll ')" -ge 2 ] || { echo "FAIL: no collectives"; exit 1; }
  if ! diff <(pick "$without"; loss "$without") <(pick "$with"; loss "$with"); then
    echo "FAIL: --overlap changed the step's work (above: < without, > with)"
    exit 1
  fi
  echo "loss, FLOPs and collectives identical with and without --overlap"
  exec awk '
    /^simulated step:/ { t[n++] = $3 }
    /^calculator: compute/ { comp = $3 + 0; comm = $6 + 0; serial = $10 + 0; over = $13 + 0 }
    function check(what, got, ref, lo, hi) {
      r = ref > 0 ? got / ref : 0
      printf "%s: %g against %g (ratio %.3f, allowed %.2f-%.2f)\n", what, got, ref, r, lo, hi
      if (r < lo || r > hi) bad = 1
    }
    END {
      check("step without --overlap (s) vs the calculator'"'"'s serial step", t[0], serial, 0.85, 1.15)
      check("step with --overlap (s) vs the calculator'"'"'s overlapped step", t[1], over, 0.85, 1.15)
      check("time saved by --overlap (s) vs the calculator'"'"'s", t[0] - t[1], serial - over, 0.5, 1.15)
      exit bad
    }' <<<"$without
$with"
fi
if [ "$mode" = dryrun ]; then
  chip="$1" topo="$2"
  shift 2
  out="$("$src/bench/simpod" --chip "$chip" --topology "$topo" "$dir/simpod-dryrun" --chip "$chip" "$@")"
  echo "$out"
  # The trainer keeps the last layer's gathered weights (and the head's) from its forward into its
  # backward, where the calculator gathers every layer twice, and gathers the embedding once, for
  # the forward only: it sends fewer AllGather bytes (0.69 of the calculator's on the 2x2 test).
  exec awk '
    /^simulated step:/ { sim = $3 }
    /^compute charged/ { comp = $9 }
    /^calculator: compute/ { ccomp = $3 + 0; serial = $10 + 0 }
    $1 == "coll" { sent[$2] = $4 }
    $1 == "calc" { want[$2] = $4 }
    function check(what, got, ref, lo, hi) {
      r = ref > 0 ? got / ref : 0
      printf "%s: %g against the calculator'"'"'s %g (ratio %.3f, allowed %.2f-%.2f)\n", what, got, ref, r, lo, hi
      if (r < lo || r > hi) bad = 1
    }
    END {
      check("simulated step (s) vs serial step", sim, serial, 0.85, 1.15)
      check("compute charged (s)", comp, ccomp, 0.98, 1.02)
      check("all_gather bytes sent", sent["all_gather"], want["all_gather"], 0.65, 1.05)
      check("reduce_scatter bytes sent", sent["reduce_scatter"], want["reduce_scatter"], 0.75, 1.05)
      exit bad
    }' <<<"$out"
fi
chip="$1" topo="$2" exe="$3"
shift 3
exec "$src/bench/simpod" --chip "$chip" --topology "$topo" "$dir/$exe" "$@"
