#!/usr/bin/env bash
# demo.sh: the end-to-end demo. Verifies every example model, evaluates the MLP, the tiny GPT
# and GPT-10M at initialisation on the CPU reference backend (comparing the GPT losses with
# ln(vocab), the loss of a uniform prediction), then compiles the tiny GPT and the MLP into
# standalone training executables and trains both on the CPU backend on their built-in
# synthetic tasks.
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
echo "== Compiling the tiny GPT into a training executable"
"$ampc" compile examples/gpt/tiny.mlir -o "$out/train_tiny" \
  --lr 1e-3 --schedule cosine --warmup-steps 20
echo
echo "== Training it for 300 steps on the built-in synthetic language"
echo "   (untrained: ~ln(256) = 5.55 nats; the task's entropy floor is ~0.88 nats)"
"$out/train_tiny" --steps 300 --seed 0 --log "$out/tiny_metrics.jsonl"
echo
echo "== Compiling and training the MLP (synthetic 10-class task; untrained ~ln(10) = 2.30)"
"$ampc" compile examples/mlp/mlp.mlir -o "$out/train_mlp" | tail -n 1
"$out/train_mlp" --steps 30 --seed 0 --log "$out/mlp_metrics.jsonl"
echo
echo "== Plotting the tiny GPT's run (loss, learning rate, gradient norm, throughput)"
"$ampc" plot "$out/tiny_metrics.jsonl" -o "$out/tiny_metrics.png"
echo
echo "Training executables: $out/train_tiny, $out/train_mlp (try --help)"
echo "Per-step metrics (JSONL): $out/tiny_metrics.jsonl, $out/mlp_metrics.jsonl; plot: $out/tiny_metrics.png"
echo "Demo outputs are in $out"
