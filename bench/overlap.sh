#!/usr/bin/env bash
# Overlap on real cores (no emulation): the 2-rank efficiency of DP and ZeRO-1/2/3, each with and
# without --overlap, against the same model on 1 rank. --overlap runs with the default --progress
# auto (on 2 ranks of 1 BLAS thread on 2 cores: inline, the collectives on the rank's own thread)
# and, beside it, with --progress thread (a progress thread per rank); PROGRESS_THREAD=0 leaves
# the thread's variants out. Config (a): L=4 D=256 N=K=4 F=1024 T=128
# B=16, 1 BLAS thread per rank (2 ranks × 1 thread = the 2 cores of the machine it was made for).
#   efficiency = tok/s(2 ranks) / (2 · tok/s(1 rank)) = t(1 rank) / (2 · t(2 ranks)), per step
# The variants alternate within each round, so that a change of the machine's load hits all of
# them; per variant the min and the median over the rounds of the run's median step, and the
# CPU seconds the run's ranks used per step (user + sys over the whole run, start-up included,
# divided by the steps: what --overlap's progress thread costs shows as a difference here), and
# the progress thread's own CPU time per timed step on rank 0 (bench split's progress-cpu).
# Writes OUT (default docs/overlap_results.md) and prints one line per target:
#   --overlap (the default progress) never slower than without (beyond noise: the paired ratio's
#   median within 1.03),
#   efficiency ≥ 0.93 (per round against that round's 1-rank run, median over the rounds; the min
#   over rounds of each, min with min, printed beside it).
# usage: bench/overlap.sh [BUILD_DIR]   env: ROUNDS=5 STEPS=6 OUT=docs/overlap_results.md
#        EXTRA="" (flags added to every 2-rank variant, e.g. "--bucket auto")
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
. bench/lib.sh overlap
defaults ROUNDS=5 STEPS=6 OUT=docs/overlap_results.md EXTRA= PROGRESS_THREAD=1
MODEL="--layers 4 --d-model 256 --heads 4 --kv-heads 4 --d-ff 1024 --seq-len 128 --batch 16"
variants=("1 rank|1|--mesh 1")
for z in 0 1 2 3; do
  name=DP flags="--mesh x=2 --dp x"
  [ "$z" -gt 0 ] && name=ZeRO-$z flags="$flags --zero $z"
  variants+=("$name|2|$flags" "$name --overlap|2|$flags --overlap")
  if [ "$PROGRESS_THREAD" = 1 ]; then
    variants+=("$name --overlap --progress thread|2|$flags --overlap --progress thread")
  fi
