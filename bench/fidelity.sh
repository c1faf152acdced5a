#!/usr/bin/env bash
# The fidelity benchmark: measured steps against meshtrain's per-step prediction and the book's
# idealised figure, under --emulate v5p (links slowed to v5p's C/W), on 2 and 4 ranks.
#   dp     B/X sweep (tokens per rank), --mesh x=N --dp x --overlap
#   fsdp   B/X sweep, --mesh x=N --dp x --zero 3 --overlap
#   tp     d_ff sweep, --mesh y=N --tensor y
#   mixed  data/tensor split of N chips at a fixed model and batch: |Y| = 1 .. N, FSDP over the rest
# Writes OUT_DIR/fidelity.csv (one row per run), OUT_DIR/fidelity_results.md (the tables) and, when
# gnuplot is installed (Debian: gnuplot-nox), OUT_DIR/fidelity_<sweep>_np<N>.svg: step time and
# exposed communication against the swept variable, with the book's boundary marked.
# usage: bench/fidelity.sh [BUILD_DIR]
# env: RANKS="2 4" STEPS=4 COMM=bf16 BUCKET=auto OUT_DIR=docs QUICK=1 (fewer points)
#      SWEEPS="dp fsdp tp mixed" REPORT_ONLY=1 (no runs: the tables and plots from OUT_DIR's CSV)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
RANKS=${RANKS:-2 4}
STEPS=${STEPS:-4}
COMM=${COMM:-bf16}
BUCKET=${BUCKET:-auto}
OUT_DIR=${OUT_DIR:-docs}
SWEEPS=${SWEEPS:-dp fsdp tp mixed}
MT="$BUILD/meshtrain"
[ -x "$MT" ] || { echo "fidelity: $MT not found; build first" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OPENBLAS_NUM_THREADS=1
mkdir -p "$OUT_DIR"
CSV="$OUT_DIR/fidelity.csv" MD="$OUT_DIR/fidelity_results.md"
T=128
if [ -n "${QUICK:-}" ]; then
  TPR_LIST="512 2048 8192"; F_LIST="512 4096 16384"
else
  TPR_LIST="256 512 1024 2048 4096 8192"; F_LIST="512 1024 2048 4096 8192 16384"
fi

# The book's boundaries on v5p (alpha = C/W_ici = 4.59e14 / 1.8e11 = 2550 with bf16 on the
# wire; fp32 doubles the bytes and so the boundary).
ALPHA=$(awk -v c="$COMM" 'BEGIN{print (c == "bf16" ? 2550 : 5100)}')

field() { sed -n "s|.*$2 \([0-9.]*\).*|\1|p" <<<"$1" | head -1; }
word() { sed -n "s|.*$2 \([a-z-]*\).*|\1|p" <<<"$1" | head -1; }

[ -n "${REPORT_ONLY:-}" ] || echo "sweep,ranks,mesh,var,measured_ms,best_ms,predicted_ms,book_ms,compute_ms,exposed_ms,pred_compute_ms,pred_comm_ms,pred_exposed_ms,measured_over_predicted,dominant,boundary,flags" >"$CSV"

# run SWEEP NP VAR BOUNDARY MESH FLAGS...: one meshtrain --bench run, one CSV row
run() {
  local sweep=$1 np=$2 var=$3 bnd=$4 meshs=$5
  shift 5
  local out line split pred
  out=$(timeout 900 mpirun --oversubscribe --bind-to none -np "$np" "$MT" --bench --quiet \
        --steps "$STEPS" --emulate v5p --comm-dtype "$COMM" --mesh "$meshs" "$@" 2>&1) || {
    echo "fidelity: run failed: -np $np --mesh $meshs $*" >&2
    echo "$out" | tail -5 >&2
    return 0
  }
  line=$(grep '^bench |' <<<"$out"); split=$(grep '^bench split' <<<"$out")
  pred=$(grep '^bench predict' <<<"$out")
  local ms best comp comm pstep pcomp pcm pexp book dom ratio
  ms=$(field "$line" 'ms/step median'); best=$(field "$line" 'best')
  comp=$(field "$split" 'compute'); comm=$(field "$split" 'exposed comm')
  pstep=$(field "$pred" 'step'); pcomp=$(field "$pred" 'compute'); pcm=$(field "$pred" 'comm')
  pexp=$(field "$pred" 'exposed'); book=$(field "$pred" 'book-ideal'); dom=$(word "$pred" 'dominant')
  ratio=$(awk -v a="$ms" -v b="$pstep" 'BEGIN{printf "%.2f", (b > 0 ? a / b : 0)}')
  echo "$sweep,$np,${meshs//,/;},$var,$ms,$best,$pstep,$book,$comp,$comm,$pcomp,$pcm,$pexp,$ratio,$dom,$bnd,$*" >>"$CSV"
  echo "$sweep np=$np $var: measured $ms ms, predicted $pstep ms ($ratio), book $book ms, $dom" >&2
}

SMALL="--layers 4 --d-model 128 --heads 4 --d-ff 512 --seq-len $T"
[ -n "${REPORT_ONLY:-}" ] && RUN_RANKS="" || RUN_RANKS=$RANKS
for np in $RUN_RANKS; do
  for sweep in $SWEEPS; do
    case $sweep in
      dp | fsdp)
        extra="--dp x --overlap --bucket $BUCKET"
        [ "$sweep" = fsdp ] && extra="--dp x --zero 3 --overlap --bucket $BUCKET"
        for tpr in $TPR_LIST; do
          # shellcheck disable=SC2086
          run "$sweep" "$np" "$tpr" "$ALPHA" "x=$np" $SMALL --batch $((tpr * np / T)) $extra
        done ;;
      tp)
        for F in $F_LIST; do
          run tp "$np" "$F" $((np * ALPHA)) "y=$np" --layers 2 --d-model 128 --heads 4 \
            --d-ff "$F" --seq-len "$T" --batch 8 --tensor y
        done ;;
      mixed)
        # B = 64 sequences = 8192 tokens, F = 1024; the book's optimum X = sqrt(B/F · N) (one
        # data axis, one tensor axis), so |Y|_opt = N / X_opt
        yopt=$(awk -v n="$np" 'BEGIN{printf "%.2f", n / sqrt(8192 / 1024 * n)}')
        y=1
        while [ "$y" -le "$np" ]; do
          x=$((np / y))
          if [ "$y" -eq 1 ]; then meshs="x=$np"; fl="--dp x --zero 3 --overlap --bucket $BUCKET"
          elif [ "$x" -eq 1 ]; then meshs="y=$np"; fl="--tensor y"
          else meshs="x=$x,y=$y"; fl="--dp x --zero 3 --tensor y --overlap --bucket $BUCKET"; fi
          # shellcheck disable=SC2086
          run mixed "$np" "$y" "$yopt" "$meshs" --layers 4 --d-model 128 --heads 4 --d-ff 1024 \
            --seq-len "$T" --batch 64 $fl
          y=$((y * 2))
        done ;;
    esac
  done
