//===- Passes.td - graph dialect passes ---------------------*- tablegen -*-===//
//
// Every pass of the ampc pipeline, one def per pass, each with a summary and a description that
// shows the IR before and after. Flags carry the `graph-` prefix.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_PASSES_PASSES_TD
#define AMPC_PASSES_PASSES_TD

include "mlir/Pass/PassBase.td"

def GraphInlineCalls : Pass<"graph-inline-calls", "::ampc::graph::ModelOp"> {
  let summary = "Inline every call into the entry function and drop unused functions";
  let description = [{
    Models write a transformer block once and call it per layer. The later stages (plan
    emission, autodiff, precision assignment) work on one flat entry function: this pass clones
    each callee's body at its call sites, repeating until no call is left, and then erases the functions
    nothing calls any more. Source locations of the inlined ops are kept, wrapped in a
    `callsite` location that names the call.

    Before:
    ```mlir
    graph.model @m {
      graph.param @w : tensor<4x4xf32> init #graph.normal<std = 0.02>
      graph.input @x : tensor<2x4xf32>
      func.func private @layer(%x: tensor<2x4xf32>, %w: tensor<4x4xf32>) -> tensor<2x4xf32> {
        %y = graph.matmul %x, %w : tensor<2x4xf32>, tensor<4x4xf32>
        return %y : tensor<2x4xf32>
      }
      func.func @forward() {
        %w = graph.get_param @w : tensor<4x4xf32>
        %x = graph.get_input @x : tensor<2x4xf32>
        %h = func.call @layer(%x, %w) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
        %l = graph.mse_loss %h, %x : tensor<2x4xf32>
        graph.loss %l : tensor<f32>
        return
      }
    }
    ```
    After:
    ```mlir
    graph.model @m {
      graph.param @w : tensor<4x4xf32> init #graph.normal<mean = 0.0, std = 0.02>
      graph.input @x : tensor<2x4xf32>
      func.func @forward() {
        %w = graph.get_param @w : tensor<4x4xf32>
        %x = graph.get_input @x : tensor<2x4xf32>
        %h = graph.matmul %x, %w : tensor<2x4xf32>, tensor<4x4xf32>
        %l = graph.mse_loss %h, %x : tensor<2x4xf32>
        graph.loss %l : tensor<f32>
        return
      }
    }
    ```
  }];
  let dependentDialects = ["::mlir::func::FuncDialect"];
}

def GraphRaiseFusedOps : Pass<"graph-raise-fused-ops", "::ampc::graph::ModelOp"> {
  let summary = "Recognise decomposed norms, GELU and attention and replace them by the fused ops";
  let description = [{
    Models imported from ONNX (`ampc import`) spell out what the graph dialect has as one op:
    exporters decompose layer norms before opset 17, RMSNorm and GELU's tanh form always, and
    attention into matmul, scale, mask and softmax. The fused ops compute in f32 under the
    precision policy, are differentiated by hand-written rules, and run as one kernel (attention
    without materialising its scores), so this pass, run right after graph-inline-calls by the
    training pipeline and by forward plans, puts them back. Each pattern matches only its exact decomposition (the
    constants checked to 1e-6, every intermediate used once); anything else stays as written:

    - `matmul(x, transpose(w) [.., 1, 0])` -> `matmul x, w transpose_rhs` (also for lhs);
    - `1 / sqrt(y)` -> `rsqrt(y)`;
    - `x * rsqrt(mean(x * x, last, keepdims) + eps) * g` (or `x / sqrt(...) * g`) ->
      `rmsnorm x, g {epsilon = eps}`;
    - `(x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) * g + b` (last axis) -> `layernorm`;
    - `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))` in its usual orders -> `gelu tanh`;
    - `softmax(s + m)` with a constant causal mask m (0 on and below the diagonal, -inf or a
      number below -1e30 above it) -> `softmax causal s`; also `softmax(s * keep + fill)`, a
      masked fill with a finite fill below -1e4 (whose masked probabilities underflow to 0);
    - `matmul(softmax(matmul(q, k^T) * c), v)`, causal or not, scale c by `mul` or `div` ->
      `attention q, k, v` with scale c;
    - `cross_entropy` of logits and labels whose leading dimensions were flattened (as
      `logits.view(-1, V)` exports) -> `cross_entropy` of the unflattened ones.

    Before (one head, causal, scale 0.25):
    ```mlir
    %s = graph.matmul %q, %k transpose_rhs : tensor<2x8x16xf32>, tensor<2x8x16xf32>
    %c = graph.constant dense<2.500000e-01> : tensor<f32>
    %t = graph.mul %s, %c : tensor<2x8x8xf32>, tensor<f32>
    %m = graph.constant dense<[[0.0, 0xFF800000, ...], ...]> : tensor<8x8xf32>
    %a = graph.add %t, %m : tensor<2x8x8xf32>, tensor<8x8xf32>
    %p = graph.softmax %a : tensor<2x8x8xf32>
    %o = graph.matmul %p, %v : tensor<2x8x8xf32>, tensor<2x8x16xf32>
    ```
    After:
    ```mlir
    %o = graph.attention %q, %k, %v causal scale 2.500000e-01
        : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
    ```
  }];
}