done
declare -A ms cpu ccpu pcpu xcom mode
load0=$(cut -d' ' -f1-3 /proc/loadavg)
tm=$(mktemp)
trap 'rm -f "$tm"' EXIT
for r in $(seq "$ROUNDS"); do
  for v in "${variants[@]}"; do
    IFS='|' read -r name np flags <<<"$v"
    [ "$np" -gt 1 ] && flags="$flags $EXTRA"
    # shellcheck disable=SC2086
    out=$(/usr/bin/time -f "%U %S" -o "$tm" timeout 600 mpirun --oversubscribe --bind-to none \
      -np "$np" "$MT" --bench --quiet --steps "$STEPS" $MODEL $flags 2>&1) || {
      echo "overlap: run failed: $name" >&2
      echo "$out" | grep -v '^\(-\|$\)' | head -5 >&2
      ms[$name]+="- "; cpu[$name]+="- "; ccpu[$name]+="- "; pcpu[$name]+="- "; xcom[$name]+="- " # keeps rounds paired
      continue
    }
    line=$(grep '^bench |' <<<"$out")
    mode[$name]+="$(sed -n 's/^bench:.*, progress \([a-z]*\) .*/\1/p' <<<"$out" | head -1) "
    t=$(field "$line" 'ms/step median')
    split=$(grep '^bench split' <<<"$out")
    ccpu[$name]+="$(field "$split" 'compute-cpu') "
    pcpu[$name]+="$(field "$split" 'progress-cpu') "
    xcom[$name]+="$(field "$split" 'exposed comm') "
    c=$(awk -v s="$STEPS" '{printf "%.3f", ($1 + $2) / (s + 2)}' "$tm")
    ms[$name]+="$t "
    cpu[$name]+="$c "
    echo "round $r: $name: $t ms/step, $c CPU s/step, progress $(field "$split" 'progress-cpu') ms/step" >&2
  done
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)
rounds() { tr ' ' '\n' <<<"$1" | grep .; }         # one value per round, "-" for a failed run
# the progress modes the rounds ran, counted: "inline ×3" or "inline ×2, thread ×1"
modes() { tr ' ' '\n' <<<"$1" | grep . | sort | uniq -c | awk '{printf "%s%s ×%s", (NR > 1 ? ", " : ""), $2, $1}'; }
list() { rounds "$1" | grep -v '^-$' || true; }      # the rounds that ran
# paired ratio per round where both ran: variant $2 (default: $1 --overlap) over $1 (without)
paired() { paste -d' ' <(rounds "${ms[${2:-$1 --overlap}]}") <(rounds "${ms[$1]}") | awk '$1 != "-" && $2 != "-" && $2 > 0 {print $1 / $2}'; }
# efficiency per round where both ran: the round's 1-rank step over 2 × variant $1's (the two ran
# minutes apart at most, so a slow spell of the machine that lasts a round weighs on both)
eff_paired() { paste -d' ' <(rounds "${ms[1 rank]}") <(rounds "${ms[$1]}") | awk '$1 != "-" && $2 != "-" && $2 > 0 {print $1 / (2 * $2)}'; }
one_min=$(list "${ms[1 rank]}" | minimum)
one_med=$(list "${ms[1 rank]}" | median)
one_cc=$(list "${ccpu[1 rank]}" | median)
{
  echo "# Overlap on real cores: 2-rank efficiency with and without --overlap"
  echo
  echo "Measured by \`bench/overlap.sh $BUILD\` (ROUNDS=$ROUNDS STEPS=$STEPS${EXTRA:+ EXTRA=\"$EXTRA\"}) on"
  echo "$(date -u +%Y-%m-%d), $(getconf _NPROCESSORS_ONLN) vCPUs, load average $load0 before and $load1 after."
  echo "Model \`$MODEL\` (config (a)), 1 BLAS thread per rank, no emulation. Per run the"
  echo "median step of $STEPS timed steps; per variant the min and median over $ROUNDS rounds, the"
  echo "variants alternating within each round. Efficiency = t(1 rank) / (2 · t(2 ranks)), min with"
  echo "min and median with median; per round: each round's 2-rank run against the same round's 1-rank"
  echo "run, median over the rounds (what the 0.93 target is judged by: a slow spell of the machine that"
  echo "lasts a round weighs on both sides of the ratio). CPU s/step: the ranks' user + sys time over the whole run (start-up"
  echo "included) per step, median over the rounds. Progress CPU: rank 0's progress thread (which runs"
  echo "--overlap's collectives) per timed step, median. Exposed comm: rank 0's time in blocking"
  echo "collectives and in waits for non-blocking ones per timed step, median. Progress: who ran the"
  echo "non-blocking calls in each round (--progress; \`--overlap\` alone is the default, auto: inline"
  echo "unless a rank had less than 0.9 of a core at start-up). Progress CPU: the"
  echo "progress thread's CPU, or with inline progress rank 0's CPU on the coroutine that runs them."
  echo
  echo "Compute CPU: the step's compute on rank 0's CPU clock (what it takes on a core of its own),"
  echo "median; its efficiency, t_cpu(1 rank) / (2 · t_cpu(2 ranks)), is the best the 2-rank run can reach"
  echo "(the split batch's smaller matmuls), whatever the communication does."
  echo
  echo "| variant | progress | ms/step min | ms/step median | efficiency (min) | efficiency (median) | efficiency per round (median) | CPU s/step | compute CPU ms | its efficiency | progress CPU ms | exposed comm ms | overlap / without (paired, median) |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  for v in "${variants[@]}"; do
    IFS='|' read -r name np flags <<<"$v"
    [ -n "${ms[$name]:-}" ] || continue
    mn=$(list "${ms[$name]}" | minimum); md=$(list "${ms[$name]}" | median)
    cs=$(list "${cpu[$name]}" | median)
    cc=$(list "${ccpu[$name]}" | median)
    pc=$(list "${pcpu[$name]}" | median)
    xc=$(list "${xcom[$name]}" | median)
    pr="-"
    case $name in *--overlap*) pr=$(paired "${name%% --overlap*}" "$name" | median | awk '{printf "%.2f", $1}') ;; esac
    pe="-"
    [ "$np" -gt 1 ] && pe=$(eff_paired "$name" | median | awk '{printf "%.2f", $1}')
    awk -v n="$name" -v pm="$(modes "${mode[$name]:-}")" -v a="$mn" -v b="$md" -v o1="$one_min" -v o2="$one_med" -v p="$np" -v c="$cs" -v pr="$pr" \
      -v cc="$cc" -v oc="$one_cc" -v pc="${pc:--}" -v xc="${xc:--}" -v pe="$pe" 'BEGIN{printf "| %s | %s | %s | %s | %.2f | %.2f | %s | %s | %s | %.2f | %s | %s | %s |\n", n, (n ~ /overlap/ ? pm : "-"), a, b,
        o1 / (p * a), o2 / (p * b), (p > 1 ? pe : "1.00"), c, cc, (cc > 0 ? oc / (p * cc) : 0), pc, xc, pr}'
  done
  echo
  echo "## Targets"
  echo
  echo '```'
  for base in DP ZeRO-1 ZeRO-2 ZeRO-3; do
    if [ -z "${ms[$base]:-}" ] || [ -z "${ms[$base --overlap]:-}" ]; then continue; fi
    pr=$(paired "$base" | median | awk '{printf "%.2f", $1}')
    prs=$(paired "$base" | sort -g | awk '{printf "%s%.2f", (NR > 1 ? " " : ""), $1}')
    echo "target: $base --overlap (progress $(modes "${mode[$base --overlap]:-}")) never slower than without: paired ratio per round $prs, median $pr: $(awk -v p="$pr" 'BEGIN{print (p <= 1.03 ? "within" : "outside")}')"
    th="$base --overlap --progress thread"
    if [ -n "${ms[$th]:-}" ]; then
      prt=$(paired "$base" "$th" | median | awk '{printf "%.2f", $1}')
      echo "beside:  $th / without: paired ratio median $prt"
    fi
    for name in "$base" "$base --overlap"; do
      mn=$(list "${ms[$name]}" | minimum)
      e=$(awk -v o="$one_min" -v a="$mn" 'BEGIN{printf "%.2f", o / (2 * a)}')
      pe=$(eff_paired "$name" | median | awk '{printf "%.2f", $1}')
      pes=$(eff_paired "$name" | sort -g | awk '{printf "%s%.2f", (NR > 1 ? " " : ""), $1}')
      echo "target: $name efficiency ≥ 0.93 of linear: per round against that round's 1 rank $pes, median $pe: $(awk -v e="$pe" 'BEGIN{print (e >= 0.93 ? "within" : "outside")}') (min with min $e)"
    done
  done
  echo '```'
} >"$OUT"
grep '^target' "$OUT" || true
echo "wrote $OUT" >&2
