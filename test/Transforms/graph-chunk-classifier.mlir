// RUN: ampc-opt %s --split-input-file --graph-build-training --graph-chunk-classifier=chunk-bytes=256 | FileCheck %s
// RUN: ampc-opt %s --split-input-file --graph-build-training --graph-chunk-classifier=chunk-bytes=128 | FileCheck %s --check-prefix=FOUR
// RUN: ampc-opt %s --split-input-file --graph-build-training --graph-chunk-classifier | FileCheck %s --check-prefix=WHOLE
// RUN: ampc-opt %s --split-input-file --graph-build-training --graph-chunk-classifier=chunk-bytes=256 -verify-diagnostics -o /dev/null
// RUN: not ampc-opt %s --split-input-file --graph-build-training --graph-chunk-classifier=chunk-bytes=lots 2>&1 | FileCheck %s --check-prefix=BAD

// graph-chunk-classifier: the output head and its loss computed in chunks of rows once the
// logits exceed chunk-bytes (in f32). The logits here are 8 rows x 16 classes x 4 = 512 bytes:
// 256 bytes makes two chunks of 4 rows, 128 four of 2, the default (256MiB) keeps them whole.

// A tied output head (the embedding table read twice): the seed moves first, each chunk's loss,
// logits gradient, hidden-state gradient and weight gradient are computed together, the weight's
// part is accumulated by the chunk itself and the embedding's gradient goes on alone.
// CHECK-LABEL: graph.model @tied
// CHECK:      %[[SEED:.*]] = graph.grad_seed accum_steps 1
// CHECK:      %[[H:.*]] = graph.reshape %{{.*}} : tensor<2x4x8xf32> -> tensor<8x8xf32>
// CHECK:      %[[T:.*]] = graph.reshape %targets : tensor<2x4xi32> -> tensor<8xi32>
// CHECK:      %[[HALF:.*]] = graph.constant dense<5.000000e-01> : tensor<f32>
// CHECK:      %[[S:.*]] = graph.mul %[[SEED]], %[[HALF]]
// CHECK:      %[[H0:.*]] = graph.slice %[[H]] starts [0, 0] sizes [4, 8]
// CHECK:      %[[T0:.*]] = graph.slice %[[T]] starts [0] sizes [4]
// CHECK:      %[[L0:.*]] = graph.matmul %[[H0]], %wte transpose_rhs : tensor<4x8xf32>, tensor<16x8xf32>
// CHECK:      %[[C0:.*]] = graph.cross_entropy %[[L0]], %[[T0]] : tensor<4x16xf32>, tensor<4xi32>
// CHECK:      %[[G0:.*]] = graph.cross_entropy_grad %[[L0]], %[[T0]], %[[S]]
// CHECK:      %[[DH0:.*]] = graph.matmul %[[G0]], %wte : tensor<4x16xf32>, tensor<16x8xf32>
// CHECK:      %[[DW0:.*]] = graph.matmul %[[G0]], %[[H0]] transpose_lhs
// CHECK:      graph.accumulate_grad %[[DW0]] into @wte.grad
// CHECK:      %[[H1:.*]] = graph.slice %[[H]] starts [4, 0] sizes [4, 8]
// CHECK:      %[[L1:.*]] = graph.matmul %[[H1]], %wte transpose_rhs
// CHECK:      %[[C1:.*]] = graph.cross_entropy %[[L1]]
// CHECK:      %[[SUM:.*]] = graph.add %[[C0]], %[[C1]]
// CHECK:      %[[DH1:.*]] = graph.matmul %{{.*}}, %wte : tensor<4x16xf32>, tensor<16x8xf32>
// CHECK:      graph.accumulate_grad %{{.*}} into @wte.grad
// CHECK:      %[[LOSS:.*]] = graph.mul %[[SUM]], %{{.*}} : tensor<f32>, tensor<f32>
// CHECK:      %[[DH:.*]] = graph.concat %[[DH0]], %[[DH1]] axis 0
// CHECK:      %[[DHR:.*]] = graph.reshape %[[DH]] : tensor<8x8xf32> -> tensor<2x4x8xf32>
// CHECK:      graph.loss %[[LOSS]]
// CHECK:      graph.mul %[[DHR]],
// CHECK:      %[[EMB:.*]] = graph.embedding_grad
// CHECK-NEXT: graph.accumulate_grad %[[EMB]] into @wte.grad
// CHECK-NOT:  graph.cross_entropy
// CHECK:      return
// FOUR-LABEL: graph.model @tied
// FOUR-COUNT-4: graph.cross_entropy_grad %{{.*}} : tensor<2x16xf32>, tensor<2xi32>
// FOUR:       graph.constant dense<2.500000e-01>
// WHOLE-LABEL: graph.model @tied
// WHOLE:      graph.matmul %{{.*}}, %wte transpose_rhs : tensor<2x4x8xf32>, tensor<16x8xf32>
// WHOLE-NOT:  graph.slice
graph.model @tied {
  graph.param @wte : tensor<16x8xf32> init #graph.normal<std = 0.02>
  graph.input @tokens : tensor<2x4xi32>
  graph.input @targets : tensor<2x4xi32>
  func.func @forward() {
    %wte = graph.get_param @wte : tensor<16x8xf32>
    %tokens = graph.get_input @tokens : tensor<2x4xi32>
    %targets = graph.get_input @targets : tensor<2x4xi32>
    %x = graph.embedding %wte[%tokens] : tensor<16x8xf32>, tensor<2x4xi32>
    %h = graph.tanh %x : tensor<2x4x8xf32>
    %logits = graph.matmul %h, %wte transpose_rhs : tensor<2x4x8xf32>, tensor<16x8xf32>
    %loss = graph.cross_entropy %logits, %targets : tensor<2x4x16xf32>, tensor<2x4xi32>
    graph.loss %loss : tensor<f32>
    return
  }
}

