#!/usr/bin/env bash
# demo.sh: the end-to-end demo. Verifies every example model, lowers the tiny GPT to a plan
# file, and evaluates the MLP, the tiny GPT and GPT-10M on the CPU reference backend, comparing
# the GPT losses at initialisation with ln(vocab), the loss of a uniform prediction.
set -euo pipefail
build=${1:-build}
ampc="$build/compiler/ampc"
out=${AMPC_DEMO_OUT:-$build/demo}
mkdir -p "$out"

echo "== Verifying the example models"
for model in examples/mlp/mlp.mlir examples/gpt/tiny.mlir examples/gpt/gpt10m.mlir \
             examples/gpt/gpt30m.mlir examples/gpt/gpt124m.mlir; do
  "$ampc" verify "$model" | tail -n 1
done

echo
echo "== Lowering the tiny GPT to a plan"
"$ampc" plan examples/gpt/tiny.mlir -o "$out/tiny.plan"

echo
echo "== Evaluating losses at initialisation on the CPU backend (seed 0)"
echo "mlp: $("$ampc" eval examples/mlp/mlp.mlir --seed 0 | tail -n 1)"  # ln(10) = 2.3026
for spec in tiny:256 gpt10m:8192; do
  name=${spec%%:*}; vocab=${spec##*:}
  line=$("$ampc" eval examples/gpt/$name.mlir --seed 0 | tail -n 1)
  echo "gpt $name: $line"
  python3 -c "import math,sys; l=float(sys.argv[1]); v=int(sys.argv[2]); \
print(f'  ln(vocab) = {math.log(v):.4f}; loss / ln(vocab) = {l/math.log(v):.4f}')" \
    "$(echo "$line" | awk '{print $2}')" "$vocab"
done
echo
echo "== The same tiny GPT from its plan file (no MLIR at run time)"
"$ampc" eval "$out/tiny.plan" --seed 0 | tail -n 1
echo
echo "Demo outputs are in $out"
