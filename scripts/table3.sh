#!/usr/bin/env bash
# The paper's Table 3 ablations on Multi30k en->de: trains each row of
# flags/table3/ (all of them, or the ones named) for the same number of
# steps, then prints and writes the table beside the paper's
# (results/table3.md and .json, by scripts/table3_report.py).
#
#   scripts/table3.sh [ROW...] [-- t2t-train flags...]
#   scripts/table3.sh base A-h1 A-h4       # rows are flags/table3/ROW.cfg
#
# TABLE3_RUNS (default runs/table3) holds one run directory per row;
# re-running resumes unfinished rows and leaves finished ones alone. Run
# from the repository root after `t2t-fetch multi30k`.
set -euo pipefail

runs="${TABLE3_RUNS:-runs/table3}"
output="${TABLE3_OUTPUT:-results/table3}"
rows=()
extra=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then shift; extra=("$@"); break; fi
  rows+=("$1"); shift
done
if [ ${#rows[@]} -eq 0 ]; then
  rows=(base)
  for file in flags/table3/*.cfg; do
    row="$(basename "$file" .cfg)"
    [ "$row" = base ] || rows+=("$row")
  done
fi
for row in "${rows[@]}"; do
  if [ ! -e "flags/table3/$row.cfg" ]; then
    echo "table3.sh: no row '$row' (flags/table3/$row.cfg)" >&2; exit 2
  fi
done

for row in "${rows[@]}"; do
  echo "== $row" >&2
  t2t-train --flagfile="flags/table3/$row.cfg" --model_dir="$runs/$row" \
    ${extra[@]+"${extra[@]}"}
done
mkdir -p "$(dirname "$output")"
python scripts/table3_report.py --runs="$runs" --output="$output"
