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

#endif // AMPC_PASSES_PASSES_TD