def GraphPackQkvAttention : Pass<"graph-pack-qkv-attention", "::ampc::graph::ModelOp"> {
  let summary = "Let attention read q, k, v from the packed projection and write token-major";
  let description = [{
    A transformer block projects q, k and v with one matmul, [..., T, 3 H Dh], and feeds
    `graph.attention` head-major slices: split, reshape to [..., T, H, Dh], transpose to
    [..., H, T, Dh]; the result goes back by transpose and reshape to [..., T, H Dh]. Each
    transpose is a copy kernel and a stored tensor on a device, forward and backward. This pass,
    run after graph-raise-fused-ops and before graph-build-training, replaces the whole pattern
    by one `graph.qkv_attention` of the projection: the kernels read q, k and v in place and
    write the token-major result, and autodiff's `graph.qkv_attention_grad` writes dq, dk and
    dv side by side into the projection's gradient (no concatenation). The values are the same
    bit for bit. A match needs a split of the last axis into three equal parts used in order
    as q, k and v, each reshaped and transposed as above with one H and Dh (and possibly
    reshaped to [B H, T, Dh], the heads merged into the batch as exports of bmm-based attention
    have it), none of them read by anything else; a result read other than by transpose +
    reshape is rebuilt for that reader. Models that project q, k and v separately (LLaMA-style,
    rotary embeddings between) keep graph.attention.

    Before:
    ```mlir
    %q0, %k0, %v0 = graph.split %qkv axis 2 sizes [64, 64, 64] : tensor<2x8x192xbf16>
    %q1 = graph.reshape %q0 : tensor<2x8x64xbf16> -> tensor<2x8x4x16xbf16>
    %q = graph.transpose %q1 [0, 2, 1, 3] : tensor<2x8x4x16xbf16>
    // ... %k, %v alike
    %o = graph.attention %q, %k, %v causal
        : tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>
    %o1 = graph.transpose %o [0, 2, 1, 3] : tensor<2x4x8x16xbf16>
    %y = graph.reshape %o1 : tensor<2x8x4x16xbf16> -> tensor<2x8x64xbf16>
    ```
    After:
    ```mlir
    %y = graph.qkv_attention %qkv heads 4 causal : tensor<2x8x192xbf16>
    ```
  }];
}

