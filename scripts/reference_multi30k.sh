#!/usr/bin/env bash
# The Multi30k reference result: train en->de (or en->fr) from scratch on the
# 29k training pairs, average the last checkpoints, translate
# test_2016_flickr with the recipe's beam and length penalty, and write
# results/multi30k_en_<lang>.json and a PNG of dev BLEU against wall-clock
# minutes.
#
#   scripts/reference_multi30k.sh [--target_lang=de|fr] [--run_dir=DIR] [t2t-train flags...]
#
# Re-running the same command resumes training where it stopped (and skips
# the steps that are already done). Run from the repository root after
# `t2t-fetch multi30k`.
set -euo pipefail

target_lang=de
run_dir=
extra=()
for argument in "$@"; do
  case "$argument" in
    --target_lang=*) target_lang="${argument#*=}" ;;
    --run_dir=*) run_dir="${argument#*=}" ;;
    *) extra+=("$argument") ;;
  esac
done
case "$target_lang" in
  de|fr) ;;
  *) echo "reference_multi30k.sh: --target_lang must be de or fr, got '$target_lang'" >&2; exit 2 ;;
esac
data_flags=flags/data/multi30k_en_${target_lang}.cfg
run_dir="${run_dir:-runs/multi30k_reference_en_${target_lang}}"
average_dir="$run_dir/average"
results=results/multi30k_en_${target_lang}

# The recipe's --average_last: how many of the last checkpoints to average.
num_average=$(sed -n 's/^--average_last=//p' flags/reference.cfg)

# The test set is translated once, by the average below.
t2t-train --flagfile=flags/reference.cfg --flagfile="$data_flags" \
  --test_src= --test_tgt= --model_dir="$run_dir" \
  ${extra[@]+"${extra[@]}"}

if [ ! -e "$average_dir/checkpoint" ]; then
  rm -rf "$average_dir"
  t2t-average --model_dir="$run_dir" --output_dir="$average_dir" \
    --select=last --num_checkpoints="$num_average"
fi

mkdir -p results
t2t-eval --flagfile=flags/reference.cfg --flagfile="$data_flags" \
  --model_dir="$average_dir" --output_dir="$results"

python scripts/reference_report.py --run_dir="$run_dir" \
  --average_dir="$average_dir" --eval_dir="$results" --output="$results.json" --plot="$results.png"
