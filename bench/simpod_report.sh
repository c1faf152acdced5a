#!/usr/bin/env bash
# simpod_report: turns bench/simpod_sweep.sh's CSVs (meshbench --csv, v5p_TOPOLOGY_AXES_SIZE.csv)
# into OUTDIR/table.md (simulated vs predicted, per slice) and OUTDIR/simpod_TOPOLOGY.svg per slice
# (gnuplot-nox). A slice swept at two sizes gets one row per op and algorithm, at more, one per size.
#   bench/simpod_report.sh OUTDIR TOPOLOGY...
# Rows whose simulated/predicted ratio is off by more than 15% are marked with "!". The CSVs'
# prediction columns are first re-computed with the current cost model (build-smpi/simpod-predict),
# so the table shows the model as it is, whenever the simulations were run.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$1"; shift
for t in "$@"; do
  for f in "$out/v5p_${t}"_*.csv; do
    [ -f "$f" ] || continue
    build-smpi/simpod-predict --chip v5p --topology "$t" <"$f" >"$f.tmp" && mv "$f.tmp" "$f"
  done
done
human() { [ "$1" -ge 1048576 ] && echo "$(($1 / 1048576)) MiB" || echo "$(($1 / 1024)) KiB"; }
md="$out/table.md"
: >"$md"
for t in "$@"; do
  files=()
  for f in "$out/v5p_${t}"_*.csv; do [ -f "$f" ] && files+=("$f"); done
  [ ${#files[@]} -gt 0 ] || continue
  # sizes: every size of the runs; two sizes give one row per (axes, op, alg), more one per size
  sizes=$(awk -F, 'FNR > 1 { print $1 }' "${files[@]}" | sort -nu | tr '\n' ' ')
  read -r -a sz <<<"$sizes"
  {
    if [ ${#sz[@]} -eq 2 ]; then
      echo "#### v5p $t: simulated vs predicted (µs), sizes $(human "${sz[0]}") and $(human "${sz[1]}")"
      echo
      echo "| axes | op | alg | sim | pred | sim/pred | sim | pred | sim/pred |"
      echo "|---|---|---|---:|---:|---:|---:|---:|---:|"
    else
      echo "#### v5p $t: simulated vs predicted (µs)"
      echo
      echo "| axes | op | alg | size | sim | pred | sim/pred |"
      echo "|---|---|---|---:|---:|---:|---:|"
    fi
    awk -F, -v sizes="$sizes" '
      FNR == 1 { next }
      { k = $4 "," $3 "," $5; if (!(k in seen)) { seen[k] = 1; keys[n++] = k }
        t[k "," $1] = $6; p[k "," $1] = $13 }
      function cell(k, s,   r, mark) {
        if (!((k "," s) in t)) return " | | "
        r = p[k "," s] > 0 ? t[k "," s] / p[k "," s] : 0
        mark = (r > 1.15 || r < 1 / 1.15) ? " !" : ""
        return sprintf("%.1f | %.1f | %.2f%s", t[k "," s] * 1e6, p[k "," s] * 1e6, r, mark)
      }
      function human(b) { return b >= 1048576 ? b / 1048576 " MiB" : b / 1024 " KiB" }
      END { ns = split(sizes, sz, " ")
            for (i = 0; i < n; i++) { split(keys[i], f, ",")
              if (ns == 2) {
                printf "| %s | %s | %s | %s | %s |\n", f[1], f[2], f[3], cell(keys[i], sz[1]), cell(keys[i], sz[2])
              } else {
                for (j = 1; j <= ns; j++)
                  if ((keys[i] "," sz[j]) in t)
                    printf "| %s | %s | %s | %s | %s |\n", f[1], f[2], f[3], human(sz[j]), cell(keys[i], sz[j])
              } } }
    ' "${files[@]}"
    echo
  } >>"$md"
done
command -v gnuplot >/dev/null || { echo "simpod_report: gnuplot not found: no SVG" >&2; exit 0; }
for t in "$@"; do
  dat="$out/points.dat"
  : >"$dat"
  for alg in ring bidir seq multi direct mpi; do
    echo "# $alg" >>"$dat"
    for f in "$out/v5p_${t}"_*.csv; do
      [ -f "$f" ] && awk -F, -v a="$alg" 'FNR > 1 && $5 == a && $13 > 0 { print $13 * 1e6, $6 * 1e6 }' "$f" >>"$dat"
    done
    printf '\n\n' >>"$dat"
  done
  gnuplot <<GP
set terminal svg size 760,560 dynamic font "sans,11"
set output "$out/simpod_$t.svg"
set title "meshbench on a simulated v5p $t: simulated vs the cost model"
set logscale xy
set xlabel "predicted (mesh/cost.h, v5p links), µs"
set ylabel "simulated (SimGrid SMPI), µs"
set key bottom right
set grid
plot "$dat" index 0 title "ring" pt 7, "" index 1 title "bidir" pt 5, "" index 2 title "seq" pt 9, \\
     "" index 3 title "multi" pt 11, "" index 4 title "direct" pt 13, "" index 5 title "mpi" pt 1, \\
     x title "simulated = predicted" lt -1, 1.15*x title "±15%" dt 2 lt -1, x/1.15 notitle dt 2 lt -1
GP
  rm -f "$dat"
  echo "wrote $out/simpod_$t.svg" >&2
done
echo "wrote $md" >&2