def GraphBuildTraining : Pass<"graph-build-training", "::ampc::graph::ModelOp"> {
  let summary = "Derive the backward pass and the optimizer step (reverse-mode autodiff)";
  let description = [{
    Turns a model (a flat entry function computing a scalar loss; run --graph-inline-calls
    first) into the two functions a training binary runs:

    - `micro_step`: the forward ops, then the gradient of the loss with respect to every
      parameter, seeded by `graph.grad_seed` (1 / accum-steps, the place where a loss scale
      enters), each parameter's gradient added into its f32 accumulator `@<param>.grad` with
      `graph.accumulate_grad`. A parameter read several times (a tied embedding and head) gets
      the sum of its gradients; integer inputs and data get none; a parameter the loss does not
      depend on gets a warning and is left out of training. Every dropout gets its own random
      stream and its backward reuses the forward's mask.
    - `optimizer_step`: the global gradient norm over all accumulators, the learning rate of the
      step (`graph.lr_schedule`), then one `graph.adamw` (or `graph.sgd`) per parameter, which
      clips by the global norm, updates the f32 master weight and its moments, and zeroes the
      accumulator. It returns the gradient norm and the learning rate.

    Biases and norm gains (rank < 2) are not decayed unless the parameter says
    `{weight_decay = true}`; `{weight_decay = false}` exempts a matrix.

    Before:
    ```mlir
    graph.model @m {
      graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02>
      graph.input @x : tensor<8x4xf32>
      graph.input @y : tensor<8x2xf32>
      func.func @forward() {
        %w = graph.get_param @w : tensor<4x2xf32>
        %x = graph.get_input @x : tensor<8x4xf32>
        %y = graph.get_input @y : tensor<8x2xf32>
        %p = graph.matmul %x, %w : tensor<8x4xf32>, tensor<4x2xf32>
        %l = graph.mse_loss %p, %y : tensor<8x2xf32>
        graph.loss %l : tensor<f32>
        return
      }
    }
    ```
    After (`--graph-build-training="accum-steps=2"`, shortened):
    ```mlir
    graph.model @m {
      graph.param @w : tensor<4x2xf32> init #graph.normal<mean = 0.0, std = 0.02>
      graph.input @x : tensor<8x4xf32>
      graph.input @y : tensor<8x2xf32>
      graph.state @w.grad : tensor<4x2xf32>
      graph.state @w.adam_m : tensor<4x2xf32>
      graph.state @w.adam_v : tensor<4x2xf32>
      func.func @micro_step() {
        ... forward as before ...
        graph.loss %l : tensor<f32>
        %seed = graph.grad_seed accum_steps 2
        %d = graph.sub %p, %y : tensor<8x2xf32>, tensor<8x2xf32>
        ... %dp = 2 (p - y) / 16 * seed ...
        %dw = graph.matmul %x, %dp transpose_lhs : tensor<8x4xf32>, tensor<8x2xf32>
        graph.accumulate_grad %dw into @w.grad : tensor<4x2xf32>
        return
      }
      func.func @optimizer_step() -> (tensor<f32>, tensor<f32>) {
        %norm = graph.global_norm [@w.grad]
        %lr = graph.lr_schedule constant {lr = 3.0e-04 : f64, ...}
        graph.adamw @w grad @w.grad moments @w.adam_m, @w.adam_v lr %lr grad_norm %norm
            {beta1 = 0.9 : f64, beta2 = 0.95 : f64, clip_norm = 1.0 : f64, eps = 1.0e-08 : f64,
             weight_decay = 0.1 : f64}
        return %norm, %lr : tensor<f32>, tensor<f32>
      }
    }
    ```
  }];
  let options = [
    Option<"accumSteps", "accum-steps", "int64_t", "1",
           "micro-batches per optimizer step (the loss of each is divided by this)">,
    Option<"optimizer", "optimizer", "std::string", "\"adamw\"", "adamw or sgd">,
    Option<"lr", "lr", "double", "3.0e-4", "peak learning rate">,
    Option<"beta1", "beta1", "double", "0.9", "AdamW first-moment decay">,
    Option<"beta2", "beta2", "double", "0.95", "AdamW second-moment decay">,
    Option<"eps", "eps", "double", "1.0e-8", "AdamW denominator epsilon">,
    Option<"weightDecay", "weight-decay", "double", "0.1",
           "decoupled weight decay (AdamW) or L2 penalty (SGD) of the decayed parameters">,
    Option<"momentum", "momentum", "double", "0.9", "SGD momentum">,
    Option<"clipNorm", "clip-norm", "double", "1.0",
           "clip the global gradient norm to this value (0 disables clipping)">,
    Option<"schedule", "schedule", "std::string", "\"constant\"",
           "learning-rate schedule: constant or cosine (both with linear warmup)">,
    Option<"warmupSteps", "warmup-steps", "int64_t", "0", "linear warmup steps">,
    Option<"decaySteps", "decay-steps", "int64_t", "0",
           "cosine: the step at which the rate reaches min-lr (0: the run's --steps)">,
    Option<"minLr", "min-lr", "double", "-1.0",
           "cosine: the final learning rate (default lr / 10)">
  ];
  let dependentDialects = ["::mlir::func::FuncDialect"];
}

