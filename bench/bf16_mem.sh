#!/usr/bin/env bash
# bf16 compute's memory beside fp32's: the memory line's activations and total (what the plan
# allocates per rank), each rank's peak RSS (/usr/bin/time's maximum resident set, the largest
# rank's), and the step time, fp32 and bf16 alternating round by round on the same machine, on
#   demo: the README demo's model and mesh (4 ranks: --mesh x=2,y=2 --dp x --zero 3 --tensor y,
#         L=4 D=128 N=4 K=2 T=128 B=16)
#   b:    bench/torch_ref.py's config (b) on one rank (L=8 D=512 N=K=8 F=2048 T=256 B=8)
# Each run is meshtrain --bench (STEPS timed steps after 2 warm-up ones, its median step); the table
# gives the median and minimum over ROUNDS rounds and names the CPU.
#
# usage: bench/bf16_mem.sh [BUILD_DIR]     (default build; meshtrain must be built there)
# env:   ROUNDS=3 STEPS=5 CONFIGS="demo b"
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
. bench/lib.sh bf16_mem
defaults ROUNDS=3 STEPS=5 CONFIGS="demo b"
TIME=/usr/bin/time
[ -x "$TIME" ] || { echo "bf16_mem: $TIME not found (apt-get install time)" >&2; exit 2; }

# config_run CFG: the ranks and the flags of config CFG.
config_run() {
  case $1 in
    demo) echo "4 --mesh x=2,y=2 --dp x --zero 3 --tensor y --layers 4 --d-model 128 --heads 4 \
--kv-heads 2 --seq-len 128 --batch 16" ;;
    *) echo "1 $(ref_config_flags "$1")" ;;
  esac
}

declare -A act tot rss ms
# one CFG V NP FLAGS: a run of config CFG in precision V; its figures join the arrays
one() {
  local out mem line
  # shellcheck disable=SC2086
  out=$(mpirun --oversubscribe --bind-to none -np "$3" "$TIME" -f "maxrss_kb %M" "$MT" \
          --bench --steps "$STEPS" --no-matmul-bound --compute-dtype "$2" $4 2>&1)
  mem=$(grep '^memory per rank' <<<"$out")
  line=$(grep '^bench |' <<<"$out")
  printf '%s\n%s\n' "$mem" "$line" >&2
  act[$1.$2]=$(field "$mem" activations)
  tot[$1.$2]=$(field "$mem" total)
  rss[$1.$2]+="$(sed -n 's/^maxrss_kb //p' <<<"$out" | sort -g | tail -1) "
  ms[$1.$2]+="$(field "$line" 'ms/step median') "
}
for cfg in $CONFIGS; do
  read -r np flags <<<"$(config_run "$cfg")"
  for r in $(seq "$ROUNDS"); do
    for v in fp32 bf16; do echo "== config $cfg, round $r/$ROUNDS: $v" >&2; one "$cfg" "$v" "$np" "$flags"; done
  done
done
# of LIST median|minimum
of() { tr ' ' '\n' <<<"$1" | grep . | "$2"; }
echo "bf16_mem: $(date -u +%Y-%m-%d) on $(getconf _NPROCESSORS_ONLN) cores ($CPU), $ROUNDS rounds x $STEPS timed steps, fp32 and bf16 alternating"
echo "Command: ROUNDS=$ROUNDS STEPS=$STEPS CONFIGS=\"$CONFIGS\" bench/bf16_mem.sh"
echo
echo "| config | compute | activations MB (memory line) | total MB (memory line) | peak RSS MB, largest rank (median, min) | ms/step (median, min) |"
echo "|---|---|---|---|---|---|"
for cfg in $CONFIGS; do
  for v in fp32 bf16; do
    k=$cfg.$v
    printf '| %s | %s | %s | %s | %.1f, %.1f | %s, %s |\n' "$cfg" "$v" "${act[$k]}" "${tot[$k]}" \
      "$(of "${rss[$k]}" median | awk '{print $1 / 1024}')" \
      "$(of "${rss[$k]}" minimum | awk '{print $1 / 1024}')" \
      "$(of "${ms[$k]}" median)" "$(of "${ms[$k]}" minimum)"
  done
done
