#!/usr/bin/env bash
# The fidelity benchmark: measured steps against meshtrain's per-step prediction and the book's
# idealised figure, under --emulate v5p (links slowed to v5p's C/W) with --emulate-rate model (the
# emulated chip runs this model's step at its peak, as the book's T_math = FLOPs/C assumes), on 2
# and 4 ranks.
#   dp     B/X sweep (tokens per rank), --mesh x=N --dp x --overlap
#   fsdp   B/X sweep, --mesh x=N --dp x --zero 3 --overlap
#   tp     d_ff sweep, --mesh y=N --tensor y
#   tpcmm  the tp sweep with --collective-matmul on (3 points)
#   mixed  data/tensor split of N chips at a fixed model and batch: |Y| = 1 .. N, FSDP over the rest
#   mixedx FSDP+TP's threshold as a crossover, 4 ranks only: --mesh x=2,y=2 (ZeRO-3 over x, TP over
#          y), tokens per step B and d_ff F swept together along B = 1.5·F, where the 2x2 split is
#          the book's optimum for this model's SwiGLU (3 points)
# Each crossover compares what the book's boundary compares (docs/fidelity.md), from meshtrain's
# `bench parts` lines (the step's compute CPU time and collectives by pass and sublayer):
#   dp     the backward pass's compute = the step's transfer (the gradient AllReduces)
#   fsdp   the forward + backward passes' compute = the step's transfer (2 AllGathers, 1 RS)
#   tp     the MLP's forward compute = the transfer of the collectives issued in it (AG + RS)
#   mixedx the whole step's compute = the step's transfer (FSDP's gathers and scatters over x,
#          TP's activation collectives over y)
# with each collective's transfer counted from the last rank's start to the last rank's end
# (`transfer-last`: without the wait for a late peer, which grows with the compute around the
# call; each rank's own start → end is kept beside it, `transfer`)
# against the book's boundary for the collectives and bytes the run put on the wire, which
# meshtrain prints (`bench wire-boundary`, from the bytes mesh counted on each link: ZeRO-3's
# re-gathers, a ring's (N−1)/N, the collective matmul's one-way ppermutes, fp32 or bf16), beside
# the book's ideal (`bench boundary`: α tokens per rank; F = |Y|·α·2/3 for this model's SwiGLU,
# whose forward is 6·B·D·F/|Y| FLOPs, not the book's 4; for FSDP+TP the book's threshold along
# the run's B/F, B = α·(X/M_X + ⅔·(B/F)·Y/M_Y) tokens per step, 4α = 10200 on mixedx's path;
# on the wire, `bench wire-boundary mixed`: the whole step's FLOPs at the chip's peak against all
# of its collectives' link bytes).
# Writes OUT_DIR/fidelity.csv (one row per run), OUT_DIR/fidelity_results.md (the tables and the
# targets) and, when gnuplot is installed (Debian: gnuplot-nox), OUT_DIR/fidelity_<sweep>_np<N>.svg:
# step time and exposed communication against the swept variable, with the book's boundary
# marked. Prints one line per target (within / outside), also under "Targets" in the .md.
# usage: bench/fidelity.sh [BUILD_DIR]
# env: RANKS="2 4" STEPS=4 COMM=bf16 COMPUTE=fp32 BUCKET=auto RATE=model OUT_DIR=docs
#      COMPUTE=bf16: every run with --compute-dtype bf16 (the matmuls on bf16 operands; the
#      emulated chip's C is then the bf16 rate, --emulate-rate's peak or the model's)
#      SWEEPS="dp fsdp tp tpcmm mixed mixedx"
#      QUICK=1 (3 points per sweep on every rank count; by default 6 on 2 ranks, 3 on more)
#      REPORT_ONLY=1 (no runs: the tables, targets and plots from OUT_DIR's CSV)
#      EMULATE=v5p (the default) | none: none runs on this machine's own links, without --emulate
#      (below); it writes OUT_DIR/fidelity_noemu.csv, fidelity_noemu_results.md and its plots
# EMULATE=none: the book's boundaries are then this machine's, α = C/W with C the matmul rate
# measured at start-up and W the link calibrated (both ways), as `bench regime` and `bench
# boundary` print them for each run; a probe run (--steps 0) per sweep and rank count reads
# them, and the points are placed around its boundary b (tokens per rank for dp and fsdp, d_ff
# for tp and tpcmm): the powers of two from the largest ≤ b/4 up, 8 of them (QUICK: 4, a factor
# 4 apart). The data sweeps' sequences are 8 tokens long (fewer when the first point is), so the
# smallest point is one sequence per rank. Only dp, fsdp, tp, tpcmm and mixed run (the default:
# dp fsdp tp); mixedx's points are v5p's. Each run's own boundary is in the CSV; the targets
# judge against the sweep's median, and add each sweep's α and its compared quantities at the
# first and last points.
# The DP/FSDP and TP models are sized to be bandwidth-bound (below). With the defaults the run took
# 25.7 minutes on 2 idle vCPUs (de0f9f0: 37 runs, 10.5 minutes of them steps); since, the runs
# skip --bench's matmul-only bound (--no-matmul-bound: the whole global step's sgemms timed on
# every rank, as long as the steps at the large points) and the data sweeps end at 4096 tokens
# per rank on 4 ranks and for FSDP on 2 (their 8192 points took 3 minutes of steps): 12.8 minutes
# on the idle machine at 6a0c70e. Timing the kernels cold in every cache level (ktime) adds about
# 1–4 s of start-up to a small run. mixedx's three 4-rank runs took 373 s on the loaded machine
# (load average 15–19); their predicted steps (6 each, the compute doubled for two ranks per
# core) add up to 61 s, about 1.5 minutes idle with start-up.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
RANKS=${RANKS:-2 4}
STEPS=${STEPS:-4}
COMM=${COMM:-bf16}
COMPUTE=${COMPUTE:-fp32}
case "$COMPUTE" in fp32 | bf16) ;; *) echo "fidelity: COMPUTE=$COMPUTE: expected fp32 or bf16" >&2; exit 2 ;; esac
BUCKET=${BUCKET:-auto}
RATE=${RATE:-model}
OUT_DIR=${OUT_DIR:-docs}
EMULATE=${EMULATE:-v5p}
case "$EMULATE" in
  v5p) EMU=(--emulate v5p --emulate-rate "$RATE") PREFIX=fidelity SWEEPS=${SWEEPS:-dp fsdp tp tpcmm mixed mixedx} ;;
  none) EMU=() PREFIX=fidelity_noemu SWEEPS=${SWEEPS:-dp fsdp tp} ;;
  *) echo "fidelity: EMULATE=$EMULATE: expected v5p or none" >&2; exit 2 ;;