def GraphChunkClassifier : Pass<"graph-chunk-classifier", "::ampc::graph::ModelOp"> {
  let summary = "Compute the output head, its loss and their gradients in chunks of rows";
  let description = [{
    Runs after graph-build-training. A language model's output head (a matmul of the hidden
    states with the vocabulary, often the tied embedding) feeds cross-entropy, and the step keeps
    its logits, rows x vocabulary, whole until the backward pass: for GPT-124M at 16 x 1024
    tokens 16384 x 50304 values, the largest value of the step. When the logits would exceed
    `chunk-bytes` (counted in f32), the matmul, the loss, the loss gradient and the matmul's
    gradients are done for k equal chunks of rows in turn, each chunk's logits dropped before the
    next chunk's exist: the step's peak falls by about (k - 1) / k of the logits. The loss is the
    mean of the chunks' means (the seed of each chunk's gradient scaled by 1 / k), the hidden
    states' gradient the concatenation of the chunks', the weight's gradient their sum. A mean
    loss is rewritten only when no row can be ignored (its labels are a model input, which the
    runtime checks against the class count, and its ignore_index is not a class); otherwise, or
    when the derived backward has another shape, a remark says why the logits stay whole.

    Before (`chunk-bytes=256`: the logits are 8 rows x 16 classes x 4 bytes = 512 bytes):
    ```mlir
    %0 = graph.matmul %h, %w transpose_rhs : tensor<2x4x8xf32>, tensor<16x8xf32>
    %1 = graph.cross_entropy %0, %t : tensor<2x4x16xf32>, tensor<2x4xi32>
    graph.loss %1 : tensor<f32>
    %2 = graph.grad_seed accum_steps 1
    %3 = graph.cross_entropy_grad %0, %t, %2 : tensor<2x4x16xf32>, tensor<2x4xi32>
    %4 = graph.reshape %h : tensor<2x4x8xf32> -> tensor<8x8xf32>
    %5 = graph.reshape %3 : tensor<2x4x16xf32> -> tensor<8x16xf32>
    %6 = graph.matmul %5, %4 transpose_lhs : tensor<8x16xf32>, tensor<8x8xf32>
    graph.accumulate_grad %6 into @w.grad : tensor<16x8xf32>
    ```
    After (two chunks of 4 rows):
    ```mlir
    %0 = graph.grad_seed accum_steps 1
    %1 = graph.reshape %h : tensor<2x4x8xf32> -> tensor<8x8xf32>
    %2 = graph.reshape %t : tensor<2x4xi32> -> tensor<8xi32>
    %s = graph.mul %0, %half : tensor<f32>
    %h0 = graph.slice %1 starts [0, 0] sizes [4, 8] : tensor<8x8xf32>
    %t0 = graph.slice %2 starts [0] sizes [4] : tensor<8xi32>
    %l0 = graph.matmul %h0, %w transpose_rhs : tensor<4x8xf32>, tensor<16x8xf32>
    %c0 = graph.cross_entropy %l0, %t0 : tensor<4x16xf32>, tensor<4xi32>
    %g0 = graph.cross_entropy_grad %l0, %t0, %s : tensor<4x16xf32>, tensor<4xi32>
    %dw0 = graph.matmul %g0, %h0 transpose_lhs : tensor<4x16xf32>, tensor<4x8xf32>
    ... the same for rows 4-7 (%c1, %dw1) ...
    %c = graph.add %c0, %c1 : tensor<f32>, tensor<f32>
    %dw = graph.add %dw0, %dw1 : tensor<16x8xf32>, tensor<16x8xf32>
    %loss = graph.mul %c, %half : tensor<f32>, tensor<f32>
    graph.loss %loss : tensor<f32>
    graph.accumulate_grad %dw into @w.grad : tensor<16x8xf32>
    ```
  }];
  let options = [
    Option<"chunkBytes", "chunk-bytes", "std::string", "\"256MiB\"",
           "logits larger than this (in f32) are computed in chunks of rows: bytes, 256MiB or 1GB; 0 keeps them whole">
  ];
}

