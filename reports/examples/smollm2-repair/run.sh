#!/usr/bin/env bash
# SmolLM2 without the angular strategy's k = 4, 6, 8 layers (reports/demo/smollm2-angular: 12-15, 13-18, 11-18),
# repaired by each method on one budget of text: held-out = the first 2,048 positions of the built-in corpus (seq-len
# 256), calibration / training text after it. Run folders go to $OUT (merged/ checkpoints: 420 MB each); the
# committed copies leave merged/ out. arc_easy: eval_arc.py on each merged/ checkpoint.
set -euo pipefail
OUT=${OUT:-/tmp/smollm2-repair}
STEPS=${STEPS:-200}
LR=${LR:-2e-4}
COMMON="--dataset builtin --tokens 2048 --seq-len 256 --batch-size 4 --no-gain --overwrite"
declare -A SETS=([4]=12-15 [6]=13-18 [8]=11-18)
for method in ${METHODS:-lstsq cosine tail lora}; do
  for k in ${KS:-4 6 8}; do
    case $method in
      lstsq|cosine) extra="--calibration-tokens 8192" ;;
      *) extra="--steps $STEPS --lr $LR --eval-every $STEPS --save-every $STEPS" ;;
    esac
    /usr/bin/time -f "%e s wall, %U s user, %S s sys" layerprobe heal smollm2 --remove "${SETS[$k]}" \
      --method "$method" $COMMON $extra --out "$OUT/k$k-$method" 2>&1 | grep -v "Writing model" | tail -4
  done
done