esac
MT="$BUILD/meshtrain"
[ -x "$MT" ] || { echo "fidelity: $MT not found; build first" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OPENBLAS_NUM_THREADS=1
mkdir -p "$OUT_DIR"
CSV="$OUT_DIR/$PREFIX.csv" MD="$OUT_DIR/${PREFIX}_results.md"
# EMULATE=none: each run's C, W (both ways) and α from its `bench regime` line
RCSV="$OUT_DIR/${PREFIX}_regime.csv"
T=128
# the sweeps' points: 5-6 on 2 ranks (one per core on a 2-vCPU machine), 3 on more ranks (there
# ranks share cores, which the prediction prices: train/observe/share.h). The data sweeps' crossovers
# lie near 2000 tokens per rank: 2048 and 4096 bracket them on 4 ranks (8192 took 2 minutes
# there and decided nothing); FSDP on 2 ranks stops at 4096 for the same reason. The TP
# boundary grows with |Y| (F = |Y|·α·2/3), so its sweep does too.
points() { # points NP tpr|f [fsdp]
  if [ -n "${QUICK:-}" ] || [ "$1" -gt 2 ]; then
    [ "$2" = tpr ] && echo "512 2048 4096" || echo "$((512 * $1)) $((2048 * $1)) $((4096 * $1))"
  elif [ "$2" = tpr ]; then
    [ "${3:-}" = fsdp ] && echo "256 512 1024 2048 4096" || echo "256 512 1024 2048 4096 8192"
  else
    echo "512 1024 2048 4096 8192"
  fi
}

# alpha = C/W_ici = 4.59e14 / 1.8e11 = 2550 on v5p with bf16 on the wire (fp32 doubles the bytes
# and so the boundary): the FSDP+TP split's threshold (the other boundaries come from meshtrain's
# `bench boundary` line)
ALPHA=$(awk -v c="$COMM" 'BEGIN{print (c == "bf16" ? 2550 : 5100)}')

field() { sed -n "s|.*$2 \([0-9.]*\).*|\1|p" <<<"$1" | head -1; }
word() { sed -n "s|.*$2 \([a-z-]*\).*|\1|p" <<<"$1" | head -1; }

# EMULATE=none: the book's boundary on this machine (FIELD of `bench boundary`), from a run of
# the sweep's model at a small shape with --steps 0 (the start-up's rate and link calibration)
probe() { # probe NP FIELD MESH FLAGS...
  local np=$1 fld=$2 meshs=$3 out b
  shift 3
  out=$(timeout 300 mpirun --oversubscribe --bind-to none -np "$np" "$MT" --bench --quiet \
        --no-matmul-bound --steps 0 --comm-dtype "$COMM" --compute-dtype "$COMPUTE" \
        --mesh "$meshs" "$@" 2>&1) || true
  b=$(field "$(grep '^bench boundary' <<<"$out")" "$fld")
  awk -v b="$b" 'BEGIN{exit !(b > 0)}' || {
    echo "fidelity: probe failed (no $fld): -np $np --mesh $meshs $*" >&2
    echo "$out" | tail -5 >&2
    return 1
  }
  echo "fidelity: probe -np $np --mesh $meshs: the book's $fld $b on this machine" >&2
  echo "$b"
}
# noemu_points B MIN: the powers of two from the largest ≤ B/4 (at least MIN) up, 8 of them
# (QUICK: 4, a factor 4 apart)
noemu_points() {
  awk -v b="$1" -v m="$2" -v q="${QUICK:-}" 'BEGIN{p = m; while (p * 2 <= b / 4) p *= 2
    for (k = 0; k < 8; k++) if (q == "" || k % 2 == 0) printf "%d ", p * 2 ^ k}'
}
# tp_points NP POINTS: the tp sweeps' d_ff; EMULATE=none: around this machine's boundary (its
# probe at F = 2·NP)
tp_points() {
  local b
  [ "$EMULATE" = v5p ] && { echo "$2"; return; }
  # shellcheck disable=SC2086
  b=$(probe "$1" tensor-F "y=$1" $TP_MODEL --d-ff $((2 * $1)) --tensor y) || return 0
  noemu_points "$b" $((2 * $1))
}

[ -n "${REPORT_ONLY:-}" ] || [ "$EMULATE" = v5p ] || echo "sweep,ranks,var,alpha,C,W" >"$RCSV"
[ -n "${REPORT_ONLY:-}" ] || echo "sweep,ranks,mesh,var,measured_ms,best_ms,predicted_ms,book_ms,compute_ms,exposed_ms,pred_compute_ms,pred_comm_ms,pred_exposed_ms,measured_over_predicted,dominant,boundary,compute_cpu_ms,transfer_ms,at_peak_ms,flags,bwd_cpu_ms,passes_cpu_ms,fwd_mlp_cpu_ms,fwd_mlp_transfer_ms,pred_bwd_ms,pred_passes_ms,pred_fwd_mlp_ms,pred_fwd_mlp_comm_ms,wire_boundary,wire_ratio,transfer_last_ms,fwd_mlp_transfer_last_ms,pred_dedicated_ms,threads_per_cpu" >"$CSV"

