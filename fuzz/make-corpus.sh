#!/usr/bin/env bash
# make-corpus.sh AMPC_BUILD FUZZ_BUILD: writes seed inputs for every fuzz target from the
# examples and the tests, with the tools of the product build AMPC_BUILD (ampc, the training
# runner), and merges them into fuzz/corpus/<target>/ with FUZZ_BUILD's targets (-merge=1 keeps
# only the seeds that add coverage to what the corpus holds). To rebuild a corpus from nothing,
# remove its files but the crash-* ones (inputs of fixed defects, kept by hand) first.
#
# Needs Debian's python3 with numpy, onnx and torch (the test suite's oracle packages).
set -euo pipefail
cd "$(dirname "$0")/.."
ampc_build=$(realpath "${1:?usage: make-corpus.sh AMPC_BUILD FUZZ_BUILD}")
fuzz_build=$(realpath "${2:?usage: make-corpus.sh AMPC_BUILD FUZZ_BUILD}")
ampc="$ampc_build/compiler/ampc"
python=/usr/bin/python3
seeds=$(mktemp -d "${TMPDIR:-/tmp}/ampc-seeds-XXXXXX")
trap 'rm -rf "$seeds"' EXIT
for target in model onnx plan checkpoint safetensors tokens numpy; do
  mkdir -p "$seeds/$target" "fuzz/corpus/$target"
done

