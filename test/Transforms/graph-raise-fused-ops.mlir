// RUN: ampc-opt %s -split-input-file --graph-raise-fused-ops | FileCheck %s

// graph-raise-fused-ops.mlir: each decomposition the pass recognises becomes its fused op (and
// the pieces disappear); near misses stay as written.

// Causal attention as exporters write it: scores scaled by a multiplication, a -inf mask added,
// softmax, then the product with v.
// CHECK-LABEL: graph.model @causal_attention {
// CHECK: %[[Q:.+]] = graph.get_input @q
// CHECK: %[[K:.+]] = graph.get_input @k
// CHECK: %[[V:.+]] = graph.get_input @v
// CHECK: %[[O:.+]] = graph.attention %[[Q]], %[[K]], %[[V]] causal scale 2.500000e-01 : tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>
// CHECK-NOT: graph.softmax
// CHECK: graph.mse_loss %[[O]], %[[V]]
graph.model @causal_attention {
  graph.input @q : tensor<2x4x16xf32>
  graph.input @k : tensor<2x4x16xf32>
  graph.input @v : tensor<2x4x16xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x4x16xf32>
    %k = graph.get_input @k : tensor<2x4x16xf32>
    %v = graph.get_input @v : tensor<2x4x16xf32>
    %s = graph.matmul %q, %k transpose_rhs : tensor<2x4x16xf32>, tensor<2x4x16xf32>
    %c = graph.constant dense<2.500000e-01> : tensor<f32>
    %t = graph.mul %s, %c : tensor<2x4x4xf32>, tensor<f32>
    %m = graph.constant dense<"0x00000000000080FF000080FF000080FF0000000000000000000080FF000080FF000000000000000000000000000080FF00000000000000000000000000000000"> : tensor<4x4xf32>
    %a = graph.add %t, %m : tensor<2x4x4xf32>, tensor<4x4xf32>
    %p = graph.softmax %a : tensor<2x4x4xf32>
    %o = graph.matmul %p, %v : tensor<2x4x4xf32>, tensor<2x4x16xf32>
    %l = graph.mse_loss %o, %v : tensor<2x4x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// Non-causal attention, k transposed by a transpose op and the scale a division: k is put back
// in [.., S, Dh] order by one transpose.
// CHECK-LABEL: graph.model @divided_attention {
// CHECK: %[[Q:.+]] = graph.get_input @q
// CHECK: %[[KT:.+]] = graph.get_input @kt : tensor<2x16x4xf32>
// CHECK: %[[V:.+]] = graph.get_input @v
// CHECK: %[[K:.+]] = graph.transpose %[[KT]] [0, 2, 1] : tensor<2x16x4xf32>
// CHECK: graph.attention %[[Q]], %[[K]], %[[V]] scale 2.500000e-01 :
graph.model @divided_attention {
  graph.input @q : tensor<2x4x16xf32>
  graph.input @kt : tensor<2x16x4xf32>
  graph.input @v : tensor<2x4x16xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x4x16xf32>
    %kt = graph.get_input @kt : tensor<2x16x4xf32>
    %v = graph.get_input @v : tensor<2x4x16xf32>
    %s = graph.matmul %q, %kt : tensor<2x4x16xf32>, tensor<2x16x4xf32>
    %c = graph.constant dense<4.000000e+00> : tensor<f32>
    %t = graph.div %s, %c : tensor<2x4x4xf32>, tensor<f32>
    %p = graph.softmax %t : tensor<2x4x4xf32>
    %o = graph.matmul %p, %v : tensor<2x4x4xf32>, tensor<2x4x16xf32>
    %l = graph.mse_loss %o, %v : tensor<2x4x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// A mask that is not causal: the softmax and the matmuls stay.
// CHECK-LABEL: graph.model @not_causal {
// CHECK-NOT: graph.attention
// CHECK: graph.add
// CHECK: graph.softmax %{{.+}} : tensor<2x4x4xf32>
graph.model @not_causal {
  graph.input @q : tensor<2x4x16xf32>
  graph.input @v : tensor<2x4x16xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x4x16xf32>
    %v = graph.get_input @v : tensor<2x4x16xf32>
    %s = graph.matmul %q, %q transpose_rhs : tensor<2x4x16xf32>, tensor<2x4x16xf32>
    %m = graph.constant dense<"0x0000000000000000000080FF000080FF000080FF00000000000080FF000080FF000000000000000000000000000080FF00000000000000000000000000000000"> : tensor<4x4xf32>
    %a = graph.add %s, %m : tensor<2x4x4xf32>, tensor<4x4xf32>
    %p = graph.softmax %a : tensor<2x4x4xf32>
    %o = graph.matmul %p, %v : tensor<2x4x4xf32>, tensor<2x4x16xf32>
    %l = graph.mse_loss %o, %v : tensor<2x4x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// The probabilities are read twice: the attention is not raised (that would compute the scores
// twice), but the causal softmax is.
// CHECK-LABEL: graph.model @probabilities_reused {
// CHECK-NOT: graph.attention
// CHECK: graph.softmax %{{.+}} causal : tensor<2x4x4xf32>
graph.model @probabilities_reused {
  graph.input @q : tensor<2x4x4xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x4x4xf32>
    %s = graph.matmul %q, %q transpose_rhs : tensor<2x4x4xf32>, tensor<2x4x4xf32>
    %m = graph.constant dense<"0x00000000000080FF000080FF000080FF0000000000000000000080FF000080FF000000000000000000000000000080FF00000000000000000000000000000000"> : tensor<4x4xf32>
    %a = graph.add %m, %s : tensor<4x4xf32>, tensor<2x4x4xf32>
    %p = graph.softmax %a : tensor<2x4x4xf32>
    %o = graph.matmul %p, %q : tensor<2x4x4xf32>, tensor<2x4x4xf32>
    %r = graph.add %o, %p : tensor<2x4x4xf32>, tensor<2x4x4xf32>
    %l = graph.mse_loss %r, %q : tensor<2x4x4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// RMSNorm as LLaMA writes it: x * rsqrt(mean(x^2) + eps) * weight, the rsqrt exported as
// 1 / sqrt.
// CHECK-LABEL: graph.model @rmsnorm {
// CHECK: %[[G:.+]] = graph.get_param @g
// CHECK: %[[X:.+]] = graph.get_input @x
// CHECK: %[[Y:.+]] = graph.rmsnorm %[[X]], %[[G]] {epsilon = 9.99999{{[0-9]+}}E-7 : f64} : tensor<2x8xf32>, tensor<8xf32>
// CHECK-NOT: graph.sqrt
// CHECK: graph.mse_loss %[[Y]], %[[X]]
graph.model @rmsnorm {
  graph.param @g : tensor<8xf32> init #graph.ones
  graph.input @x : tensor<2x8xf32>
  func.func @forward() {
    %g = graph.get_param @g : tensor<8xf32>
    %x = graph.get_input @x : tensor<2x8xf32>
    %sq = graph.mul %x, %x : tensor<2x8xf32>, tensor<2x8xf32>
    %ms = graph.mean %sq axes [1] keepdims : tensor<2x8xf32>
    %eps = graph.constant dense<9.99999997E-7> : tensor<f32>
    %v = graph.add %ms, %eps : tensor<2x1xf32>, tensor<f32>
    %s = graph.sqrt %v : tensor<2x1xf32>
    %one = graph.constant dense<1.000000e+00> : tensor<f32>
    %r = graph.div %one, %s : tensor<f32>, tensor<2x1xf32>
    %n = graph.mul %x, %r : tensor<2x8xf32>, tensor<2x1xf32>
    %y = graph.mul %n, %g : tensor<2x8xf32>, tensor<8xf32>
    %l = graph.mse_loss %y, %x : tensor<2x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// A mean over the first axis is not RMSNorm: only 1 / sqrt becomes rsqrt.
// CHECK-LABEL: graph.model @not_rmsnorm {
// CHECK-NOT: graph.rmsnorm
// CHECK: graph.rsqrt
graph.model @not_rmsnorm {
  graph.input @x : tensor<8x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<8x8xf32>
    %sq = graph.mul %x, %x : tensor<8x8xf32>, tensor<8x8xf32>
    %ms = graph.mean %sq axes [0] keepdims : tensor<8x8xf32>
    %s = graph.sqrt %ms : tensor<1x8xf32>
    %one = graph.constant dense<1.000000e+00> : tensor<f32>
    %r = graph.div %one, %s : tensor<f32>, tensor<1x8xf32>
    %n = graph.mul %x, %r : tensor<8x8xf32>, tensor<1x8xf32>
    %l = graph.mse_loss %n, %x : tensor<8x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// Layer norm as opsets before 17 export it.
// CHECK-LABEL: graph.model @layernorm {
// CHECK: %[[G:.+]] = graph.get_param @g
// CHECK: %[[B:.+]] = graph.get_param @b
// CHECK: %[[X:.+]] = graph.get_input @x
// CHECK: %[[Y:.+]] = graph.layernorm %[[X]], %[[G]], %[[B]] {epsilon = 9.99999{{[0-9]+}}E-6 : f64}
// CHECK-NOT: graph.mean
// CHECK: graph.mse_loss %[[Y]], %[[X]]
graph.model @layernorm {
  graph.param @g : tensor<8xf32> init #graph.ones
  graph.param @b : tensor<8xf32> init #graph.zeros
  graph.input @x : tensor<2x8xf32>
  func.func @forward() {
    %g = graph.get_param @g : tensor<8xf32>
    %b = graph.get_param @b : tensor<8xf32>
    %x = graph.get_input @x : tensor<2x8xf32>
    %m = graph.mean %x axes [1] keepdims : tensor<2x8xf32>
    %d = graph.sub %x, %m : tensor<2x8xf32>, tensor<2x1xf32>
    %sq = graph.mul %d, %d : tensor<2x8xf32>, tensor<2x8xf32>
    %var = graph.mean %sq axes [1] keepdims : tensor<2x8xf32>
    %eps = graph.constant dense<9.99999974E-6> : tensor<f32>
    %ve = graph.add %var, %eps : tensor<2x1xf32>, tensor<f32>
    %s = graph.sqrt %ve : tensor<2x1xf32>
    %n = graph.div %d, %s : tensor<2x8xf32>, tensor<2x1xf32>
    %gn = graph.mul %n, %g : tensor<2x8xf32>, tensor<8xf32>
    %y = graph.add %gn, %b : tensor<2x8xf32>, tensor<8xf32>
    %l = graph.mse_loss %y, %x : tensor<2x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// GELU's tanh form in torch's export order: x * x * x * 0.044715, (x + that) * sqrt(2 / pi),
// tanh, 1 + tanh, (x * 0.5) * (1 + tanh).
// CHECK-LABEL: graph.model @gelu_tanh {
// CHECK: %[[X:.+]] = graph.get_input @x
// CHECK: %[[Y:.+]] = graph.gelu tanh %[[X]] : tensor<4x8xf32>
// CHECK-NOT: graph.tanh
// CHECK: graph.mse_loss %[[Y]], %[[X]]
graph.model @gelu_tanh {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %x2 = graph.mul %x, %x : tensor<4x8xf32>, tensor<4x8xf32>
    %x3 = graph.mul %x, %x2 : tensor<4x8xf32>, tensor<4x8xf32>
    %kappa = graph.constant dense<4.471500e-02> : tensor<f32>
    %kx3 = graph.mul %kappa, %x3 : tensor<f32>, tensor<4x8xf32>
    %inner = graph.add %x, %kx3 : tensor<4x8xf32>, tensor<4x8xf32>
    %beta = graph.constant dense<0.797884583> : tensor<f32>
    %scaled = graph.mul %beta, %inner : tensor<f32>, tensor<4x8xf32>
    %t = graph.tanh %scaled : tensor<4x8xf32>
    %one = graph.constant dense<1.000000e+00> : tensor<f32>
    %u = graph.add %one, %t : tensor<f32>, tensor<4x8xf32>
    %half = graph.constant dense<5.000000e-01> : tensor<f32>
    %hx = graph.mul %x, %half : tensor<4x8xf32>, tensor<f32>
    %y = graph.mul %hx, %u : tensor<4x8xf32>, tensor<4x8xf32>
    %l = graph.mse_loss %y, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// A matmul of a transposed weight reads the weight with transpose_rhs.
// CHECK-LABEL: graph.model @transposed_weight {
// CHECK: %[[W:.+]] = graph.get_param @w
// CHECK: %[[X:.+]] = graph.get_input @x
// CHECK-NOT: graph.transpose
// CHECK: graph.matmul %[[X]], %[[W]] transpose_rhs : tensor<2x8xf32>, tensor<4x8xf32>
graph.model @transposed_weight {
  graph.param @w : tensor<4x8xf32> init #graph.normal<std = 0.02>
  graph.input @x : tensor<2x8xf32>
  graph.input @y : tensor<2x4xf32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<4x8xf32>
    %x = graph.get_input @x : tensor<2x8xf32>
    %y = graph.get_input @y : tensor<2x4xf32>
    %wt = graph.transpose %w [1, 0] : tensor<4x8xf32>
    %p = graph.matmul %x, %wt : tensor<2x8xf32>, tensor<8x4xf32>
    %l = graph.mse_loss %p, %y : tensor<2x4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// Cross-entropy of flattened rows (logits.view(-1, V), targets.view(-1)) reads the logits and
// labels as they are.
// CHECK-LABEL: graph.model @flattened_cross_entropy {
// CHECK: %[[X:.+]] = graph.get_input @x
// CHECK: %[[T:.+]] = graph.get_input @t
// CHECK-NOT: graph.reshape
// CHECK: graph.cross_entropy %[[X]], %[[T]] {ignore_index = 0 : i64, reduction = 1 : i32} : tensor<2x4x8xf32>, tensor<2x4xi64>
graph.model @flattened_cross_entropy {
  graph.input @x : tensor<2x4x8xf32>
  graph.input @t : tensor<2x4xi64>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x8xf32>
    %t = graph.get_input @t : tensor<2x4xi64>
    %rows = graph.reshape %x : tensor<2x4x8xf32> -> tensor<8x8xf32>
    %labels = graph.reshape %t : tensor<2x4xi64> -> tensor<8xi64>
    %l = graph.cross_entropy %rows, %labels {ignore_index = 0 : i64, reduction = 1 : i32} : tensor<8x8xf32>, tensor<8xi64>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// RMSNorm written with a division by the root mean square, the gain first.
// CHECK-LABEL: graph.model @rmsnorm_divided {
// CHECK: %[[G:.+]] = graph.get_param @g
// CHECK: %[[X:.+]] = graph.get_input @x
// CHECK: graph.rmsnorm %[[X]], %[[G]] {epsilon = 9.99999{{[0-9]+}}E-6 : f64} : tensor<2x8xf32>, tensor<8xf32>
// CHECK-NOT: graph.div
graph.model @rmsnorm_divided {
  graph.param @g : tensor<8xf32> init #graph.ones
  graph.input @x : tensor<2x8xf32>
  func.func @forward() {
    %g = graph.get_param @g : tensor<8xf32>
    %x = graph.get_input @x : tensor<2x8xf32>
    %sq = graph.mul %x, %x : tensor<2x8xf32>, tensor<2x8xf32>
    %ms = graph.mean %sq axes [1] keepdims : tensor<2x8xf32>
    %eps = graph.constant dense<9.99999974E-6> : tensor<f32>
    %v = graph.add %eps, %ms : tensor<f32>, tensor<2x1xf32>
    %s = graph.sqrt %v : tensor<2x1xf32>
    %n = graph.div %x, %s : tensor<2x8xf32>, tensor<2x1xf32>
    %y = graph.mul %g, %n : tensor<8xf32>, tensor<2x8xf32>
    %l = graph.mse_loss %y, %x : tensor<2x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// A masked fill with a finite fill (masked_fill(mask, -1e9)) imports as s * keep + fill: its
// masked probabilities underflow to 0, so it is the causal softmax.
// CHECK-LABEL: graph.model @finite_fill {
// CHECK: %[[S:.+]] = graph.get_input @s
// CHECK: graph.softmax %[[S]] causal : tensor<2x4x4xf32>
// CHECK-NOT: graph.mul
graph.model @finite_fill {
  graph.input @s : tensor<2x4x4xf32>
  func.func @forward() {
    %s = graph.get_input @s : tensor<2x4x4xf32>
    %keep = graph.constant dense<"0x0000803F0000000000000000000000000000803F0000803F00000000000000000000803F0000803F0000803F000000000000803F0000803F0000803F0000803F"> : tensor<4x4xf32>
    %fill = graph.constant dense<"0x00000000286B6ECE286B6ECE286B6ECE0000000000000000286B6ECE286B6ECE000000000000000000000000286B6ECE00000000000000000000000000000000"> : tensor<4x4xf32>
    %kept = graph.mul %s, %keep : tensor<2x4x4xf32>, tensor<4x4xf32>
    %filled = graph.add %kept, %fill : tensor<2x4x4xf32>, tensor<4x4xf32>
    %p = graph.softmax %filled : tensor<2x4x4xf32>
    %l = graph.mse_loss %p, %s : tensor<2x4x4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