done

# ---- the tables ----
{
  echo "# Fidelity results: measured steps against the prediction and the book"
  echo
  echo "How the prediction is made, and what the columns mean: [fidelity.md](fidelity.md)."
  echo
  echo "Measured by \`bench/fidelity.sh $BUILD\` (RANKS=\"$RANKS\" STEPS=$STEPS COMM=$COMM BUCKET=$BUCKET${QUICK:+ QUICK=1})"
  echo "on $(date -u +%Y-%m-%d), $(getconf _NPROCESSORS_ONLN) vCPUs, load average at the end:"
  echo "$(cut -d' ' -f1-3 /proc/loadavg). Every run: \`--emulate v5p --comm-dtype $COMM\`, 1 BLAS"
  echo "thread per rank, $STEPS timed steps after 2 warm-up steps; ms are the median step (prediction:"
  echo "the mean over the timed steps). The raw rows are in fidelity.csv."
  echo
  echo "- *predicted*: meshtrain's per-step prediction (this run's collectives, bytes, hops, T_min"
  echo "  and link bandwidth, what may overlap what; compute from every kernel timed at start-up on"
  echo "  this rank's shapes)."
  echo "- *book*: the book's idealised step, max(compute at the peak sgemm rate, communication by the"
  echo "  book's formulas with bf16 bytes)."
  echo "- *boundary*: the book's crossover for the swept variable (B/X = α = $ALPHA tokens per rank for"
  echo "  DP/FSDP; F = |Y|·α for TP; |Y| = N/X_opt for the FSDP+TP split)."
  echo
  echo "## measured / predicted, over every run"
  echo
  echo "| ranks | runs | min | median | max | within [0.85, 1.15] | median, best step / predicted |"
  echo "|---|---|---|---|---|---|---|"
  for np in $RANKS; do
    ratios=$(awk -F, -v n="$np" 'NR > 1 && $2 == n && $7 > 0 {print $5 / $7}' "$CSV" | sort -g)
    bests=$(awk -F, -v n="$np" 'NR > 1 && $2 == n && $7 > 0 {print $6 / $7}' "$CSV" | sort -g)
    [ -n "$ratios" ] || continue
    mb=$(awk '{v[NR] = $1} END {printf "%.2f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}' <<<"$bests")
    awk -v n="$np" -v mb="$mb" '{r[NR] = $1; ok += ($1 >= 0.85 && $1 <= 1.15)}
      END {printf "| %s | %d | %.2f | %.2f | %.2f | %d of %d | %s |\n", n, NR, r[1],
           (NR % 2 ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2), r[NR], ok, NR, mb}' <<<"$ratios"
  done
  for sweep in $SWEEPS; do
    echo
    echo "## $sweep"
    echo
    echo "| ranks | mesh | swept | measured ms | predicted ms | meas/pred | book ms | compute ms | exposed comm ms | dominant (predicted) | boundary |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
    awk -F, -v s="$sweep" '$1 == s {printf "| %s | %s | %s | %s | %s | %.2f | %s | %s | %s | %s | %s |\n", $2, $3, $4, $5, $7, ($7 > 0 ? $5 / $7 : 0), $8, $9, $10, $15, $16}' "$CSV"
  done
} >"$MD"