# parts LINE: the fwd+bwd sum, the backward's and the forward MLP's ms of a `bench parts` line
parts() {
  local p=() k
  for k in fwd-attn fwd-mlp fwd-other bwd-attn bwd-mlp bwd-other; do p+=("$(field "$1" "$k")"); done
  awk -v a="${p[0]}" -v b="${p[1]}" -v c="${p[2]}" -v d="${p[3]}" -v e="${p[4]}" -v f="${p[5]}" \
    'BEGIN{printf "%.1f %.1f %.1f", a + b + c + d + e + f, d + e + f, b}'
}

# run SWEEP NP VAR BOUNDARY MESH FLAGS...: one meshtrain --bench run, one CSV row; BOUNDARY "dp",
# "tp", "mixed": the one of `bench boundary` (tokens per rank, F, tokens per step), else the
# number itself
run() {
  local sweep=$1 np=$2 var=$3 bnd=$4 meshs=$5
  shift 5
  local out line split pred
  out=$(timeout 900 mpirun --oversubscribe --bind-to none -np "$np" "$MT" --bench --quiet \
        --no-matmul-bound --steps "$STEPS" "${EMU[@]}" --comm-dtype "$COMM" \
        --compute-dtype "$COMPUTE" \
        --mesh "$meshs" "$@" 2>&1) || {
    echo "fidelity: run failed: -np $np --mesh $meshs $*" >&2
    echo "$out" | tail -5 >&2
    return 0
  }
  line=$(grep '^bench |' <<<"$out"); split=$(grep '^bench split' <<<"$out")
  pred=$(grep '^bench predict' <<<"$out")
  local ms best comp comm pstep pcomp pcm pexp book dom ratio ccpu xfer peak
  ms=$(field "$line" 'ms/step median'); best=$(field "$line" 'best')
  comp=$(field "$split" 'compute'); comm=$(field "$split" 'exposed comm')
  ccpu=$(field "$split" 'compute-cpu'); xfer=$(field "$split" 'transfer'); peak=$(field "$pred" 'at-peak')
  pstep=$(field "$pred" 'step'); pcomp=$(field "$pred" 'compute'); pcm=$(field "$pred" 'comm')
  pexp=$(field "$pred" 'exposed'); book=$(field "$pred" 'book-ideal'); dom=$(word "$pred" 'dominant')
  local pded tpc # the prediction on a CPU per rank, and the threads per CPU it was priced at
  pded=$(field "$pred" 'dedicated'); tpc=$(field "$pred" 'threads-per-cpu')
  ratio=$(awk -v a="$ms" -v b="$pstep" 'BEGIN{printf "%.2f", (b > 0 ? a / b : 0)}')
  local bl pc px ppc ppm mc mx pcc pcm2 mbwd mmlp pbwd pmlp
  local wl wb="" wr=""
  bl=$(grep '^bench boundary' <<<"$out"); wl=$(grep '^bench wire-boundary' <<<"$out")
  case $bnd in
    dp) bnd=$(field "$bl" 'data-tokens-per-rank')
        wb=$(field "$wl" 'data-tokens-per-rank'); wr=$(field "$wl" 'data-ratio') ;;
    tp) bnd=$(field "$bl" 'tensor-F')
        wb=$(field "$wl" 'tensor-F'); wr=$(field "$wl" 'tensor-ratio') ;;
    mixed) bnd=$(field "$bl" 'mixed-tokens')
        wb=$(field "$wl" 'mixed-tokens'); wr=$(field "$wl" 'mixed-ratio') ;;
  esac
  pc=$(grep '^bench parts compute-cpu' <<<"$out"); px=$(grep '^bench parts transfer |' <<<"$out")
  local pxl xl mxl
  pxl=$(grep '^bench parts transfer-last' <<<"$out"); xl=$(field "$split" 'transfer-last')
  mxl=$(field "$pxl" 'fwd-mlp')
  ppc=$(grep '^bench parts predicted-compute' <<<"$out"); ppm=$(grep '^bench parts predicted-comm' <<<"$out")
  read -r mc mbwd mmlp <<<"$(parts "$pc")"
  read -r pcc pbwd pmlp <<<"$(parts "$ppc")"
  mx=$(field "$px" 'fwd-mlp'); pcm2=$(field "$ppm" 'fwd-mlp')
  [ "$EMULATE" = v5p ] || sed -n 's|.*regime: C = \([0-9.e+]*\) FLOP/s, W = \([0-9.e+]*\) B/s.*α = C/W = \([0-9]*\).*|\3,\1,\2|p' <<<"$out" |
    head -1 | sed "s|^|$sweep,$np,$var,|" >>"$RCSV"
  echo "$sweep,$np,${meshs//,/;},$var,$ms,$best,$pstep,$book,$comp,$comm,$pcomp,$pcm,$pexp,$ratio,$dom,$bnd,$ccpu,$xfer,$peak,$*,$mbwd,$mc,$mmlp,$mx,$pbwd,$pcc,$pmlp,$pcm2,$wb,$wr,$xl,$mxl,$pded,$tpc" >>"$CSV"
  echo "$sweep np=$np $var: measured $ms ms, predicted $pstep ms ($ratio), compute $comp ms (cpu $ccpu), predicted $pcomp ms, book $book ms, $dom" >&2
}