# The README's linear model: the smallest trainable model, for small plans and checkpoints.
cat > "$seeds/linear.mlir" <<'EOF'
graph.model @linear {
  graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02>
  graph.param @b : tensor<2xf32> init #graph.zeros
  graph.input @x : tensor<8x4xf32>
  graph.input @y : tensor<8x2xf32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<4x2xf32>
    %b = graph.get_param @b : tensor<2xf32>
    %x = graph.get_input @x : tensor<8x4xf32>
    %y = graph.get_input @y : tensor<8x2xf32>
    %p0 = graph.matmul %x, %w : tensor<8x4xf32>, tensor<4x2xf32>
    %p = graph.add %p0, %b : tensor<8x2xf32>, tensor<2xf32>
    %l = graph.mse_loss %p, %y : tensor<8x2xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
EOF

# model: the examples (not the large GPTs, which repeat tiny's structure), each test case of the
# dialect and pass tests, and the small models under other pipeline options.
cp "$seeds/linear.mlir" examples/mlp/*.mlir examples/gpt/tiny.mlir examples/resnet/resnet8.mlir \
  "$seeds/model/"
# The test cases without their comment lines (RUN, CHECK, expected-error), which the parser
# skips anyway and which would make up most of the corpus's bytes.
"$python" - "$seeds/model" test/Dialect/*.mlir test/Transforms/*.mlir <<'EOF'
import os, sys
out = sys.argv[1]
for path in sys.argv[2:]:
    stem = os.path.splitext(os.path.basename(path))[0]
    for i, case in enumerate(open(path).read().split("// -----")):
        lines = [l for l in case.splitlines() if not l.strip().startswith("//")]
        with open(os.path.join(out, "%s-%d.mlir" % (stem, i)), "w") as f:
            f.write("\n".join(lines).strip() + "\n")
EOF
with_options() { # MODEL OPTIONS
  { echo "// ampc-training-pipeline: $2"; cat "$seeds/$1"; } \
    > "$seeds/model/$(basename "$1" .mlir)-${2//[^a-z0-9]/_}.mlir"
}
for options in "precision=fp16" "precision=fp32 optimizer=sgd schedule=cosine warmup-steps=2" \
               "accum-steps=2 loss-scaling=static clip-norm=0" "memory-budget=50%"; do
  with_options linear.mlir "$options"
  with_options model/mlp.mlir "$options"
done
# The output head in chunks: its pass's test cases with their logits over the chunk size.
for case in "$seeds"/model/graph-chunk-classifier-*.mlir; do
  with_options "model/$(basename "$case")" "classifier-chunk=256"
done
# The tiny GPT (attention, a tied head) with rematerialization and a chunked classifier.
with_options model/tiny.mlir "memory-budget=40%"
with_options model/tiny.mlir "precision=fp16 debug-nonfinite=true classifier-chunk=1KiB"

# onnx: the test suite's hand-written ONNX files, one that reads the fuzz target's external data
# file (data.bin, beside the input), and small PyTorch exports.
for kind in opset18 function ops windows conv1d maxpool-indices unsupported no-scalar \
            missing-data bad-reshape bad-matmul; do
  "$python" test/Onnx/Inputs/make_onnx.py "$kind" "$seeds/onnx" > /dev/null
done
"$python" test/Onnx/Inputs/make_onnx.py external "$seeds/onnx" external data.bin > /dev/null
"$python" test/Onnx/Inputs/make_onnx.py external "$seeds/onnx" external-offset data.bin 64 64 \
  > /dev/null
for model in mlp cnn; do
  "$python" test/Onnx/Inputs/export_onnx.py "$model" "$seeds/exports" > /dev/null 2>&1 &&
    cp "$seeds/exports/$model.onnx" "$seeds/onnx/" || echo "note: no $model export"
done
rm -f "$seeds"/onnx/*.weights "$seeds"/onnx/*.bin "$seeds"/onnx/*.pt

# plan: forward and training plans (a training plan carries a device program when AMPC_BUILD
# has the CUDA toolkit) of the small models.
"$ampc" plan "$seeds/linear.mlir" -o "$seeds/plan/linear-forward" > /dev/null
"$ampc" plan "$seeds/linear.mlir" --train -o "$seeds/plan/linear-train" > /dev/null
"$ampc" plan "$seeds/linear.mlir" --train --precision fp16 -o "$seeds/plan/linear-fp16" \
  > /dev/null
"$ampc" plan examples/mlp/mlp.mlir -o "$seeds/plan/mlp-forward" > /dev/null
"$ampc" plan examples/resnet/resnet8.mlir -o "$seeds/plan/resnet8-forward" > /dev/null

# checkpoint and safetensors: a tiny training run's checkpoints and weights, in each precision.
for precision in fp32 fp16 bf16; do
  "$ampc" compile "$seeds/linear.mlir" --precision "$precision" -o "$seeds/train-$precision" \
    > /dev/null
  "$seeds/train-$precision" --steps 2 --device cpu --quiet \
    --checkpoint-dir "$seeds/ckpt-$precision" --ema-decay 0.9 \
    --export-weights "$seeds/safetensors/linear-$precision.safetensors" \
    --export-dtype "${precision/fp/f}" > /dev/null
  cp "$seeds/ckpt-$precision"/step-*.ckpt "$seeds/checkpoint/linear-$precision.ckpt"
done
"$ampc" eval "$seeds/linear.mlir" --grads "$seeds/safetensors/linear-grads.safetensors" \
  > /dev/null
"$ampc" import "$seeds/onnx/function.onnx" -o "$seeds/imported.mlir" > /dev/null &&
  cp "$seeds/imported.safetensors" "$seeds/safetensors/function.safetensors"

# tokens and numpy: small token files and arrays.
"$python" - "$seeds" <<'EOF'
import os, sys
import numpy as np
out = sys.argv[1]
rng = np.random.default_rng(0)
rng.integers(0, 256, 64, dtype=np.uint16).tofile(os.path.join(out, "tokens", "small.bin"))
rng.integers(0, 50304, 32, dtype=np.uint16).tofile(os.path.join(out, "tokens", "gpt2.bin"))
open(os.path.join(out, "tokens", "text.txt"), "wb").write(b"to be or not to be\n")
open(os.path.join(out, "tokens", "odd.bin"), "wb").write(bytes(range(7)))
n = os.path.join(out, "numpy")
x = rng.standard_normal((6, 2, 3)).astype(np.float32)
labels = rng.integers(0, 10, 6)
np.savez(os.path.join(n, "stored.npz"), x=x.reshape(6, 2, 3)[:, 0, :], labels=labels)
np.savez_compressed(os.path.join(n, "deflated.npz"), x=x[:, 0, :], labels=labels)
np.savez(os.path.join(n, "types.npz"), x=x[:, 0, :].astype(np.float16),
         labels=labels.astype(np.uint8))
np.savez(os.path.join(n, "wide.npz"), x=x[:, 0, :].astype(np.float64),
         labels=labels.astype(np.int32))
np.savez(os.path.join(n, "bad-label.npz"), x=x[:, 0, :], labels=labels + 10)
np.save(os.path.join(n, "x.npy"), x[:, 0, :])
with open(os.path.join(n, "x-v2.npy"), "wb") as f:
    np.lib.format.write_array(f, x[:, 0, :], version=(2, 0))
EOF
rm -f "$seeds"/numpy/*.tmp

# Every seed must run cleanly first: a merge steps over inputs that crash.
for target in model onnx plan checkpoint safetensors tokens numpy; do
  "$fuzz_build/fuzz/fuzz_$target" -timeout=25 -rss_limit_mb=4096 "$seeds/$target"/* \
    > "$seeds/run-$target.log" 2>&1 ||
    { grep -E "Running:|ERROR|SUMMARY" "$seeds/run-$target.log" | tail -5; exit 1; }
  "$fuzz_build/fuzz/fuzz_$target" -merge=1 "fuzz/corpus/$target" "$seeds/$target" \
    > "$seeds/merge-$target.log" 2>&1 ||
    { tail -20 "$seeds/merge-$target.log"; exit 1; }
  echo "$target: $(ls "fuzz/corpus/$target" | wc -l) files," \
       "$(du -sk "fuzz/corpus/$target" | cut -f1) KiB"
done