def GraphAssignPrecision : Pass<"graph-assign-precision", "::ampc::graph::ModelOp"> {
  let summary = "Choose the compute, accumulate and storage dtype of every op and place casts";
  let description = [{
    Applies the precision policy (passes/PrecisionPolicy.h) to the model's entry function (the
    micro step after graph-build-training). In `bf16` or `fp16` mode (R below):

    - `reduced` ops (matmul, attention and its gradient, the embedding gather) read their float
      operands in R and accumulate in f32; their results are stored in R.
    - `fp32` ops (softmax, layernorm, rmsnorm, cross_entropy, mse_loss, exp, log, sqrt, rsqrt,
      sum, mean, max and their gradients) read f32 and compute in f32; their results are stored
      in R like every activation, except the losses, the embedding gradient and what the policy
      lists as store_fp32.
    - Some `fp32` ops read an operand that is already in R as it is, widening each element as
      they load it (bf16/f16 -> f32 is exact, so they compute the same f32 values), and write
      their first result in R, the type it is stored in: cross_entropy and its gradient (the
      logits), layernorm and rmsnorm (x) and their gradients (x and dy). So no f32 copy of the
      logits, or of the residual stream the norms read, is stored for the backward pass. Not
      where the policy stores that result in f32, and not for `{keep_fp32}` ops.
    - `follow` ops (elementwise and data movement) run in the type of their inputs; when the
      inputs differ, in the one that converts the fewest elements.
    - Parameter gradients (what graph.accumulate_grad reads) and scalars stay f32, as do master
      weights, accumulators and optimizer state. A parameter read in R gets a
      `graph.param_copy`, refreshed by the optimizer update, so it is converted once per
      optimizer step instead of once per micro step.
    - `{keep_fp32}` on an op of the model file keeps it (and its gradient ops) in f32.

    Casts are placed only where a value's type must change; a cast that undoes an exact widening
    is removed, a chain through an exact widening becomes one cast, a value cast to the same type
    twice is cast once, and a cast of a constant becomes a constant. Every governed op gets a
    `precision` attribute naming its dtypes and the rule. `fp32` mode changes nothing but the
    attributes.

    Before (a micro step fragment):
    ```mlir
    %h = graph.layernorm %x, %g, %b : tensor<4x64xf32>, tensor<64xf32>, tensor<64xf32>
    %y = graph.matmul %h, %w : tensor<4x64xf32>, tensor<64x64xf32>
    ```
    After (`mode=bf16`):
    ```mlir
    graph.param_copy @w.bf16 : tensor<64x64xbf16> of @w
    ...
    %h = graph.layernorm %x, %g, %b {graph.precision = #graph.precision<compute = f32,
        accumulate = f32, storage = bf16, rule = "fp32">} : tensor<4x64xf32>, ...
    %h16 = graph.cast %h {graph.precision = #graph.precision<compute = f32, accumulate = f32,
        storage = bf16, rule = "cast">} : tensor<4x64xf32> -> tensor<4x64xbf16>
    %y = graph.matmul %h16, %w.bf16 {graph.precision = #graph.precision<compute = bf16,
        accumulate = f32, storage = bf16, rule = "reduced">} : tensor<4x64xbf16>, tensor<64x64xbf16>
    ```
  }];
  let options = [
    Option<"mode", "mode", "std::string", "\"bf16\"", "bf16, fp16 or fp32">,
    Option<"policyFile", "policy", "std::string", "\"\"",
           "a policy file: lines 'reduced|fp32|follow|store_fp32: kind, kind'">,
    Option<"reducedOps", "reduced-ops", "std::string", "\"\"",
           "op kinds (comma-separated) to run in the reduced type">,
    Option<"fp32Ops", "fp32-ops", "std::string", "\"\"", "op kinds to run in f32">,
    Option<"followOps", "follow-ops", "std::string", "\"\"",
           "op kinds to run in the type of their inputs">,
    Option<"storeFp32Ops", "store-fp32-ops", "std::string", "\"\"",
           "op kinds whose results are stored in f32">
  ];
  let dependentDialects = ["::mlir::func::FuncDialect"];
}

def GraphInsertLossScaling : Pass<"graph-insert-loss-scaling", "::ampc::graph::ModelOp"> {
  let summary = "Scale the loss before the backward pass and unscale while accumulating";
  let description = [{
    Runs after graph-build-training (and graph-assign-precision). Adds a `graph.loss_scale`
    scaler; the micro step's `graph.grad_seed` is multiplied by the current scale, every
    `graph.accumulate_grad` divides by it while adding into the f32 accumulator and raises the
    scaler's non-finite flag on inf/NaN (one pass over the data, no host synchronisation); the
    optimizer updates skip themselves when the flag is up (the accumulators are still zeroed,
    and clipping sees unscaled gradients); `graph.update_loss_scale` ends the optimizer step
    with GradScaler's rule (x0.5 on overflow, x2 after growth-interval finite steps), never
    going below min-scale.

    `mode=auto` (the default) means `dynamic` for a model in fp16 and `none` otherwise;
    `static` keeps `initial-scale`. `debug-nonfinite` makes the runtime name the first op whose
    result became non-finite.

    Before:
    ```mlir
    %seed = graph.grad_seed accum_steps 1
    ...
    graph.accumulate_grad %dw into @w.grad : tensor<4x2xf16>
    ...
    graph.adamw @w grad @w.grad moments @w.adam_m, @w.adam_v lr %lr grad_norm %norm {...}
    return %norm, %lr : tensor<f32>, tensor<f32>
    ```
    After (`mode=dynamic`):
    ```mlir
    graph.loss_scale @loss_scale dynamic {initial_scale = 65536.0 : f64, ...}
    ...
    %scale = graph.get_loss_scale @loss_scale
    %seed = graph.grad_seed scale %scale accum_steps 1
    ...
    graph.accumulate_grad %dw into @w.grad unscale @loss_scale : tensor<4x2xf16>
    ...
    graph.adamw @w grad @w.grad moments @w.adam_m, @w.adam_v lr %lr grad_norm %norm
        skip_nonfinite @loss_scale {...}
    graph.update_loss_scale @loss_scale
    return %norm, %lr : tensor<f32>, tensor<f32>
    ```
  }];
  let options = [
    Option<"mode", "mode", "std::string", "\"auto\"", "auto, dynamic, static or none">,
    Option<"initialScale", "initial-scale", "double", "65536.0",
           "the first scale (dynamic) or the scale (static)">,
    Option<"growthFactor", "growth-factor", "double", "2.0", "dynamic: growth factor">,
    Option<"backoffFactor", "backoff-factor", "double", "0.5", "dynamic: backoff factor">,
    Option<"growthInterval", "growth-interval", "int64_t", "2000",
           "dynamic: finite steps before the scale grows">,
    Option<"minScale", "min-scale", "double", "1.0",
           "dynamic: the floor of the scale (a warning when reached; 0: none)">,
    Option<"debugNonfinite", "debug-nonfinite", "bool", "false",
           "name the first op whose result became non-finite">
  ];
  let dependentDialects = ["::mlir::func::FuncDialect"];
}

