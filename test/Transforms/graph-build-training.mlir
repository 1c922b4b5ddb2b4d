// RUN: ampc-opt %s -split-input-file --graph-inline-calls --graph-build-training | FileCheck %s
// RUN: ampc-opt %s -split-input-file --graph-inline-calls --graph-build-training="accum-steps=4 optimizer=sgd momentum=0.8 weight-decay=0.01 clip-norm=0 schedule=cosine warmup-steps=10 decay-steps=100 min-lr=1.0e-5 lr=0.001" | FileCheck %s --check-prefix=SGD

// graph-build-training.mlir: the structure of the training functions. The default run checks
// the backward pass op by op (which gradient rule fires, which operand each gradient op reads),
// the accumulators and the AdamW step; the SGD run checks that every option reaches the IR.
// Numerical correctness of the rules is checked against finite differences in the unit tests.

// A linear layer with a bias and an MSE loss.
// CHECK-LABEL: graph.model @linear {
// CHECK: graph.input @y : tensor<8x2xf32>
// CHECK-NEXT: graph.state @w.grad : tensor<4x2xf32>
// CHECK-NEXT: graph.state @w.adam_m : tensor<4x2xf32>
// CHECK-NEXT: graph.state @w.adam_v : tensor<4x2xf32>
// CHECK-NEXT: graph.state @b.grad : tensor<2xf32>
// CHECK-NEXT: graph.state @b.adam_m : tensor<2xf32>
// CHECK-NEXT: graph.state @b.adam_v : tensor<2xf32>
// CHECK: func.func @micro_step() {
// CHECK: %[[X:.+]] = graph.get_input @x
// CHECK: %[[Y:.+]] = graph.get_input @y
// CHECK: %[[P0:.+]] = graph.matmul %[[X]], %[[W:.+]] : tensor<8x4xf32>, tensor<4x2xf32>
// CHECK: %[[P:.+]] = graph.add %[[P0]], %[[B:.+]] : tensor<8x2xf32>, tensor<2xf32>
// CHECK: %[[L:.+]] = graph.mse_loss %[[P]], %[[Y]]
// CHECK: graph.loss %[[L]]
// The seed 1 / accum-steps; then dp = seed * 2 / 16 * (p - y).
// CHECK: %[[SEED:.+]] = graph.grad_seed accum_steps 1
// CHECK: %[[TWO_N:.+]] = graph.constant dense<1.250000e-01> : tensor<f32>
// CHECK: %[[C:.+]] = graph.mul %[[SEED]], %[[TWO_N]]
// CHECK: %[[D:.+]] = graph.sub %[[P]], %[[Y]]
// CHECK: %[[DP:.+]] = graph.mul %[[D]], %[[C]] : tensor<8x2xf32>, tensor<f32>
// The bias broadcasts over the batch: its gradient sums the batch axis.
// Each gradient is accumulated as soon as it is complete.
// CHECK: %[[DB:.+]] = graph.sum %[[DP]] axes [0] : tensor<8x2xf32>
// CHECK-NEXT: graph.accumulate_grad %[[DB]] into @b.grad : tensor<2xf32>
// CHECK: %[[DW:.+]] = graph.matmul %[[X]], %[[DP]] transpose_lhs : tensor<8x4xf32>, tensor<8x2xf32>
// CHECK-NEXT: graph.accumulate_grad %[[DW]] into @w.grad : tensor<4x2xf32>
// The data (x, y) gets no gradient.
// CHECK-NOT: graph.neg
// CHECK: return
// CHECK: func.func @optimizer_step() -> (tensor<f32>, tensor<f32>) {
// CHECK-NEXT: %[[NORM:.+]] = graph.global_norm [@w.grad, @b.grad]
// CHECK-NEXT: %[[LR:.+]] = graph.lr_schedule constant {lr = 3.000000e-04 : f64}
// The matrix decays; the bias (rank 1) does not.
// CHECK-NEXT: graph.adamw @w grad @w.grad moments @w.adam_m, @w.adam_v lr %[[LR]] grad_norm %[[NORM]] {beta1 = 9.000000e-01 : f64, beta2 = 0.94999999999999996 : f64, clip_norm = 1.000000e+00 : f64, eps = 1.000000e-08 : f64, weight_decay = 1.000000e-01 : f64}
// CHECK-NEXT: graph.adamw @b grad @b.grad moments @b.adam_m, @b.adam_v lr %[[LR]] grad_norm %[[NORM]] {{{.*}}weight_decay = 0.000000e+00 : f64}
// CHECK-NEXT: return %[[NORM]], %[[LR]] : tensor<f32>, tensor<f32>

