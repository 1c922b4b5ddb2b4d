// RUN: ampc-opt %s --graph-build-training --graph-assign-precision="mode=fp16" --graph-insert-loss-scaling | FileCheck %s
// RUN: ampc-opt %s --graph-build-training --graph-assign-precision="mode=fp16" --graph-insert-loss-scaling="mode=static initial-scale=1024" | FileCheck %s --check-prefix=STATIC
// RUN: ampc-opt %s --graph-build-training --graph-assign-precision="mode=fp16" --graph-insert-loss-scaling="growth-interval=100 min-scale=4 debug-nonfinite=true" | FileCheck %s --check-prefix=OPTIONS
// RUN: ampc-opt %s --graph-build-training --graph-assign-precision --graph-insert-loss-scaling | FileCheck %s --check-prefix=BF16
// RUN: ampc-opt %s --graph-build-training --graph-insert-loss-scaling="mode=dynamic" | FileCheck %s --check-prefix=FP32-DYNAMIC
// RUN: not ampc-opt %s --graph-insert-loss-scaling="mode=dynamic" 2>&1 | FileCheck %s --check-prefix=NOT-TRAINING
// RUN: not ampc-opt %s --graph-build-training --graph-insert-loss-scaling="mode=always" 2>&1 | FileCheck %s --check-prefix=BAD-MODE
// RUN: not ampc-opt %s --graph-build-training --graph-insert-loss-scaling="mode=dynamic backoff-factor=1.5" 2>&1 | FileCheck %s --check-prefix=BAD-BACKOFF
// RUN: not ampc-opt %s --graph-build-training --graph-insert-loss-scaling="mode=dynamic" --graph-insert-loss-scaling="mode=dynamic" 2>&1 | FileCheck %s --check-prefix=TWICE

// graph-insert-loss-scaling.mlir: the scaler, the scaled backward seed, unscaling in the
// accumulation, skipped updates and the scale update; auto mode (dynamic for fp16 only); the
// options; the errors.

// CHECK-LABEL: graph.model @linear attributes {graph.precision_mode = "fp16"} {
// The defaults are GradScaler's (initial 2^16, x2 every 2000 finite steps, x0.5 on overflow;
// the printer leaves default values out) plus a floor of 1.
// CHECK: graph.loss_scale @loss_scale dynamic {min_scale = 1.000000e+00 : f64}
// CHECK: func.func @micro_step() {
// CHECK: graph.loss
// CHECK-NEXT: %[[SCALE:.+]] = graph.get_loss_scale @loss_scale
// CHECK-NEXT: %{{.+}} = graph.grad_seed scale %[[SCALE]] accum_steps 1
// CHECK: graph.accumulate_grad %{{.+}} into @w.grad unscale @loss_scale : tensor<4x2xf32>
// CHECK: func.func @optimizer_step()
// CHECK: graph.adamw @w grad @w.grad moments @w.adam_m, @w.adam_v lr %{{.+}} grad_norm %{{.+}} copy @w.f16 skip_nonfinite @loss_scale
// CHECK-NEXT: graph.update_loss_scale @loss_scale
// CHECK-NEXT: return

// STATIC: graph.loss_scale @loss_scale static {initial_scale = 1.024000e+03 : f64}
// STATIC: graph.grad_seed scale
// STATIC: graph.update_loss_scale @loss_scale

// OPTIONS: graph.model @linear attributes {graph.debug_nonfinite, graph.precision_mode = "fp16"}
// OPTIONS: graph.loss_scale @loss_scale dynamic {growth_interval = 100 : i64, min_scale = 4.000000e+00 : f64}

// bf16 needs no scaling: auto leaves the model unchanged.
// BF16: graph.model @linear attributes {graph.precision_mode = "bf16"}
// BF16-NOT: loss_scale
// BF16: graph.grad_seed accum_steps 1

// Scaling an fp32 model is allowed when asked for.
// FP32-DYNAMIC: graph.loss_scale @loss_scale dynamic
// FP32-DYNAMIC: graph.accumulate_grad %{{.+}} into @w.grad unscale @loss_scale : tensor<4x2xf32>

// NOT-TRAINING: error: loss scaling needs the training step: run --graph-build-training first
// BAD-MODE: error: graph-insert-loss-scaling: invalid mode 'always': the modes are auto, dynamic, static and none
// BAD-BACKOFF: error: 'graph.loss_scale' op backoff_factor must be in (0, 1), got 1.5
// TWICE: error: already has a loss scaler; graph-insert-loss-scaling runs once
graph.model @linear {
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