# DP/FSDP: L=1 D=512 F=2048 (4.5M parameters, 8.4 MB a layer in bf16): each gradient bucket and
# weight-gather bucket (--bucket auto: 2 MB) is ~10× the 180 kB a v5p hop's latency is worth
# (T_min·W), so the collectives are bandwidth-bound, as the book's boundary assumes; at D = 512
# the work beside the matmuls (attention's softmax, norms, SwiGLU), which the book does not
# count, is half its share at D = 256
DATA_MODEL="--layers 1 --d-model 512 --heads 8 --d-ff 2048 --seq-len $T"
# FSDP: four such layers. The backward pass re-gathers a layer's weights, as the book's FSDP does,
# except for the last two layers, whose weights stay in the two gather slots from the forward pass
# (train/parallel/zero.c): with L layers the step moves (3L−2)/(3L) of the book's 3 weight-sized
# collectives, 5/6 at L = 4 (with 1 or 2 layers, 2/3: no re-gather at all)
FSDP_MODEL="--layers 4 --d-model 512 --heads 8 --d-ff 2048 --seq-len $T"
# TP: 64 sequences of 128 = 8192 tokens at D=256: each activation AllGather/ReduceScatter moves
# 4.2 MB (bf16), 23× a hop's latency
TP_MODEL="--layers 1 --d-model 256 --heads 4 --seq-len $T --batch 64"
# the FSDP+TP split: d_ff and sequences per step. For this model's SwiGLU the book's optimal split
# is X_opt = sqrt((2/3)·(B/F)·N) (its sqrt((B/F)·N) with F_book = 1.5·F: docs/fidelity.md), so
# |Y| = N/X_opt = sqrt(1.5·N·F/B): with B = 4096 tokens and F = 2048, sqrt(3) = 1.73 on 4 ranks,
# inside (1, 4), and 1.22 on 2; B·F as before (8192 × 1024). The split the book picks is the one
# of least communication by its terms at the splits that exist (targets below): there |Y| = 1 on
# both, by 14% on 4 ranks (the 2x2 split costs F_book/2 + B/2 against F_book)
MIX_F=2048 MIX_B=32
# FSDP+TP's threshold as a crossover (mixedx, 4 ranks, x=2,y=2): L=2 D=128 and F = 4096, 6144,
# 10240 with B = 1.5·F tokens per step (48, 72, 120 sequences). Along B = 1.5·F the book's
# X_opt = 2 = |Y|, and its threshold is B = 4α = 10200 tokens per step (B/N = α): derived for this
# model, the whole step and the bytes on the wire in docs/fidelity.md. Two layers: ZeRO-3 keeps
# both gathered into the backward (no re-gather), which halves the cost of four
MIXX_MODEL="--layers 2 --d-model 128 --heads 4 --seq-len $T"
MIXX_F="4096 6144 10240"
[ -n "${REPORT_ONLY:-}" ] && RUN_RANKS="" || RUN_RANKS=$RANKS
for np in $RUN_RANKS; do
  for sweep in $SWEEPS; do
    case $sweep in
      dp | fsdp)
        extra="--dp x --overlap --bucket $BUCKET"
        [ "$sweep" = fsdp ] && extra="--dp x --zero 3 --overlap --bucket $BUCKET"
        model=$DATA_MODEL td=$T
        [ "$sweep" = fsdp ] && model=$FSDP_MODEL
        pts=$(points "$np" tpr "$sweep")
        if [ "$EMULATE" = none ]; then # one sequence of 8 per rank for the probe
          # shellcheck disable=SC2086
          b=$(probe "$np" data-tokens-per-rank "x=$np" ${model/--seq-len $T/--seq-len 8} --batch "$np" $extra) || continue
          pts=$(noemu_points "$b" 2) # at least 2 tokens per rank: --seq-len is at least 2
          td=$((${pts%% *} < 8 ? ${pts%% *} : 8)) model=${model/--seq-len $T/--seq-len $td}
        fi
        for tpr in $pts; do
          # shellcheck disable=SC2086
          run "$sweep" "$np" "$tpr" dp "x=$np" $model --batch $((tpr * np / td)) $extra
        done ;;
      tp)
        for F in $(tp_points "$np" "$(points "$np" f)"); do
          # shellcheck disable=SC2086
          run tp "$np" "$F" tp "y=$np" $TP_MODEL --d-ff "$F" --tensor y
        done ;;
      tpcmm) # the TP runs with the collective matmul (forward RS, backward AG and RS hidden)
        for F in $(tp_points "$np" "$((512 * np)) $((2048 * np)) $((4096 * np))"); do
          # shellcheck disable=SC2086
          run tpcmm "$np" "$F" tp "y=$np" $TP_MODEL --d-ff "$F" --tensor y --collective-matmul on
        done ;;
      mixed)
        # the book's optimum X = sqrt(B/F_book · N) (one data axis, one tensor axis, F_book =
        # 1.5·F for the SwiGLU), so |Y|_opt = N / X_opt
        yopt=$(awk -v n="$np" -v b=$((MIX_B * T)) -v f="$MIX_F" 'BEGIN{printf "%.2f", n / sqrt(b / (1.5 * f) * n)}')
        y=1
        while [ "$y" -le "$np" ]; do
          x=$((np / y))
          if [ "$y" -eq 1 ]; then meshs="x=$np"; fl="--dp x --zero 3 --overlap --bucket $BUCKET"
          elif [ "$x" -eq 1 ]; then meshs="y=$np"; fl="--tensor y"
          else meshs="x=$x,y=$y"; fl="--dp x --zero 3 --tensor y --overlap --bucket $BUCKET"; fi
          # shellcheck disable=SC2086
          run mixed "$np" "$y" "$yopt" "$meshs" --layers 4 --d-model 128 --heads 4 --d-ff "$MIX_F" \
            --seq-len "$T" --batch "$MIX_B" $fl
          y=$((y * 2))
        done ;;
      mixedx) # 4 ranks only: the 2x2 split (its points are v5p's)
        [ "$np" -eq 4 ] || continue
        [ "$EMULATE" = v5p ] || { echo "fidelity: EMULATE=none: mixedx not run (its points are v5p's)" >&2; continue; }
        for F in $MIXX_F; do
          # shellcheck disable=SC2086
          run mixedx 4 $((F * 3 / 2)) mixed "x=2,y=2" $MIXX_MODEL --d-ff "$F" \
            --batch $((F * 3 / 2 / T)) --dp x --zero 3 --tensor y --overlap --bucket "$BUCKET"
        done ;;
    esac
  done
done