// SGD-LABEL: graph.model @linear {
// SGD: graph.state @w.grad : tensor<4x2xf32>
// SGD-NEXT: graph.state @w.momentum : tensor<4x2xf32>
// SGD-NEXT: graph.state @b.grad : tensor<2xf32>
// SGD-NEXT: graph.state @b.momentum : tensor<2xf32>
// SGD: graph.grad_seed accum_steps 4
// SGD: %[[LR:.+]] = graph.lr_schedule cosine {decay_steps = 100 : i64, lr = 1.000000e-03 : f64, min_lr = 1.000000e-05 : f64, warmup_steps = 10 : i64}
// SGD-NEXT: graph.sgd @w grad @w.grad momentum_buffer @w.momentum lr %[[LR]] grad_norm %{{.+}} {clip_norm = 0.000000e+00 : f64, momentum = 8.000000e-01 : f64, weight_decay = 1.000000e-02 : f64}
// SGD-NEXT: graph.sgd @b grad @b.grad momentum_buffer @b.momentum lr %[[LR]] grad_norm %{{.+}} {clip_norm = 0.000000e+00 : f64, momentum = 8.000000e-01 : f64, weight_decay = 0.000000e+00 : f64}
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

// -----

// Weight decay follows the parameter's own flag where it has one.
// CHECK-LABEL: graph.model @decay_overrides {
// CHECK: graph.adamw @w {{.*}}weight_decay = 0.000000e+00 : f64}
// CHECK: graph.adamw @b {{.*}}weight_decay = 1.000000e-01 : f64}
graph.model @decay_overrides {
  graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02> {weight_decay = false}
  graph.param @b : tensor<2xf32> init #graph.zeros {weight_decay = true}
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

// -----

// A tied embedding and output head: one accumulator receives the sum of both gradients. The
// head's gradient folds the batch into the rows (one 2-D matmul, no per-batch reduction); the
// backward dropout reuses the forward's stream, so it applies the same mask; the integer
// tokens and targets get no gradient.
// CHECK-LABEL: graph.model @tied {
// CHECK: graph.state @wte.grad : tensor<16x8xf32>
// CHECK-NOT: graph.state @tokens
// CHECK: func.func @micro_step() {
// CHECK: %[[TOKENS:.+]] = graph.get_input @tokens
// CHECK: %[[X:.+]] = graph.embedding %[[WTE:.+]][%[[TOKENS]]]
// CHECK: %[[XD:.+]] = graph.dropout %[[X]] {p = 1.000000e-01 : f64, stream = 0 : i64}
// CHECK: %[[LOGITS:.+]] = graph.matmul %[[XD]], %[[WTE]] transpose_rhs
// CHECK: %[[SEED:.+]] = graph.grad_seed accum_steps 1
// CHECK: %[[DLOGITS:.+]] = graph.cross_entropy_grad %[[LOGITS]], %{{.+}}, %[[SEED]]
// CHECK: %[[DXD:.+]] = graph.matmul %[[DLOGITS]], %[[WTE]] : tensor<2x4x16xf32>, tensor<16x8xf32>
// CHECK: %[[XROWS:.+]] = graph.reshape %[[XD]] : tensor<2x4x8xf32> -> tensor<8x8xf32>
// CHECK: %[[GROWS:.+]] = graph.reshape %[[DLOGITS]] : tensor<2x4x16xf32> -> tensor<8x16xf32>
// CHECK: %[[DHEAD:.+]] = graph.matmul %[[GROWS]], %[[XROWS]] transpose_lhs : tensor<8x16xf32>, tensor<8x8xf32>
// CHECK: %[[DX:.+]] = graph.dropout %[[DXD]] {p = 1.000000e-01 : f64, stream = 0 : i64}
// CHECK: %[[DTABLE:.+]] = graph.embedding_grad %[[TOKENS]], %[[DX]] : tensor<2x4xi32>, tensor<2x4x8xf32> -> tensor<16x8xf32>
// CHECK: %[[SUM:.+]] = graph.add %[[DHEAD]], %[[DTABLE]]
// CHECK: graph.accumulate_grad %[[SUM]] into @wte.grad
// CHECK-NOT: graph.accumulate_grad
// CHECK: return
graph.model @tied {
  graph.param @wte : tensor<16x8xf32> init #graph.normal<std = 0.02>
  graph.input @tokens : tensor<2x4xi32>
  graph.input @targets : tensor<2x4xi32>
  func.func @forward() {
    %wte = graph.get_param @wte : tensor<16x8xf32>
    %tokens = graph.get_input @tokens : tensor<2x4xi32>
    %targets = graph.get_input @targets : tensor<2x4xi32>
    %x = graph.embedding %wte[%tokens] : tensor<16x8xf32>, tensor<2x4xi32>
    %d = graph.dropout %x {p = 0.1 : f64} : tensor<2x4x8xf32>
    %logits = graph.matmul %d, %wte transpose_rhs : tensor<2x4x8xf32>, tensor<16x8xf32>
    %l = graph.cross_entropy %logits, %targets : tensor<2x4x16xf32>, tensor<2x4xi32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// Every dropout gets its own stream, numbered after any the model file gives; calls are
// inlined first (the RUN lines inline), so a block called twice has two dropouts with two streams.
// CHECK-LABEL: graph.model @dropout_streams {
// CHECK: graph.dropout %{{.+}} {p = 5.000000e-01 : f64, stream = 8 : i64}
// CHECK: graph.dropout %{{.+}} {p = 5.000000e-01 : f64, stream = 9 : i64}
// CHECK: graph.dropout %{{.+}} {p = 5.000000e-01 : f64, stream = 7 : i64}
// CHECK: graph.grad_seed
// CHECK-DAG: graph.dropout %{{.+}} {p = 5.000000e-01 : f64, stream = 7 : i64}
// CHECK-DAG: graph.dropout %{{.+}} {p = 5.000000e-01 : f64, stream = 8 : i64}
// CHECK-DAG: graph.dropout %{{.+}} {p = 5.000000e-01 : f64, stream = 9 : i64}
graph.model @dropout_streams {
  graph.param @w : tensor<4xf32> init #graph.ones
  func.func private @block(%x: tensor<4xf32>) -> tensor<4xf32> {
    %y = graph.dropout %x {p = 0.5 : f64} : tensor<4xf32>
    return %y : tensor<4xf32>
  }
  func.func @forward() {
    %w = graph.get_param @w : tensor<4xf32>
    %a = func.call @block(%w) : (tensor<4xf32>) -> tensor<4xf32>
    %b = func.call @block(%a) : (tensor<4xf32>) -> tensor<4xf32>
    %c = graph.dropout %b {p = 0.5 : f64, stream = 7 : i64} : tensor<4xf32>
    %l = graph.sum %c axes [0] : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// Split: a piece the loss does not use contributes zeros to the concatenated gradient.
// CHECK-LABEL: graph.model @split_unused {
// CHECK: %[[A:.+]]:2 = graph.split %{{.+}} axis 0 sizes [2, 4]
// CHECK: %[[SEED:.+]] = graph.grad_seed
// CHECK: %[[DA:.+]] = graph.broadcast %{{.+}} : tensor<1xf32> -> tensor<4xf32>
// CHECK: %[[ZERO:.+]] = graph.constant dense<0.000000e+00> : tensor<2xf32>
// CHECK: %[[DW:.+]] = graph.concat %[[ZERO]], %[[DA]] axis 0
// CHECK: graph.accumulate_grad %[[DW]] into @w.grad : tensor<6xf32>
graph.model @split_unused {
  graph.param @w : tensor<6xf32> init #graph.ones
  func.func @forward() {
    %w = graph.get_param @w : tensor<6xf32>
    %a, %b = graph.split %w axis 0 sizes [2, 4] : tensor<6xf32>
    %l = graph.sum %b axes [0] : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