// -----

// A sum loss over labels the model computes: no row can change the sum's denominator, so it is
// chunked; the seed is not scaled and the loss is the plain sum. The head is [d, V] (not
// transposed): the hidden states' gradient multiplies by its transpose. The input gets no
// gradient, so no chunk computes one.
// CHECK-LABEL: graph.model @sum
// CHECK:      %[[SEED:.*]] = graph.grad_seed accum_steps 1
// CHECK-NOT:  graph.mul
// CHECK:      %[[L0:.*]] = graph.matmul %{{.*}}, %w : tensor<4x8xf32>, tensor<8x16xf32>
// CHECK:      graph.cross_entropy %[[L0]], %{{.*}} {reduction = 1 : i32}
// CHECK:      graph.cross_entropy_grad %[[L0]], %{{.*}}, %[[SEED]] {reduction = 1 : i32}
// CHECK:      %[[DW0:.*]] = graph.matmul %{{.*}}, %{{.*}} transpose_lhs : tensor<4x8xf32>, tensor<4x16xf32>
// CHECK-NEXT: graph.accumulate_grad %[[DW0]] into @w.grad
// CHECK-NOT:  graph.concat
// CHECK-NOT:  graph.mul
// CHECK:      graph.loss
graph.model @sum {
  graph.param @w : tensor<8x16xf32> init #graph.normal<std = 0.02>
  graph.input @x : tensor<8x8xf32>
  graph.input @t : tensor<8xi32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<8x16xf32>
    %x = graph.get_input @x : tensor<8x8xf32>
    %t = graph.get_input @t : tensor<8xi32>
    %logits = graph.matmul %x, %w : tensor<8x8xf32>, tensor<8x16xf32>
    %loss = graph.cross_entropy %logits, %t {reduction = 1 : i32} : tensor<8x16xf32>, tensor<8xi32>
    graph.loss %loss : tensor<f32>
    return
  }
}

// -----

// A mean loss whose ignore_index is a class: an ignored row would change the denominator, so
// the logits stay whole and a remark says why.
// CHECK-LABEL: graph.model @ignored
// CHECK:      graph.matmul %{{.*}}, %w : tensor<8x8xf32>, tensor<8x16xf32>
// CHECK-NOT:  graph.slice
graph.model @ignored {
  graph.param @w : tensor<8x16xf32> init #graph.normal<std = 0.02>
  graph.input @x : tensor<8x8xf32>
  graph.input @t : tensor<8xi32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<8x16xf32>
    %x = graph.get_input @x : tensor<8x8xf32>
    %t = graph.get_input @t : tensor<8xi32>
    %logits = graph.matmul %x, %w : tensor<8x8xf32>, tensor<8x16xf32>
    // expected-remark @below {{graph-chunk-classifier: the logits stay whole: a mean loss whose labels may hold ignore_index (they are not a model input, or ignore_index is a class)}}
    %loss = graph.cross_entropy %logits, %t {ignore_index = 0 : i64} : tensor<8x16xf32>, tensor<8xi32>
    graph.loss %loss : tensor<f32>
    return
  }
}

// -----

// Logits read by something besides the loss (here a second loss term): they stay whole.
// CHECK-LABEL: graph.model @shared
// CHECK-NOT:  graph.slice
graph.model @shared {
  graph.param @w : tensor<8x16xf32> init #graph.normal<std = 0.02>
  graph.input @x : tensor<8x8xf32>
  graph.input @t : tensor<8xi32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<8x16xf32>
    %x = graph.get_input @x : tensor<8x8xf32>
    %t = graph.get_input @t : tensor<8xi32>
    %logits = graph.matmul %x, %w : tensor<8x8xf32>, tensor<8x16xf32>
    // expected-remark @below {{graph-chunk-classifier: the logits stay whole: the logits are read by more than the loss and its gradient}}
    %ce = graph.cross_entropy %logits, %t : tensor<8x16xf32>, tensor<8xi32>
    %sq = graph.mul %logits, %logits : tensor<8x16xf32>, tensor<8x16xf32>
    %reg = graph.mean %sq axes [0, 1] : tensor<8x16xf32>
    %loss = graph.add %ce, %reg : tensor<f32>, tensor<f32>
    graph.loss %loss : tensor<f32>
    return
  }
}

// BAD: error: graph-chunk-classifier: cannot read the chunk size 'lots' (write bytes, 256MiB or 1GB; 0 keeps logits whole)