# ---- the targets ----
# median of the numbers on stdin
median() { sort -g | awk '{v[NR] = $1} END {if (NR) printf "%.2f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
# crossover SWEEP NP COMPUTE_COL COMM_COL: the swept value where compute meets communication,
# interpolated in log-log between the two points that bracket it; "<first" / ">last" if none do
crossover() {
  awk -F, -v s="$1" -v n="$2" -v cc="$3" -v mc="$4" '$1 == s && $2 == n && $cc > 0 && $mc > 0 {print $4, log($cc / $mc)}' "$CSV" 2>/dev/null |
    sort -g | awk '{x[NR] = $1; d[NR] = $2}
      END {
        if (!NR) exit
        for (i = 1; i < NR; i++)
          if (d[i] < 0 && d[i + 1] >= 0) {
            lx = log(x[i]) + (log(x[i + 1]) - log(x[i])) * d[i] / (d[i] - d[i + 1])
            printf "%.0f", exp(lx); exit
          }
        if (d[1] >= 0) printf "<%s", x[1]; else printf ">%s", x[NR]
      }'
}
# verdict MEASURED BOUNDARY: the ratio and "within"/"outside" ±25% (an open crossover is outside)
verdict() {
  awk -v m="$1" -v b="$2" 'BEGIN{
    if (m ~ /^[<>]/) {printf "beyond the sweep: outside ±25%%"; exit}
    r = m / b; printf "%.2f of it: %s ±25%%", r, (r >= 0.75 && r <= 1.25 ? "within" : "outside")}'
}
# noemu_lines SWEEP NP CC MC PC PM (EMULATE=none): the runs' α = C/W, and what the crossover
# compares at the sweep's first and last points, measured and predicted (when the crossover lies
# beyond the sweep, these say by how much)
noemu_lines() {
  awk -F, -v s="$1" -v n="$2" '$1 == s && $2 == n && $4 > 0 {print $4, $5, $6}' "$RCSV" 2>/dev/null |
    sort -g | awk '{a[NR] = $1; c += $2; w += $3}
      END {if (!NR) exit; printf "  this machine: α = C/W %d-%d over the runs (C mean %.3g FLOP/s, W mean %.3g B/s both ways)\n", a[1], a[NR], c / NR, w / NR}'
  awk -F, -v s="$1" -v n="$2" -v cc="$3" -v mc="$4" -v pc="$5" -v pm="$6" '$1 == s && $2 == n {print $4, $cc, $mc, $pc, $pm}' "$CSV" |
    sort -g | awk 'NR == 1 {f = $0} {l = $0} END {if (!NR) exit; split(f, a); split(l, b)
      printf "  compared, measured compute/transfer (predicted): at %s %s/%s ms = %.2f (%s/%s = %.2f); at %s %s/%s ms = %.2f (%s/%s = %.2f)\n",
        a[1], a[2], a[3], (a[3] > 0 ? a[2] / a[3] : 0), a[4], a[5], (a[5] > 0 ? a[4] / a[5] : 0),
        b[1], b[2], b[3], (b[3] > 0 ? b[2] / b[3] : 0), b[4], b[5], (b[5] > 0 ? b[4] / b[5] : 0)}'
}
targets() {
  local np rows ok med mn mx cw cpu
  for np in $RANKS; do
    rows=$(awk -F, -v n="$np" 'NR > 1 && $2 == n && $7 > 0 {print $5 / $7}' "$CSV" | sort -g)
    [ -n "$rows" ] || continue
    ok=$(awk '$1 >= 0.85 && $1 <= 1.15' <<<"$rows" | wc -l)
    med=$(median <<<"$rows"); mn=$(head -1 <<<"$rows"); mx=$(tail -1 <<<"$rows")
    cpu=$(awk -F, -v n="$np" 'NR > 1 && $2 == n && $11 > 0 && $17 > 0 {print $17 / $11}' "$CSV" | median)
    cw=$(awk -F, -v n="$np" 'NR > 1 && $2 == n && $17 > 0 {print $9 / $17}' "$CSV" | median)
    printf "target: step measured/predicted within [0.85, 1.15], %s ranks on %s vCPUs: %s of %s runs (min %.2f, median %s, max %.2f): %s\n" \
      "$np" "$(getconf _NPROCESSORS_ONLN)" "$ok" "$(wc -l <<<"$rows")" "$mn" "$med" "$mx" \
      "$([ "$ok" -eq "$(wc -l <<<"$rows")" ] && echo within || echo outside)"
    echo "  compute: measured CPU time / predicted, median $cpu (the kernels' model); measured wall / CPU time, median $cw (1 when each rank has its core)"
    # the prediction on a CPU per rank beside it (a CSV from before it has no column 33)
    local ded
    ded=$(awk -F, -v n="$np" 'NR > 1 && $2 == n && $33 > 0 {print $5 / $33}' "$CSV" | sort -g)
    [ -n "$ded" ] && echo "  on a CPU per rank (pred_dedicated): $(awk '$1 >= 0.85 && $1 <= 1.15' <<<"$ded" | wc -l) of $(wc -l <<<"$ded") runs within, median $(median <<<"$ded"); threads per CPU $(awk -F, -v n="$np" 'NR > 1 && $2 == n && $34 > 0 {print $34}' "$CSV" | median)"
  done
  local sw b bw c cp w cc mc mo co pc pm what against
  for sw in dp fsdp tp tpcmm mixedx; do
    # the columns compared (measured compute, measured transfer, predicted compute, comm)
    # (mc: the transfer from the last rank's start; mo: from each rank's own, the old measure)
    case $sw in
      dp) cc=21 mc=31 mo=18 pc=25 pm=12 what="backward-pass compute CPU = the step's transfer (gradient AllReduces), tokens per rank" ;;
      fsdp) cc=22 mc=31 mo=18 pc=26 pm=12 what="forward+backward compute CPU = the step's transfer (AllGathers, ReduceScatters), tokens per rank" ;;
      mixedx) cc=17 mc=31 mo=18 pc=11 pm=12 what="FSDP+TP on x=2,y=2: the step's compute CPU = its transfer (weights' gathers and scatters over x, activations' over y), tokens per step along B = 1.5·F" ;;
      *) cc=23 mc=32 mo=24 pc=27 pm=28 what="MLP forward compute CPU = its AllGather + ReduceScatter transfer, d_ff" ;;
    esac
    for np in $RANKS; do
      b=$(awk -F, -v s="$sw" -v n="$np" '$1 == s && $2 == n {print $16; exit}' "$CSV")
      [ -n "$b" ] || continue
      # without emulation each run has its own α: the sweep's median
      [ "$EMULATE" = v5p ] ||
        b=$(awk -F, -v s="$sw" -v n="$np" '$1 == s && $2 == n {print $16}' "$CSV" | median | xargs printf %.0f)
      # the boundary for what the runs put on the wire (the sweep's median; the book's if the
      # CSV predates it)
      bw=$(awk -F, -v s="$sw" -v n="$np" '$1 == s && $2 == n && $29 > 0 {print $29}' "$CSV" | median)
      # a CSV from before transfer-last: the old measure
      local m=$mc
      awk -F, -v s="$sw" -v n="$np" -v m="$m" '$1 == s && $2 == n && $m > 0 {f = 1} END {exit !f}' "$CSV" || m=$mo
      c=$(crossover "$sw" "$np" "$cc" "$m"); cp=$(crossover "$sw" "$np" "$pc" "$pm")
      co=$(crossover "$sw" "$np" "$cc" "$mo")
      w=$(crossover "$sw" "$np" 17 "$([ "$m" = "$mo" ] && echo 18 || echo 31)")
      if [ -n "$bw" ]; then
        against="on the wire $(printf %.0f "$bw") ($(awk -v a="$bw" -v b="$b" 'BEGIN{printf "%.3f", a / b}') of the book's $b): $(verdict "$c" "$bw"); predicted $(verdict "$cp" "$bw" | cut -d: -f1); of the book's: $(verdict "$c" "$b" | cut -d: -f1)"
      else
        against="book $b: $(verdict "$c" "$b")"
      fi
      # (mixedx compares the whole step already)
      local wb2="; whole step's compute CPU = all transfer: $w"
      [ "$sw" = mixedx ] && wb2=""
      echo "target: crossover $sw, $np ranks ($what): measured $c, predicted $cp, $against (transfer from each rank's own start: $co$wb2)"
      [ "$EMULATE" = v5p ] || noemu_lines "$sw" "$np" "$cc" "$m" "$pc" "$pm"
    done
  done
  for np in $RANKS; do
    local best yopt
    best=$(awk -F, -v n="$np" '$1 == "mixed" && $2 == n && $5 > 0 {print $5, $4}' "$CSV" | sort -g | awk 'NR == 1 {print $2}')
    [ -n "$best" ] || continue
    yopt=$(awk -F, -v n="$np" '$1 == "mixed" && $2 == n {print $16; exit}' "$CSV")
    # the split the book picks: the one of least communication per MLP forward by its terms, in
    # units of 4·D/W: F_book/|Y| for the weights' AllGather over X = N/|Y| (none when X = 1),
    # B/X for the activations' AllGather and ReduceScatter over Y (none when |Y| = 1). X_opt
    # minimises their sum over a continuous X with both terms present; a pure split drops one,
    # so on N = 4 with one axis each the 2x2 split (F_book/2 + B/2) never costs less than the
    # better pure one, and ties both only at B = F_book
    local ybook costs
    read -r ybook costs < <(awk -v n="$np" -v b=$((MIX_B * T)) -v f="$MIX_F" 'BEGIN{
      fb = 1.5 * f; best = 0
      for (y = 1; y <= n; y *= 2) {
        x = n / y; c = (x > 1 ? fb / y : 0) + (y > 1 ? b / x : 0)
        s = s sprintf("%s|Y| = %d: %.0f", (y > 1 ? ", " : ""), y, c)
        if (!best || c < bc) {best = y; bc = c}
      }
      print best, s}')
    echo "target: mixed split, $np ranks: fastest |Y| = $best; the book's X_opt gives |Y| = N/X_opt = $yopt, its communication per MLP forward at the splits that exist (4·D/W) $costs: |Y| = $ybook: $([ "$best" = "$ybook" ] && echo within || echo outside)"
    awk -F, -v n="$np" -v a="$ALPHA" -v f="$MIX_F" -v b=$((MIX_B * T)) '$1 == "mixed" && $2 == n && $3 ~ /;/ {
      thr = 4 * a * a / (1.5 * f); bn = b / n
      book = bn > thr ? "compute-bound" : "communication-bound"
      xf = $31 > 0 ? $31 : $18
      meas = $17 > xf ? "compute-bound" : "communication-bound"
      printf "target: mixed threshold, %s ranks (%s): B/N = %d vs 4α²/(M_X·M_Y·F_book) = %.0f (F_book = 1.5·F), the book: %s; measured compute CPU %.0f ms vs transfer %.0f ms: %s: %s\n",
        n, $3, bn, thr, book, $17, xf, meas, (book == meas ? "within" : "outside")}' "$CSV"
  done
}