def GraphFuse : Pass<"graph-fuse", "::ampc::graph::ModelOp"> {
  let summary = "Group the ops of the training step into kernels";
  let description = [{
    Decides which ops of the entry function (`micro_step` after graph-build-training) and of
    `optimizer_step` run as one kernel. The grouping is plain C++ over the op graph
    (passes/FusionGrouping.h); its rules, in order:

    - `cross_entropy`: cross_entropy and cross_entropy_grad of the same logits, with the cast
      producing the logits and the casts of the gradient (the fused classifier);
    - `matmul_epilogue`: a matmul read only by a bias add (a 1-D bias over the last dimension),
      then optionally a tanh gelu (cuBLASLt's BIAS / GELU_AUX_BIAS epilogues) or, without a
      gelu, a residual add of a value of the result's shape read as cuBLASLt's C (beta 1; also
      after a plain product whose only reader it is); or a matmul read
      only by a bf16/f16 tanh gelu_grad as its incoming gradient (cuBLASLt's DGELU, the gelu's input
      read as the aux matrix: an MLP's backward never stores dh);
    - `bias_grad`: a sum over the rows of a value a 2-D matmul contracts over its rows (the bias
      gradient of a weight-gradient matmul: cuBLASLt's BGRADA / BGRADB);
    - `matmul_accumulate`: an accumulate_grad adding, unchanged (no `unscale`), the f32 result
      of a matmul that nothing else reads: the matmul adds its product into the accumulator
      itself (cuBLASLt with C = D = the accumulator, beta = 1), so the gradient is never stored
      and no kernel adds it; a `bias_grad` group takes its matmul's accumulate_grad the same way;
    - `accumulate`: any other accumulate_grad, with the elementwise ops producing its gradient;
    - `optimizer`: every optimizer update of the step, as one kernel;
    - `reduction`: a reduction-like op (norms, softmax, losses, sum/mean/max, embedding and their
      gradients) with its elementwise producers that nothing else reads and its elementwise
      consumers; then an `accumulate` group adding a column sum's f32 result, unchanged or
      divided by the loss scale (a sum over leading axes in a `bias_grad` or `reduction` group,
      a norm gradient's dgamma or dbeta), that nothing else reads joins the sum's group: its
      second stage adds each column's total (unscaled, raising the scaler's non-finite flag)
      into the accumulator, and the gradient is never stored;
    - `elementwise`: chains of elementwise ops over the same number of elements (smaller
      operands are read broadcast), with the broadcasts only they read;
    - `copy`: chains of data movement (transpose, split, concat, slice, pad) through reshapes;
    - a reshape read by one kernel joins it; otherwise it is a `view` (no kernel); matmuls and
      attention not covered above are `matmul` and `attention`; ops without a kernel
      (get_param, constant, loss, grad_seed, global_norm, lr_schedule, return, ...) are `none`.

    A value read outside its group is written out (a group may have several outputs), and a
    merge that would let a path leave a group and come back (through other groups, or through
    the order of reads and writes of the training state) is refused, so every group can run as
    one kernel. Every op gets `graph.fusion = #graph.fusion<group = N, kind = K>` (groups
    numbered by their first op in program order) and each function `graph.fusion_schedule`, the
    order the groups run in on the device (a group may have to run before a group numbered
    lower, e.g. the loss kernel after the gradient seed).
    Grouping changes no type, value or op order: it only says what runs together.

    Before:
    ```mlir
    %h = graph.matmul %x, %w : tensor<4x8xbf16>, tensor<8x8xbf16>
    %b = graph.add %h, %bias : tensor<4x8xbf16>, tensor<8xbf16>
    %g = graph.gelu tanh %b : tensor<4x8xbf16>
    ```
    After:
    ```mlir
    %h = graph.matmul %x, %w {graph.fusion = #graph.fusion<group = 3, kind = matmul_epilogue>}
    %b = graph.add %h, %bias {graph.fusion = #graph.fusion<group = 3, kind = matmul_epilogue>}
    %g = graph.gelu tanh %b {graph.fusion = #graph.fusion<group = 3, kind = matmul_epilogue>}
    ```
    A weight gradient, before:
    ```mlir
    %dw = graph.matmul %x, %dy transpose_lhs : tensor<64x384xbf16>, tensor<64x1536xbf16> -> f32
    graph.accumulate_grad %dw into @w.grad : tensor<384x1536xf32>
    ```
    After:
    ```mlir
    %dw = graph.matmul %x, %dy transpose_lhs
        {graph.fusion = #graph.fusion<group = 41, kind = matmul_accumulate>} ... -> f32
    graph.accumulate_grad %dw into @w.grad
        {graph.fusion = #graph.fusion<group = 41, kind = matmul_accumulate>} : tensor<384x1536xf32>
    ```
  }];
}

def GraphPlanMemory : Pass<"graph-plan-memory", "::ampc::graph::ModelOp"> {
  let summary = "Place every intermediate value of the training step in one arena per function";
  let description = [{
    The one placement of the training step's intermediate values: the device program
    allocates exactly this arena and puts each value at its offset, and `ampc report memory`
    prints it. Runs on `micro_step` and `optimizer_step` (the entry function of a forward-only
    model). After graph-fuse, positions are the fused groups in their scheduled order
    (`graph.fusion_schedule`) and a value is stored only when it leaves its kernel (an op of
    another group, the loss op or the terminator reads it); before fusion, positions are the
    ops and every result is stored. A value lives from its position to the last position that
    reads it, one the function returns or marks as the loss to the end. The planner
    (passes/MemoryPlanner.h, plain C++) gives each value an offset, 256-byte aligned, so values
    whose lifetimes overlap never overlap in memory. Parameters, their copies, inputs,
    constants and the training state live outside the arenas. A reshape of an arena value is a
    view: it gets its source's offset, and its readers keep the source alive; cross_entropy_grad
    takes its logits' offset when nothing reads them later.

    Every op that computes gets `graph.arena_offsets` (one per result, -1 for a result never
    stored) and each function `graph.arena = #graph.arena<bytes, peak_live_bytes, alignment>`
    (the peak is the sum of the values live at the busiest position: a lower bound on any arena).

    Before:
    ```mlir
    %a = graph.exp %x : tensor<64xf32>
    %b = graph.exp %a : tensor<64xf32>
    %c = graph.exp %b : tensor<64xf32>
    ```
    After (not fused: every result stored):
    ```mlir
    %a = graph.exp %x {graph.arena_offsets = array<i64: 0>} : tensor<64xf32>
    %b = graph.exp %a {graph.arena_offsets = array<i64: 256>} : tensor<64xf32>
    %c = graph.exp %b {graph.arena_offsets = array<i64: 0>} : tensor<64xf32>
    ```
    After graph-fuse put all three in one elementwise kernel, only `%c` (read by the next
    kernel) is stored: `%a` and `%b` get `array<i64: -1>`.
  }];
  let options = [
    Option<"alignment", "alignment", "int64_t", "256", "offset alignment in bytes">
  ];
}

def GraphSaveAttentionLse : Pass<"graph-save-attention-lse", "::ampc::graph::ModelOp"> {
  let summary = "Keep each attention's output and row log-sum-exp for its gradient";
  let description = [{
    Runs after graph-build-training (and graph-assign-precision, graph-insert-loss-scaling).
    The gradient of attention needs P = softmax(scale q k^T) and rowsum(dy * o): a flash kernel
    gets both from the forward's output o and its f32 row log-sum-exp lse (B x H x T values,
    4 bytes each) instead of computing the forward again. For every `graph.attention_grad` of
    the micro step without saved values whose q, k, v, `causal` and `scale` are those of a
    `graph.attention` of the step, the forward gets `with_lse` (a second result, lse) and the
    gradient reads `saved(o, lse)`. Both are then ordinary values of the step: the memory
    planner keeps them until the gradient, and remat may recompute the forward (the clone
    provides both) or keep them. The gradients are the same; only the work changes.

    Before:
    ```mlir
    %o = graph.attention %q, %k, %v causal : tensor<2x4x8x16xbf16>, ...
    ...
    %dq, %dk, %dv = graph.attention_grad %q, %k, %v, %dy causal
        : tensor<2x4x8x16xbf16>, ..., tensor<2x4x8x16xbf16>
    ```
    After:
    ```mlir
    %o, %lse = graph.attention %q, %k, %v causal with_lse : tensor<2x4x8x16xbf16>, ...
    ...
    %dq, %dk, %dv = graph.attention_grad %q, %k, %v, %dy causal
        saved(%o, %lse : tensor<2x4x8x16xbf16>, tensor<2x4x8xf32>)
        : tensor<2x4x8x16xbf16>, ..., tensor<2x4x8x16xbf16>
    ```
  }];
}

def GraphPlanRemat : Pass<"graph-plan-remat", "::ampc::graph::ModelOp"> {
  let summary = "Recompute forward values in the backward pass so the training step fits a memory budget";
  let description = [{
    Reads `micro_step` in its emitted order (forward up to `graph.grad_seed`, then backward) as
    a rematerialization problem (passes/RematAdapter.h) and plans it with passes/RematPlanner.h,
    plain C++ on Boost.Graph: min cuts over a sweep of the recompute/memory trade-off, segment
    thinning, searches that move one position of every repeated block (transformer layer) at
    once, and the Pareto frontier of (peak, extra FLOPs). The simulated peak counts the
    persistent buffers (parameters, their copies, gradient accumulators, optimizer state,
    inputs, constants), the `workspace`, and every value live at each op of the schedule that
    is emitted, clones included; the optimizer step's own values are a floor. The chosen plan
    is the cheapest whose peak, and whose best-fit arena, is within `budget`; a smaller budget
    never gives a larger peak. Matmuls and attention are recomputed only when no cheaper plan
    meets the budget. Dropout is recomputed exactly: a clone keeps its random stream.

    A budget no plan meets is an error naming the smallest budget the planner can meet and the
    values that dominate it. Without `budget` the pass does nothing. `budget` takes bytes or
    units (`6GiB`, `512MiB`, `1.5GB`) or a percentage of the peak without remat (`75%`).

    Clones are inserted just before their first reader in the backward pass and marked
    `recomputed`; the backward ops read them. `micro_step` records the outcome as the typed
    attribute `graph.remat = #graph.remat<budget_bytes, peak_bytes, no_remat_peak_bytes,
    live_bytes, extra_flops, step_flops, persistent_bytes>` (bytes of the whole step, persistent
    buffers included, except `live_bytes`, the micro step's own values at its busiest op, and
    `persistent_bytes`, what lives outside the arenas; the dialect verifies it). The plan is
    chosen on the step in program order; graph-plan-memory, which places the fused step's
    arenas, checks that they keep the step within the budget. `ampc report memory --memory-budget` decides its budgets through the same
    entry point (RematAdapter.h: analyzeRemat, decideRemat).

    Before (`budget` below the peak with %1 kept):
    ```mlir
    %1 = graph.tanh %0 : tensor<64xf32>
    %2 = graph.tanh %1 : tensor<64xf32>
    ...
    %5 = graph.grad_seed accum_steps 1
    ...
    %18 = graph.mul %1, %1 : tensor<64xf32>, tensor<64xf32>
    ```
    After:
    ```mlir
    %1 = graph.tanh %0 : tensor<64xf32>
    %2 = graph.tanh %1 : tensor<64xf32>
    ...
    %5 = graph.grad_seed accum_steps 1
    ...
    %18 = graph.tanh %0 {graph.recomputed} : tensor<64xf32>
    %19 = graph.mul %18, %18 : tensor<64xf32>, tensor<64xf32>
    ```
  }];
  let options = [
    Option<"budget", "budget", "std::string", "\"\"",
           "memory budget of the whole step: bytes, 6GiB/512MiB/1.5GB, or 75% of the no-remat peak">,
    Option<"workspace", "workspace", "std::string", "\"32MiB\"",
           "bytes of the cuBLASLt matmul workspace, counted as persistent">,
    Option<"alignment", "alignment", "int64_t", "256", "arena offset alignment in bytes">
  ];
}

#endif // AMPC_PASSES_PASSES_TD