# ---- the pictures ----
if command -v gnuplot >/dev/null; then
  for sweep in $SWEEPS; do
    for np in $RANKS; do
      dat=$(mktemp)
      awk -F, -v s="$sweep" -v n="$np" '$1 == s && $2 == n {print $4, $5, $7, $8, $9, $10, $16}' "$CSV" >"$dat"
      if [ -s "$dat" ]; then
        bnd=$(awk 'NR==1{print $7}' "$dat")
        # the x range holds the points and the boundary (which may lie outside the sweep)
        xr=$(awk -v b="$bnd" 'BEGIN{lo = b; hi = b} {lo = $1 < lo ? $1 : lo; hi = $1 > hi ? $1 : hi}
               END{printf "%g:%g", lo / 1.3, hi * 1.3}' "$dat")
        case $sweep in
          dp | fsdp) xl="tokens per rank (B/X)" ;;
          tp) xl="d_ff F" ;;
          mixed) xl="|Y| (tensor axis; FSDP over N/|Y|)" ;;
        esac
        gnuplot <<GP
set terminal svg size 720,440 dynamic font "sans,11"
set output "$OUT_DIR/fidelity_${sweep}_np${np}.svg"
set title "$sweep on $np ranks, --emulate v5p --comm-dtype $COMM"
set logscale x 2
set logscale y 10
set xrange [$xr]
set xlabel "$xl"
set ylabel "ms per step (log)"
set key top left
set grid
set arrow from $bnd, graph 0 to $bnd, graph 1 nohead dashtype 2 linewidth 2 linecolor rgb "gray40"
set label "book boundary" at $bnd, graph 0.05 left offset 0.5,0 textcolor rgb "gray40"
plot "$dat" using 1:2 with linespoints lw 2 title "measured step", \
     "$dat" using 1:3 with linespoints lw 2 dashtype 2 title "predicted step", \
     "$dat" using 1:4 with linespoints dashtype 3 title "book (idealised)", \
     "$dat" using 1:5 with linespoints title "measured compute", \
     "$dat" using 1:6 with linespoints title "measured exposed comm"
GP
      fi
      rm -f "$dat"
    done
  done
else
  echo "fidelity: gnuplot not found (Debian: apt-get install gnuplot-nox); no plots" >&2
fi
echo "wrote $CSV and $MD" >&2