# ---- the tables ----
# EMULATE=none: α (with --comm-dtype's bytes, as for v5p above) is this machine's, the runs' median
if [ "$EMULATE" = none ]; then
  ALPHA=$(awk -F, -v c="$COMM" 'NR > 1 && $6 > 0 {print $5 / $6 * (c == "bf16" ? 1 : 2)}' "$RCSV" 2>/dev/null | median)
  ALPHA=$(printf %.0f "${ALPHA:-0}")
fi
EMU_WHAT="--emulate v5p --emulate-rate $RATE"
[ "$EMULATE" = v5p ] || EMU_WHAT="no --emulate (this machine's links)"
{
  echo "# Fidelity results: measured steps against the prediction and the book"
  echo
  echo "How the prediction is made, and what the columns mean: [fidelity.md](fidelity.md)."
  echo
  echo "Measured by \`bench/fidelity.sh $BUILD\` (RANKS=\"$RANKS\" STEPS=$STEPS COMM=$COMM COMPUTE=$COMPUTE BUCKET=$BUCKET${QUICK:+ QUICK=1}$([ "$EMULATE" = v5p ] || echo " EMULATE=$EMULATE"))"
  echo "on $(date -u +%Y-%m-%d), $(getconf _NPROCESSORS_ONLN) vCPUs, load average at the end:"
  echo "$(cut -d' ' -f1-3 /proc/loadavg). Every run: \`${EMU[*]}${EMU[*]:+ }--comm-dtype $COMM --compute-dtype $COMPUTE\`, 1 BLAS"
  echo "thread per rank, $STEPS timed steps after 2 warm-up steps; ms are the median step (prediction:"
  echo "the mean over the timed steps). The raw rows are in $PREFIX.csv."
  [ "$EMULATE" = v5p ] || echo "No \`--emulate\`: the links are this machine's (shared memory), α = C/W with C the matmul rate and W the link both ways measured by each run at start-up (\`bench regime\`; the runs' values in ${PREFIX}_regime.csv)."
  echo
  echo "- *predicted*: meshtrain's per-step prediction (this run's collectives, bytes, hops, T_min"
  echo "  and link bandwidth, what may overlap what; compute from every kernel timed at start-up on"
  echo "  this rank's shapes, on the thread's CPU clock)."
  echo "- *compute cpu*: the compute's CPU time (rank 0): what the compute takes when the rank has"
  echo "  its core. On a loaded machine, or with more ranks than cores, the wall-clock compute is"
  echo "  longer by the share of the core the rank did not get."
  echo "- *transfer*: the collectives' time from start to end on rank 0, hidden or not; it includes"
  echo "  the wait for a peer that started later. *transfer from the last start*: each collective from"
  echo "  the last rank's start to the last rank's end (the book's T_comms, without that skew); the"
  echo "  crossovers compare it."
  echo "- *book*: the book's idealised step, max(compute at the peak sgemm rate, communication by the"
  echo "  book's formulas with bf16 bytes)."
  echo "- *boundary*: the book's crossover for the swept variable (B/X = α·wire/2 tokens per rank for"
  echo "  DP/FSDP; F = |Y|·α·wire/2·2/3 for TP with this model's SwiGLU MLP, whose forward is 6·B·D·F/|Y|"
  echo "  FLOPs against the book's 4; |Y| = N/X_opt for the FSDP+TP split; tokens per step"
  echo "  B = α·(X + ⅔·(B/F)·|Y|) for FSDP+TP's threshold along the run's B/F, 4α on mixedx's path; α = $ALPHA with $([ "$EMULATE" = v5p ] && echo bf16 || echo "$COMM on the wire, this machine's median"))."
  echo "- *on the wire*: the book's boundary for the collectives and bytes the run put on the wire"
  echo "  (meshtrain's \`bench wire-boundary\`: the time of the bytes mesh counted on each link against"
  echo "  the book's collectives in bf16; docs/fidelity.md). The crossover targets are judged against it."
  echo
  echo "## Targets"
  echo
  echo '```'
  targets
  echo '```'
  echo
  echo "A crossover is where the compute the book's boundary counts meets the communication it sets"
  echo "against it, interpolated in log-log between the sweep's points: for DP the backward pass's"
  echo "compute CPU time against the step's transfer time (the gradient AllReduces); for FSDP the"
  echo "forward and backward passes' against the step's; for TP the MLP's forward compute against the"
  echo "collectives issued in it (its AllGather and ReduceScatter). *predicted* is the same from the"
  echo "prediction's compute and communication. The whole step's crossover (all compute = all"
  echo "transfer, as this benchmark measured before) is in brackets."
  echo
  echo "The boundary each crossover is judged against is the book's for what the runs put on the"
  echo "wire: the book's boundary × (the time of the bytes mesh counted on each link direction, for"
  echo "the collectives the crossover compares) / (the book's collectives in bf16 at V/W). Per sweep"
  echo "(the median over its points):"
  echo
  echo "| sweep | ranks | book's boundary | on the wire | ratio | what differs from the book |"
  echo "|---|---|---|---|---|---|"
  for sw in dp fsdp tp tpcmm mixedx; do
    for np in $RANKS; do
      awk -F, -v s="$sw" -v n="$np" '$1 == s && $2 == n && $29 > 0 {print $16, $29, $30}' "$CSV" |
        sort -g -k3 | awk -v s="$sw" -v n="$np" '{b[NR] = $1; w[NR] = $2; r[NR] = $3}
          END {
            if (!NR) exit
            k = int((NR + 1) / 2)
            why = s == "fsdp" ? "ZeRO-3 keeps the last two layers gathered into the backward (L = 4: 10 of 12 layer collectives)" : ""
            if (n > 2) why = why (why == "" ? "" : "; ") "a ring of " n " sends (N-1)/N of V per link direction"
            if (s == "tpcmm" && n > 2) why = why "; the collective matmul'"'"'s ppermutes use one direction of each link"
            if (s == "mixedx") why = "the whole step, where the book sets one MLP'"'"'s forward: the backward'"'"'s collectives, the attention'"'"'s compute, weights and activation collectives, the embedding'"'"'s AllReduce and the head'"'"'s gradient over y; ZeRO-3 keeps both layers (L = 2) gathered; lines of 2"
            if (why == "") why = "none (a line of 2 moves the book'"'"'s V/W)"
            printf "| %s | %s | %s | %.0f | %.3f | %s |\n", s, n, b[k], w[k], r[k], why}'
    done
  done
  echo
  echo "## measured / predicted, over every run"
  echo
  echo "| ranks | runs | min | median | max | within [0.85, 1.15] | median, best step / predicted |"
  echo "|---|---|---|---|---|---|---|"
  for np in $RANKS; do
    ratios=$(awk -F, -v n="$np" 'NR > 1 && $2 == n && $7 > 0 {print $5 / $7}' "$CSV" | sort -g)
    [ -n "$ratios" ] || continue
    mb=$(awk -F, -v n="$np" 'NR > 1 && $2 == n && $7 > 0 {print $6 / $7}' "$CSV" | median)
    awk -v n="$np" -v mb="$mb" '{r[NR] = $1; ok += ($1 >= 0.85 && $1 <= 1.15)}
      END {printf "| %s | %d | %.2f | %.2f | %.2f | %d of %d | %s |\n", n, NR, r[1],
           (NR % 2 ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2), r[NR], ok, NR, mb}' <<<"$ratios"
  done
  for sweep in $SWEEPS; do
    echo
    echo "## $sweep"
    echo
    echo "| ranks | mesh | swept | measured ms | predicted ms | meas/pred | book ms | compute ms | compute cpu ms | predicted compute ms | transfer ms | transfer from the last start ms | predicted comm ms | exposed comm ms | dominant (predicted) | boundary | on the wire | compared: compute cpu ms | compared: transfer ms (own start) |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    # the compared columns: what the sweep's crossover sets against each other (targets above)
    # (the transfer compared: from the last rank's start; from rank 0's own start in brackets)
    awk -F, -v s="$sweep" '$1 == s {
      cc = s == "dp" ? $21 : s == "fsdp" ? $22 : s ~ /^mixed/ ? $17 : $23
      mo = s == "tp" || s == "tpcmm" ? $24 : $18
      ml = s == "tp" || s == "tpcmm" ? $32 : $31
      mc = ml > 0 ? sprintf("%s (%s)", ml, mo) : mo
      printf "| %s | %s | %s | %s | %s | %.2f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $2, $3, $4, $5, $7, ($7 > 0 ? $5 / $7 : 0), $8, $9, $17, $11, $18, ($31 > 0 ? $31 : "-"), $12, $10, $15, $16, ($29 > 0 ? $29 : "-"), cc, mc}' "$CSV"
    if command -v gnuplot >/dev/null; then # the sweep's plots (drawn below), one per rank count
      echo
      for np in $RANKS; do
        awk -F, -v s="$sweep" -v n="$np" '$1 == s && $2 == n {f = 1} END {exit !f}' "$CSV" &&
          echo "![$sweep on $np ranks](${PREFIX}_${sweep}_np${np}.svg)"
      done
    fi
  done
} >"$MD"
targets

