// RUN: ampc-opt %s -split-input-file --graph-fuse | FileCheck %s
// RUN: ampc-opt %examples/mlp/mlp.mlir --graph-inline-calls --graph-build-training --graph-assign-precision --graph-fuse | FileCheck %s --check-prefix=MLP

// graph-fuse.mlir: one case per grouping rule (elementwise chains, a reduction with its
// producers and consumers, matmul epilogues and a bias that is not one, bias gradients, the
// fused classifier, accumulation and the optimizer), a merge refused because it would close a
// cycle, and the training step of the MLP example after graph-build-training and
// graph-assign-precision.

// Elementwise chains: exp, square, + bias (a row broadcast over the rows) and - a smaller
// value computed outside are one loop over the 32 elements; the exp over the 8-element row is
// its own loop, read broadcast rather than recomputed per element.
// CHECK-LABEL: graph.model @elementwise_chain
// CHECK: func.func @forward() attributes {graph.fusion_schedule = array<i64: {{.*}}>} {
// CHECK: %[[X:.+]] = graph.get_input @x {graph.fusion = #graph.fusion<group = 0, kind = none>}
// CHECK: %[[E:.+]] = graph.exp %[[X]] {graph.fusion = #graph.fusion<group = [[CHAIN:[0-9]+]], kind = elementwise>}
// CHECK-NEXT: %[[S:.+]] = graph.mul %[[E]], %[[E]] {graph.fusion = #graph.fusion<group = [[CHAIN]], kind = {{[a-z_]+}}>}
// CHECK-NEXT: %[[A:.+]] = graph.add %[[S]], %{{.+}} {graph.fusion = #graph.fusion<group = [[CHAIN]], kind = {{[a-z_]+}}>}
// CHECK-NEXT: %[[R:.+]] = graph.exp %{{.+}} {graph.fusion = #graph.fusion<group = [[ROW:[0-9]+]], kind = elementwise>} : tensor<8xf32>
// CHECK-NEXT: %[[C:.+]] = graph.sub %[[A]], %[[R]] {graph.fusion = #graph.fusion<group = [[CHAIN]], kind = {{[a-z_]+}}>}
// CHECK-NEXT: graph.matmul %[[C]], %{{.+}} {graph.fusion = #graph.fusion<group = {{[0-9]+}}, kind = matmul>}
// CHECK-NEXT: graph.mse_loss {{.*}}kind = reduction>
// CHECK-NEXT: graph.loss {{.*}}kind = none>
// CHECK-NEXT: return {graph.fusion = #graph.fusion<group = 9, kind = none>}
graph.model @elementwise_chain {
  graph.input @x : tensor<4x8xf32>
  graph.input @b : tensor<8xf32>
  graph.input @w : tensor<8x8xf32>
  graph.input @y : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %b = graph.get_input @b : tensor<8xf32>
    %w = graph.get_input @w : tensor<8x8xf32>
    %y = graph.get_input @y : tensor<4x8xf32>
    %e = graph.exp %x : tensor<4x8xf32>
    %s = graph.mul %e, %e : tensor<4x8xf32>, tensor<4x8xf32>
    %a = graph.add %s, %b : tensor<4x8xf32>, tensor<8xf32>
    %r = graph.exp %b : tensor<8xf32>
    %c = graph.sub %a, %r : tensor<4x8xf32>, tensor<8xf32>
    %p = graph.matmul %c, %w : tensor<4x8xf32>, tensor<8x8xf32>
    %l = graph.mse_loss %p, %y : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// A reduction with its elementwise producer (the widening of its input) and consumers (the
// narrowing of its result and the residual add): one kernel. The loss takes the cast of the
// matmul's result the same way.
// CHECK-LABEL: graph.model @reduction
// CHECK: func.func @forward() attributes {graph.fusion_schedule = array<i64: {{.*}}>} {
// CHECK: %[[X:.+]] = graph.get_input @x
// CHECK: %[[X32:.+]] = graph.cast %[[X]] {graph.fusion = #graph.fusion<group = [[NORM:[0-9]+]], kind = reduction>}
// CHECK-NEXT: %[[N:.+]] = graph.layernorm %[[X32]], %{{.+}}, %{{.+}} {graph.fusion = #graph.fusion<group = [[NORM]], kind = {{[a-z_]+}}>}
// CHECK-NEXT: %[[N16:.+]] = graph.cast %[[N]] {graph.fusion = #graph.fusion<group = [[NORM]], kind = {{[a-z_]+}}>}
// CHECK-NEXT: %[[R:.+]] = graph.add %[[N16]], %[[X]] {graph.fusion = #graph.fusion<group = [[NORM]], kind = {{[a-z_]+}}>}
// CHECK-NEXT: %[[P:.+]] = graph.matmul %[[R]], %{{.+}} {graph.fusion = #graph.fusion<group = {{[0-9]+}}, kind = matmul>}
// CHECK-NEXT: %[[P32:.+]] = graph.cast %[[P]] {graph.fusion = #graph.fusion<group = [[LOSS:[0-9]+]], kind = reduction>}
// CHECK-NEXT: graph.mse_loss %[[P32]], %{{.+}} {graph.fusion = #graph.fusion<group = [[LOSS]], kind = {{[a-z_]+}}>}
graph.model @reduction {
  graph.param @g : tensor<8xf32> init #graph.ones
  graph.param @beta : tensor<8xf32> init #graph.zeros
  graph.input @x : tensor<4x8xbf16>
  graph.input @w : tensor<8x8xbf16>
  graph.input @y : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xbf16>
    %w = graph.get_input @w : tensor<8x8xbf16>
    %y = graph.get_input @y : tensor<4x8xf32>
    %g = graph.get_param @g : tensor<8xf32>
    %beta = graph.get_param @beta : tensor<8xf32>
    %x32 = graph.cast %x : tensor<4x8xbf16> -> tensor<4x8xf32>
    %n = graph.layernorm %x32, %g, %beta : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>
    %n16 = graph.cast %n : tensor<4x8xf32> -> tensor<4x8xbf16>
    %r = graph.add %n16, %x : tensor<4x8xbf16>, tensor<4x8xbf16>
    %p = graph.matmul %r, %w : tensor<4x8xbf16>, tensor<8x8xbf16>
    %p32 = graph.cast %p : tensor<4x8xbf16> -> tensor<4x8xf32>
    %l = graph.mse_loss %p32, %y : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// A matmul absorbs what cuBLASLt applies to its result: a bias over the last dimension, then a
// tanh gelu. A [4, 1] addend is broadcast over the columns, not a bias: the add stays out (the
// loss takes it as a producer).
// CHECK-LABEL: graph.model @epilogue
// CHECK: func.func @forward() attributes {graph.fusion_schedule = array<i64: {{.*}}>} {
// CHECK: %[[H:.+]] = graph.matmul %{{.+}}, %{{.+}} {graph.fusion = #graph.fusion<group = [[MM:[0-9]+]], kind = matmul_epilogue>}
// CHECK-NEXT: %[[HB:.+]] = graph.add %[[H]], %{{.+}} {graph.fusion = #graph.fusion<group = [[MM]], kind = {{[a-z_]+}}>} : tensor<4x16xf32>, tensor<16xf32>
// CHECK-NEXT: %[[G:.+]] = graph.gelu tanh %[[HB]] {graph.fusion = #graph.fusion<group = [[MM]], kind = {{[a-z_]+}}>}
// CHECK-NEXT: %[[O:.+]] = graph.matmul %[[G]], %{{.+}} {graph.fusion = #graph.fusion<group = {{[0-9]+}}, kind = matmul>}
// CHECK-NEXT: %[[OB:.+]] = graph.add %[[O]], %{{.+}} {graph.fusion = #graph.fusion<group = [[LOSS:[0-9]+]], kind = reduction>} : tensor<4x8xf32>, tensor<4x1xf32>
// CHECK-NEXT: graph.mse_loss %[[OB]], %{{.+}} {graph.fusion = #graph.fusion<group = [[LOSS]], kind = {{[a-z_]+}}>}
graph.model @epilogue {
  graph.input @x : tensor<4x8xf32>
  graph.input @w1 : tensor<8x16xf32>
  graph.input @b1 : tensor<16xf32>
  graph.input @w2 : tensor<16x8xf32>
  graph.input @col : tensor<4x1xf32>
  graph.input @y : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %w1 = graph.get_input @w1 : tensor<8x16xf32>
    %b1 = graph.get_input @b1 : tensor<16xf32>
    %w2 = graph.get_input @w2 : tensor<16x8xf32>
    %col = graph.get_input @col : tensor<4x1xf32>
    %y = graph.get_input @y : tensor<4x8xf32>
    %h = graph.matmul %x, %w1 : tensor<4x8xf32>, tensor<8x16xf32>
    %hb = graph.add %h, %b1 : tensor<4x16xf32>, tensor<16xf32>
    %g = graph.gelu tanh %hb : tensor<4x16xf32>
    %o = graph.matmul %g, %w2 : tensor<4x16xf32>, tensor<16x8xf32>
    %ob = graph.add %o, %col : tensor<4x8xf32>, tensor<4x1xf32>
    %l = graph.mse_loss %ob, %y : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// A tanh gelu's gradient joins the matmul producing its incoming gradient (cuBLASLt's DGELU
// epilogue reads the gelu's input as its aux matrix); the product is never written. An erf
// gelu's gradient, and an f32 one, stay out of their matmuls' groups (the loss takes them as
// producers).
// CHECK-LABEL: graph.model @gelu_grad_epilogue
// CHECK: %[[D:.+]] = graph.matmul %{{.+}}, %{{.+}} transpose_rhs {graph.fusion = #graph.fusion<group = [[MM:[0-9]+]], kind = matmul_epilogue>}
// CHECK-NEXT: %[[DX:.+]] = graph.gelu_grad tanh %{{.+}}, %[[D]] {graph.fusion = #graph.fusion<group = [[MM]], kind = {{[a-z_]+}}>}
// CHECK-NEXT: %[[E:.+]] = graph.matmul %{{.+}}, %{{.+}} transpose_rhs {graph.fusion = #graph.fusion<group = {{[0-9]+}}, kind = matmul>}
// CHECK-NEXT: %[[EX:.+]] = graph.gelu_grad erf %{{.+}}, %[[E]] {graph.fusion = #graph.fusion<group = [[LOSS:[0-9]+]], kind = reduction>}
// CHECK-NEXT: graph.mse_loss %[[DX]], %[[EX]] {graph.fusion = #graph.fusion<group = [[LOSS]], kind = {{[a-z_]+}}>}
// CHECK: %[[F:.+]] = graph.matmul %{{.+}}, %{{.+}} transpose_rhs {graph.fusion = #graph.fusion<group = {{[0-9]+}}, kind = matmul>}
// CHECK-NEXT: graph.gelu_grad tanh %{{.+}}, %[[F]] {graph.fusion = #graph.fusion<group = {{[0-9]+}}, kind = reduction>}
graph.model @gelu_grad_epilogue {
  graph.input @pre : tensor<4x16xbf16>
  graph.input @dy : tensor<4x8xbf16>
  graph.input @w : tensor<16x8xbf16>
  graph.input @pre32 : tensor<4x16xf32>
  graph.input @dy32 : tensor<4x8xf32>
  graph.input @w32 : tensor<16x8xf32>
  func.func @forward() {
    %pre = graph.get_input @pre : tensor<4x16xbf16>
    %dy = graph.get_input @dy : tensor<4x8xbf16>
    %w = graph.get_input @w : tensor<16x8xbf16>
    %d = graph.matmul %dy, %w transpose_rhs : tensor<4x8xbf16>, tensor<16x8xbf16>
    %dx = graph.gelu_grad tanh %pre, %d : tensor<4x16xbf16>
    %e = graph.matmul %dy, %w transpose_rhs : tensor<4x8xbf16>, tensor<16x8xbf16>
    %ex = graph.gelu_grad erf %pre, %e : tensor<4x16xbf16>
    %l = graph.mse_loss %dx, %ex : tensor<4x16xbf16>
    %pre32 = graph.get_input @pre32 : tensor<4x16xf32>
    %dy32 = graph.get_input @dy32 : tensor<4x8xf32>
    %w32 = graph.get_input @w32 : tensor<16x8xf32>
    %f = graph.matmul %dy32, %w32 transpose_rhs : tensor<4x8xf32>, tensor<16x8xf32>
    %fx = graph.gelu_grad tanh %pre32, %f : tensor<4x16xf32>
    %l32 = graph.mse_loss %fx, %pre32 : tensor<4x16xf32>
    %sum = graph.add %l, %l32 : tensor<f32>, tensor<f32>
    graph.loss %sum : tensor<f32>
    return
  }
}

// -----

// A residual: the matmul's biased sum read only by an add of a value of its shape joins the
// matmul (cuBLASLt's C with beta 1: D = x W + b + r); so does a plain product's. After a gelu
// the add stays out.
// CHECK-LABEL: graph.model @residual
// CHECK: %[[H:.+]] = graph.matmul %{{.+}}, %{{.+}} {graph.fusion = #graph.fusion<group = [[MM:[0-9]+]], kind = matmul_epilogue>}
// CHECK-NEXT: %[[HB:.+]] = graph.add %[[H]], %{{.+}} {graph.fusion = #graph.fusion<group = [[MM]], kind = {{[a-z_]+}}>} : tensor<4x16xf32>, tensor<16xf32>
// CHECK-NEXT: %[[R:.+]] = graph.add %{{.+}}, %[[HB]] {graph.fusion = #graph.fusion<group = [[MM]], kind = {{[a-z_]+}}>} : tensor<4x16xf32>, tensor<4x16xf32>
// CHECK-NEXT: %[[P:.+]] = graph.matmul %{{.+}}, %{{.+}} {graph.fusion = #graph.fusion<group = [[MM2:[0-9]+]], kind = matmul_epilogue>}
// CHECK-NEXT: %[[R2:.+]] = graph.add %[[P]], %[[R]] {graph.fusion = #graph.fusion<group = [[MM2]], kind = {{[a-z_]+}}>}
// CHECK-NEXT: %[[G:.+]] = graph.matmul %{{.+}}, %{{.+}} {graph.fusion = #graph.fusion<group = [[MM3:[0-9]+]], kind = matmul_epilogue>}
// CHECK-NEXT: %[[GB:.+]] = graph.add %[[G]], %{{.+}} {graph.fusion = #graph.fusion<group = [[MM3]], kind = {{[a-z_]+}}>}
// CHECK-NEXT: %[[GG:.+]] = graph.gelu tanh %[[GB]] {graph.fusion = #graph.fusion<group = [[MM3]], kind = {{[a-z_]+}}>}
// CHECK-NEXT: %[[R3:.+]] = graph.add %[[GG]], %[[R2]] {graph.fusion = #graph.fusion<group = {{[0-9]+}}, kind = reduction>}
graph.model @residual {
  graph.input @x : tensor<4x8xf32>
  graph.input @w : tensor<8x16xf32>
  graph.input @b : tensor<16xf32>
  graph.input @r : tensor<4x16xf32>
  graph.input @y : tensor<4x16xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %w = graph.get_input @w : tensor<8x16xf32>
    %b = graph.get_input @b : tensor<16xf32>
    %r = graph.get_input @r : tensor<4x16xf32>
    %y = graph.get_input @y : tensor<4x16xf32>
    %h = graph.matmul %x, %w : tensor<4x8xf32>, tensor<8x16xf32>
    %hb = graph.add %h, %b : tensor<4x16xf32>, tensor<16xf32>
    %s = graph.add %r, %hb : tensor<4x16xf32>, tensor<4x16xf32>
    %p = graph.matmul %x, %w : tensor<4x8xf32>, tensor<8x16xf32>
    %s2 = graph.add %p, %s : tensor<4x16xf32>, tensor<4x16xf32>
    %g = graph.matmul %x, %w : tensor<4x8xf32>, tensor<8x16xf32>
    %gb = graph.add %g, %b : tensor<4x16xf32>, tensor<16xf32>
    %gg = graph.gelu tanh %gb : tensor<4x16xf32>
    %s3 = graph.add %gg, %s2 : tensor<4x16xf32>, tensor<4x16xf32>
    %l = graph.mse_loss %s3, %y : tensor<4x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// The bias gradient (dy summed over the rows, in f32) joins the weight-gradient matmul that
// contracts dy over the same rows (cuBLASLt's BGRADB epilogue). The input-gradient matmul
// contracts dy over its columns and stays alone.
// CHECK-LABEL: graph.model @bias_grad
// CHECK: func.func @forward() attributes {graph.fusion_schedule = array<i64: {{.*}}>} {
// CHECK: %[[DY:.+]] = graph.get_input @dy
// CHECK: %[[DY32:.+]] = graph.cast %[[DY]] {graph.fusion = #graph.fusion<group = [[BG:[0-9]+]], kind = bias_grad>}
// CHECK-NEXT: %[[DB:.+]] = graph.sum %[[DY32]] axes [0] {graph.fusion = #graph.fusion<group = [[BG]], kind = {{[a-z_]+}}>}
// CHECK-NEXT: graph.matmul %[[DY]], %{{.+}} transpose_rhs {graph.fusion = #graph.fusion<group = {{[0-9]+}}, kind = matmul>}
// CHECK-NEXT: %[[DW:.+]] = graph.matmul %{{.+}}, %[[DY]] transpose_lhs {graph.fusion = #graph.fusion<group = [[BG]], kind = {{[a-z_]+}}>}
graph.model @bias_grad {
  graph.input @x : tensor<8x4xbf16>
  graph.input @dy : tensor<8x16xbf16>
  graph.input @w : tensor<4x16xbf16>
  graph.input @t : tensor<4x16xf32>
  graph.input @t2 : tensor<16xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<8x4xbf16>
    %dy = graph.get_input @dy : tensor<8x16xbf16>
    %w = graph.get_input @w : tensor<4x16xbf16>
    %t = graph.get_input @t : tensor<4x16xf32>
    %t2 = graph.get_input @t2 : tensor<16xf32>
    %dy32 = graph.cast %dy : tensor<8x16xbf16> -> tensor<8x16xf32>
    %db = graph.sum %dy32 axes [0] : tensor<8x16xf32>
    %dx = graph.matmul %dy, %w transpose_rhs : tensor<8x16xbf16>, tensor<4x16xbf16>
    %dw = graph.matmul %x, %dy transpose_lhs : tensor<8x4xbf16>, tensor<8x16xbf16> -> f32
    %l0 = graph.mse_loss %dw, %t : tensor<4x16xf32>
    %l1 = graph.mse_loss %db, %t2 : tensor<16xf32>
    %l = graph.add %l0, %l1 : tensor<f32>, tensor<f32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// The fused classifier: the widening of the logits, the loss, its gradient and the narrowing of
// the gradient. The loss marker and the seed run no kernel.
// CHECK-LABEL: graph.model @cross_entropy
// CHECK: func.func @forward() attributes {graph.fusion_schedule = array<i64: {{.*}}>} {
// CHECK: %[[LOGITS:.+]] = graph.matmul {{.*}}kind = matmul>
// CHECK-NEXT: %[[L32:.+]] = graph.cast %[[LOGITS]] {graph.fusion = #graph.fusion<group = [[CE:[0-9]+]], kind = cross_entropy>}
// CHECK-NEXT: %[[LOSS:.+]] = graph.cross_entropy %[[L32]], %{{.+}} {graph.fusion = #graph.fusion<group = [[CE]], kind = {{[a-z_]+}}>}
// CHECK-NEXT: graph.loss %[[LOSS]] {graph.fusion = #graph.fusion<group = {{[0-9]+}}, kind = none>}
// CHECK-NEXT: %[[SEED:.+]] = graph.grad_seed accum_steps 1 {graph.fusion = #graph.fusion<group = {{[0-9]+}}, kind = none>}
// CHECK-NEXT: %[[D:.+]] = graph.cross_entropy_grad %[[L32]], %{{.+}}, %[[SEED]] {graph.fusion = #graph.fusion<group = [[CE]], kind = {{[a-z_]+}}>}
// CHECK-NEXT: %[[D16:.+]] = graph.cast %[[D]] {graph.fusion = #graph.fusion<group = [[CE]], kind = {{[a-z_]+}}>}
// CHECK-NEXT: graph.matmul %[[D16]], {{.*}}kind = matmul>
graph.model @cross_entropy {
  graph.input @h : tensor<4x8xbf16>
  graph.input @w : tensor<8x10xbf16>
  graph.input @labels : tensor<4xi32>
  func.func @forward() {
    %h = graph.get_input @h : tensor<4x8xbf16>
    %w = graph.get_input @w : tensor<8x10xbf16>
    %labels = graph.get_input @labels : tensor<4xi32>
    %logits = graph.matmul %h, %w : tensor<4x8xbf16>, tensor<8x10xbf16>
    %logits32 = graph.cast %logits : tensor<4x10xbf16> -> tensor<4x10xf32>
    %l = graph.cross_entropy %logits32, %labels : tensor<4x10xf32>, tensor<4xi32>
    graph.loss %l : tensor<f32>
    %seed = graph.grad_seed accum_steps 1
    %dlogits = graph.cross_entropy_grad %logits32, %labels, %seed : tensor<4x10xf32>, tensor<4xi32>
    %d16 = graph.cast %dlogits : tensor<4x10xf32> -> tensor<4x10xbf16>
    %dh = graph.matmul %d16, %w transpose_rhs : tensor<4x10xbf16>, tensor<8x10xbf16>
    return
  }
}

// -----

// Training steps: each accumulation takes the cast producing its gradient (a bf16 product
// widened: a kernel adds it); every optimizer update of the step is one kernel.
// CHECK-LABEL: graph.model @training_state
// CHECK: func.func @micro_step() attributes {graph.fusion_schedule = array<i64: {{.*}}>} {
// CHECK: %[[DW:.+]] = graph.matmul {{.*}}kind = matmul>
// CHECK-NEXT: %[[DW32:.+]] = graph.cast %[[DW]] {graph.fusion = #graph.fusion<group = [[ACC:[0-9]+]], kind = accumulate>}
// CHECK-NEXT: graph.accumulate_grad %[[DW32]] into @w.grad {graph.fusion = #graph.fusion<group = [[ACC]], kind = {{[a-z_]+}}>}
// CHECK-NEXT: %[[DB32:.+]] = graph.cast %{{.+}} {graph.fusion = #graph.fusion<group = [[ACC2:[0-9]+]], kind = accumulate>}
// CHECK-NEXT: graph.accumulate_grad %[[DB32]] into @b.grad {graph.fusion = #graph.fusion<group = [[ACC2]], kind = {{[a-z_]+}}>}
// CHECK: func.func @optimizer_step() -> (tensor<f32>, tensor<f32>) attributes {graph.fusion_schedule = array<i64: 0, 1, 2, 3>} {
// CHECK-NEXT: graph.global_norm [@w.grad, @b.grad] {graph.fusion = #graph.fusion<group = 0, kind = none>}
// CHECK-NEXT: graph.lr_schedule constant {graph.fusion = #graph.fusion<group = 1, kind = none>
// CHECK-NEXT: graph.adamw @w {{.*}}graph.fusion = #graph.fusion<group = 2, kind = optimizer>
// CHECK-NEXT: graph.adamw @b {{.*}}graph.fusion = #graph.fusion<group = 2, kind = {{[a-z_]+}}>, weight_decay
// CHECK-NEXT: return {graph.fusion = #graph.fusion<group = 3, kind = none>}
graph.model @training_state {
  graph.param @w : tensor<4x4xf32> init #graph.zeros
  graph.param @b : tensor<4xf32> init #graph.zeros
  graph.input @x : tensor<4x4xbf16>
  graph.input @bx : tensor<4xbf16>
  graph.state @w.grad : tensor<4x4xf32>
  graph.state @w.adam_m : tensor<4x4xf32>
  graph.state @w.adam_v : tensor<4x4xf32>
  graph.state @b.grad : tensor<4xf32>
  graph.state @b.adam_m : tensor<4xf32>
  graph.state @b.adam_v : tensor<4xf32>
  func.func @micro_step() {
    %x = graph.get_input @x : tensor<4x4xbf16>
    %bx = graph.get_input @bx : tensor<4xbf16>
    %x32 = graph.cast %x : tensor<4x4xbf16> -> tensor<4x4xf32>
    %l = graph.mse_loss %x32, %x32 : tensor<4x4xf32>
    graph.loss %l : tensor<f32>
    %dw = graph.matmul %x, %x : tensor<4x4xbf16>, tensor<4x4xbf16>
    %dw32 = graph.cast %dw : tensor<4x4xbf16> -> tensor<4x4xf32>
    graph.accumulate_grad %dw32 into @w.grad : tensor<4x4xf32>
    %db32 = graph.cast %bx : tensor<4xbf16> -> tensor<4xf32>
    graph.accumulate_grad %db32 into @b.grad : tensor<4xf32>
    return
  }
  func.func @optimizer_step() -> (tensor<f32>, tensor<f32>) {
    %norm = graph.global_norm [@w.grad, @b.grad]
    %lr = graph.lr_schedule constant {lr = 1.0e-03 : f64}
    graph.adamw @w grad @w.grad moments @w.adam_m, @w.adam_v lr %lr grad_norm %norm
        {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64, clip_norm = 1.0 : f64}
    graph.adamw @b grad @b.grad moments @b.adam_m, @b.adam_v lr %lr grad_norm %norm
        {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_norm = 1.0 : f64}
    return %norm, %lr : tensor<f32>, tensor<f32>
  }
}

// -----

// A weight gradient that is one matmul's f32 product, added unchanged: the matmul accumulates
// into @w.grad itself (cuBLASLt, beta = 1) and the product is never stored. Divided by the loss
// scale (unscale), or read elsewhere, it is added by an accumulate kernel.
// CHECK-LABEL: graph.model @matmul_accumulate
// CHECK: %[[DW:.+]] = graph.matmul {{.*}}{graph.fusion = #graph.fusion<group = [[MA:[0-9]+]], kind = matmul_accumulate>} {{.*}} -> f32
// CHECK-NEXT: graph.accumulate_grad %[[DW]] into @w.grad {graph.fusion = #graph.fusion<group = [[MA]], kind = matmul_accumulate>}
// CHECK-NEXT: %[[DV:.+]] = graph.matmul {{.*}}{graph.fusion = #graph.fusion<group = {{[0-9]+}}, kind = matmul>} {{.*}} -> f32
// CHECK-NEXT: graph.accumulate_grad %[[DV]] into @v.grad unscale @loss_scale {graph.fusion = #graph.fusion<group = {{[0-9]+}}, kind = accumulate>}
// CHECK-NEXT: %[[DU:.+]] = graph.matmul {{.*}}{graph.fusion = #graph.fusion<group = {{[0-9]+}}, kind = matmul>} {{.*}} -> f32
// CHECK-NEXT: graph.accumulate_grad %[[DU]] into @u.grad {graph.fusion = #graph.fusion<group = {{[0-9]+}}, kind = accumulate>}
graph.model @matmul_accumulate {
  graph.param @w : tensor<4x4xf32> init #graph.zeros
  graph.param @v : tensor<4x4xf32> init #graph.zeros
  graph.param @u : tensor<4x4xf32> init #graph.zeros
  graph.input @x : tensor<4x4xbf16>
  graph.state @w.grad : tensor<4x4xf32>
  graph.state @v.grad : tensor<4x4xf32>
  graph.state @u.grad : tensor<4x4xf32>
  graph.loss_scale @loss_scale dynamic {initial_scale = 65536.0 : f64}
  func.func @micro_step() {
    %x = graph.get_input @x : tensor<4x4xbf16>
    %x32 = graph.cast %x : tensor<4x4xbf16> -> tensor<4x4xf32>
    %l = graph.mse_loss %x32, %x32 : tensor<4x4xf32>
    graph.loss %l : tensor<f32>
    %dw = graph.matmul %x, %x transpose_lhs : tensor<4x4xbf16>, tensor<4x4xbf16> -> f32
    graph.accumulate_grad %dw into @w.grad : tensor<4x4xf32>
    %dv = graph.matmul %x, %x transpose_lhs : tensor<4x4xbf16>, tensor<4x4xbf16> -> f32
    graph.accumulate_grad %dv into @v.grad unscale @loss_scale : tensor<4x4xf32>
    %du = graph.matmul %x, %x transpose_lhs : tensor<4x4xbf16>, tensor<4x4xbf16> -> f32
    graph.accumulate_grad %du into @u.grad : tensor<4x4xf32>
    %e = graph.exp %du : tensor<4x4xf32>
    return
  }
}

// -----

// A bias gradient's column sum under loss scaling: its accumulate_grad divides by the scale, which
// the sum's second stage does too, so it joins the sum's group; the weight gradient's does not
// join its matmul (cuBLASLt does not divide by the device's scale) and keeps a kernel.
// CHECK-LABEL: graph.model @unscaled_column_total
// CHECK: %[[DB:.+]] = graph.sum %{{.+}} axes [0] {graph.fusion = #graph.fusion<group = [[BG:[0-9]+]], kind = bias_grad>}
// CHECK-NEXT: graph.accumulate_grad %[[DB]] into @b.grad unscale @loss_scale {graph.fusion = #graph.fusion<group = [[BG]], kind = bias_grad>}
// CHECK-NEXT: %[[DW:.+]] = graph.matmul {{.*}}{graph.fusion = #graph.fusion<group = [[BG]], kind = bias_grad>} {{.*}} -> f32
// CHECK-NEXT: graph.accumulate_grad %[[DW]] into @w.grad unscale @loss_scale {graph.fusion = #graph.fusion<group = {{[0-9]+}}, kind = accumulate>}
graph.model @unscaled_column_total {
  graph.param @w : tensor<4x16xf32> init #graph.zeros
  graph.param @b : tensor<16xf32> init #graph.zeros
  graph.input @x : tensor<8x4xf16>
  graph.input @dy : tensor<8x16xf16>
  graph.state @w.grad : tensor<4x16xf32>
  graph.state @b.grad : tensor<16xf32>
  graph.loss_scale @loss_scale dynamic {initial_scale = 65536.0 : f64}
  func.func @micro_step() {
    %x = graph.get_input @x : tensor<8x4xf16>
    %dy = graph.get_input @dy : tensor<8x16xf16>
    %x32 = graph.cast %x : tensor<8x4xf16> -> tensor<8x4xf32>
    %l = graph.mse_loss %x32, %x32 : tensor<8x4xf32>
    graph.loss %l : tensor<f32>
    %dy32 = graph.cast %dy : tensor<8x16xf16> -> tensor<8x16xf32>
    %db = graph.sum %dy32 axes [0] : tensor<8x16xf32>
    graph.accumulate_grad %db into @b.grad unscale @loss_scale : tensor<16xf32>
    %dw = graph.matmul %x, %dy transpose_lhs : tensor<8x4xf16>, tensor<8x16xf16> -> f32
    graph.accumulate_grad %dw into @w.grad unscale @loss_scale : tensor<4x16xf32>
    return
  }
}

// -----

// No cycle, several outputs: exp and neg are one loop writing both (the matmul reads the exp,
// the mul the neg). The mul reads the matmul too, so fusing it into that loop would make the
// loop run both before and after the matmul: it starts a group of its own.
// CHECK-LABEL: graph.model @no_cycle
// CHECK: %[[A:.+]] = graph.exp %{{.+}} {graph.fusion = #graph.fusion<group = [[LOOP:[0-9]+]], kind = elementwise>}
// CHECK-NEXT: %[[N:.+]] = graph.neg %[[A]] {graph.fusion = #graph.fusion<group = [[LOOP]], kind = {{[a-z_]+}}>}
// CHECK-NEXT: %[[M:.+]] = graph.matmul %[[A]], %{{.+}} {graph.fusion = #graph.fusion<group = {{[0-9]+}}, kind = matmul>}
// CHECK-NEXT: graph.mul %[[N]], %[[M]] {graph.fusion = #graph.fusion<group = {{[0-9]+}}, kind = elementwise>}
graph.model @no_cycle {
  graph.input @x : tensor<4x4xf32>
  graph.input @w : tensor<4x4xf32>
  graph.input @y : tensor<4x4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x4xf32>
    %w = graph.get_input @w : tensor<4x4xf32>
    %y = graph.get_input @y : tensor<4x4xf32>
    %a = graph.exp %x : tensor<4x4xf32>
    %n = graph.neg %a : tensor<4x4xf32>
    %m = graph.matmul %a, %w : tensor<4x4xf32>, tensor<4x4xf32>
    %s = graph.mul %n, %m : tensor<4x4xf32>, tensor<4x4xf32>
    %p = graph.matmul %s, %w : tensor<4x4xf32>, tensor<4x4xf32>
    %l = graph.mse_loss %p, %y : tensor<4x4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// The MLP's bf16 training step. Forward: each linear layer's bias joins its matmul (the relu
// is not a cuBLASLt epilogue here: its input is read by relu_grad); the loss reads the bf16
// logits and its gradient is stored in bf16, both computed in f32 inside the kernel. The
// classifier (group 10) reads the loss gradient, so it runs after grad_seed (group 12): the
// schedule is the numbering except there.
// MLP-LABEL: func.func @micro_step() attributes {graph.fusion_schedule = array<i64: 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 10, 11, 13, 14, 15, 16, 17>} {
// MLP: %[[IMAGES:.+]] = graph.cast %{{.+}} {graph.fusion = #graph.fusion<group = 1, kind = elementwise>{{.*}}} : tensor<64x784xf32> -> tensor<64x784xbf16>
// MLP: %[[H0:.+]] = graph.matmul %[[IMAGES]], %{{.+}} {graph.fusion = #graph.fusion<group = [[FC1:[0-9]+]], kind = matmul_epilogue>
// MLP-NEXT: %[[H1:.+]] = graph.add %[[H0]], %{{.+}} {graph.fusion = #graph.fusion<group = [[FC1]], kind = {{[a-z_]+}}>,
// MLP-NEXT: %[[H:.+]] = graph.relu %[[H1]] {graph.fusion = #graph.fusion<group = {{[0-9]+}}, kind = elementwise>
// MLP-NEXT: %[[L0:.+]] = graph.matmul %[[H]], %{{.+}} {graph.fusion = #graph.fusion<group = [[FC2:[0-9]+]], kind = matmul_epilogue>
// MLP-NEXT: %[[L1:.+]] = graph.add %[[L0]], %{{.+}} {graph.fusion = #graph.fusion<group = [[FC2]], kind = {{[a-z_]+}}>,
// MLP-NEXT: graph.cross_entropy %[[L1]], %{{.+}} {graph.fusion = #graph.fusion<group = [[CE:[0-9]+]], kind = cross_entropy>
// MLP-NEXT: graph.loss
// MLP-NEXT: graph.grad_seed
// MLP-NEXT: %[[D16:.+]] = graph.cross_entropy_grad %[[L1]], {{.*}}{graph.fusion = #graph.fusion<group = [[CE]], kind = {{[a-z_]+}}>,
// MLP-NEXT: %[[D32:.+]] = graph.cast %[[D16]] {graph.fusion = #graph.fusion<group = [[CE]], kind = {{[a-z_]+}}>,
// Backward: each bias gradient joins its weight gradient; the input gradient is a plain matmul.
// Each weight gradient (an f32 product) is added into its accumulator by its own matmul; each
// bias gradient by its column sum's second stage: both accumulate_grads join the group.
// MLP-NEXT: %[[DB2:.+]] = graph.sum %[[D32]] axes [0] {graph.fusion = #graph.fusion<group = [[BG2:[0-9]+]], kind = bias_grad>
// MLP-NEXT: graph.accumulate_grad %[[DB2]] into @fc2.b.grad {graph.fusion = #graph.fusion<group = [[BG2]], kind = bias_grad>}
// MLP-NEXT: %[[DH:.+]] = graph.matmul %[[D16]], %{{.+}} transpose_rhs {graph.fusion = #graph.fusion<group = {{[0-9]+}}, kind = matmul>
// MLP-NEXT: %[[DW2:.+]] = graph.matmul %[[H]], %[[D16]] transpose_lhs {graph.fusion = #graph.fusion<group = [[BG2]], kind = {{[a-z_]+}}>,
// MLP-NEXT: graph.accumulate_grad %[[DW2]] into @fc2.w.grad {graph.fusion = #graph.fusion<group = [[BG2]], kind = bias_grad>}
// MLP-NEXT: %[[DH1:.+]] = graph.relu_grad %[[H1]], %[[DH]] {graph.fusion = #graph.fusion<group = {{[0-9]+}}, kind = elementwise>
// MLP-NEXT: %[[DH32:.+]] = graph.cast %[[DH1]] {graph.fusion = #graph.fusion<group = [[BG1:[0-9]+]], kind = bias_grad>
// MLP-NEXT: %[[DB1:.+]] = graph.sum %[[DH32]] axes [0] {graph.fusion = #graph.fusion<group = [[BG1]], kind = {{[a-z_]+}}>,
// MLP-NEXT: graph.accumulate_grad %[[DB1]] into @fc1.b.grad {graph.fusion = #graph.fusion<group = [[BG1]], kind = bias_grad>}
// MLP-NEXT: %[[DW1:.+]] = graph.matmul %[[IMAGES]], %[[DH1]] transpose_lhs {graph.fusion = #graph.fusion<group = [[BG1]], kind = {{[a-z_]+}}>,
// MLP-NEXT: graph.accumulate_grad %[[DW1]] into @fc1.w.grad {graph.fusion = #graph.fusion<group = [[BG1]], kind = bias_grad>}
// MLP-NEXT: return {graph.fusion = #graph.fusion<group = 17, kind = none>}
// The four AdamW updates are one kernel.
// MLP-LABEL: func.func @optimizer_step() -> (tensor<f32>, tensor<f32>) attributes {graph.fusion_schedule = array<i64: {{.*}}>} {
// MLP: graph.adamw @fc1.w {{.*}}graph.fusion = #graph.fusion<group = 2, kind = optimizer>
// MLP-NEXT: graph.adamw @fc1.b {{.*}}graph.fusion = #graph.fusion<group = 2, kind = {{[a-z_]+}}>, weight_decay
// MLP-NEXT: graph.adamw @fc2.w {{.*}}graph.fusion = #graph.fusion<group = 2, kind = {{[a-z_]+}}>, weight_decay
// MLP-NEXT: graph.adamw @fc2.b {{.*}}graph.fusion = #graph.fusion<group = 2, kind = {{[a-z_]+}}>, weight_decay
// MLP-NEXT: return {graph.fusion = #graph.fusion<group = 3, kind = none>}