# ---- the pictures ----
if command -v gnuplot >/dev/null; then
  for sweep in $SWEEPS; do
    for np in $RANKS; do
      dat=$(mktemp)
      awk -F, -v s="$sweep" -v n="$np" '$1 == s && $2 == n {
        cc = s == "dp" ? $21 : s == "fsdp" ? $22 : s ~ /^mixed/ ? $17 : $23
        mc = s == "tp" || s == "tpcmm" ? ($32 > 0 ? $32 : $24) : ($31 > 0 ? $31 : $18)
        print $4, $5, $7, $8, $9, $10, $16, (cc > 0 ? cc : "NaN"), (mc > 0 ? mc : "NaN"), ($29 > 0 ? $29 : $16)}' "$CSV" >"$dat"
      if [ -s "$dat" ]; then
        bnd=$(awk 'NR==1{print $7}' "$dat")
        bwire=$(awk '{print $10}' "$dat" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}')
        # the x range holds the points and the boundaries (which may lie outside the sweep)
        xr=$(awk -v b="$bnd" -v c="$bwire" 'BEGIN{lo = b < c ? b : c; hi = b > c ? b : c}
               {lo = $1 < lo ? $1 : lo; hi = $1 > hi ? $1 : hi}
               END{printf "%g:%g", lo / 1.3, hi * 1.3}' "$dat")
        wmark=""
        [ "$sweep" != mixed ] && [ "$bwire" != "$bnd" ] &&
          wmark="set arrow from $bwire, graph 0 to $bwire, graph 1 nohead dashtype 1 linewidth 2 linecolor rgb \"dark-red\"
set label \"on the wire\" at $bwire, graph 0.10 left offset 0.5,0 textcolor rgb \"dark-red\""

        case $sweep in
          dp) cmp="backward pass" ;;
          fsdp) cmp="forward + backward" ;;
          tp | tpcmm) cmp="MLP forward" ;;
          *) cmp="whole step" ;;
        esac
        case $sweep in
          dp | fsdp) xl="tokens per rank (B/X)" ;;
          tp) xl="d_ff F" ;;
          tpcmm) xl="d_ff F (--collective-matmul on)" ;;
          mixed) xl="|Y| (tensor axis; FSDP over N/|Y|)" ;;
          mixedx) xl="tokens per step B (F = B/1.5; x=2 FSDP, y=2 TP)" ;;
        esac
        gnuplot <<GP
set terminal svg size 720,440 dynamic font "sans,11"
set output "$OUT_DIR/${PREFIX}_${sweep}_np${np}.svg"
set title "$sweep on $np ranks, $EMU_WHAT --comm-dtype $COMM --compute-dtype $COMPUTE"
set logscale x 2
set logscale y 10
set xrange [$xr]
set xlabel "$xl"
set ylabel "ms per step (log)"
set key top left
set grid
set arrow from $bnd, graph 0 to $bnd, graph 1 nohead dashtype 2 linewidth 2 linecolor rgb "gray40"
set label "book boundary" at $bnd, graph 0.05 left offset 0.5,0 textcolor rgb "gray40"
$wmark
plot "$dat" using 1:2 with linespoints lw 2 title "measured step", \
     "$dat" using 1:3 with linespoints lw 2 dashtype 2 title "predicted step", \
     "$dat" using 1:4 with linespoints dashtype 3 title "book (idealised)", \
     "$dat" using 1:5 with linespoints title "measured compute", \
     "$dat" using 1:6 with linespoints title "measured exposed comm", \
     "$dat" using 1:8 with linespoints lw 2 pt 7 title "compared: compute CPU ($cmp)", \
     "$dat" using 1:9 with linespoints lw 2 pt 5 title "compared: transfer (from the last start)"
GP
      fi
      rm -f "$dat"
    done
  done
else
  echo "fidelity: gnuplot not found (Debian: apt-get install gnuplot-nox); no plots" >&2
fi
echo "wrote $CSV and $MD${RUN_RANKS:+ in $SECONDS s}" >&2
