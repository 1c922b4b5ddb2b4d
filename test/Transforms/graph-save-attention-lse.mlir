// RUN: ampc-opt %s --split-input-file --graph-build-training --graph-save-attention-lse | FileCheck %s
// RUN: ampc-opt %s --split-input-file --graph-build-training --graph-assign-precision --graph-insert-loss-scaling --graph-save-attention-lse | FileCheck %s --check-prefix=BF16
// RUN: ampc-opt %s --split-input-file --graph-save-attention-lse | FileCheck %s --check-prefix=FORWARD

// graph-save-attention-lse: each attention the micro step differentiates gets `with_lse`, and its
// attention_grad reads the output and the row log-sum-exp instead of computing the forward
// again. In bf16 both ops read the same casts of q, k, v; o is bf16, lse f32.

// CHECK-LABEL: graph.model @layer
// CHECK: func.func @micro_step()
// CHECK: %[[O:.+]], %[[LSE:.+]] = graph.attention %[[Q:.+]], %[[K:.+]], %[[V:.+]] causal with_lse : tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>
// CHECK-NOT: graph.attention %
// CHECK: graph.attention_grad %[[Q]], %[[K]], %[[V]], %{{.+}} causal saved(%[[O]], %[[LSE]] : tensor<2x2x8x16xf32>, tensor<2x2x8xf32>)
// CHECK: func.func @optimizer_step()

// BF16-LABEL: graph.model @layer
// BF16: %[[O:.+]], %[[LSE:.+]] = graph.attention %[[Q:.+]], %[[K:.+]], %[[V:.+]] causal with_lse {graph.precision = #graph.precision<compute = bf16, accumulate = f32, storage = bf16, rule = "reduced">} : tensor<2x2x8x16xbf16>, tensor<2x2x8x16xbf16>, tensor<2x2x8x16xbf16>
// BF16: graph.attention_grad %[[Q]], %[[K]], %[[V]], %{{.+}} causal saved(%[[O]], %[[LSE]] : tensor<2x2x8x16xbf16>, tensor<2x2x8xf32>)

// A forward-only model keeps its one-result attention.
// FORWARD-LABEL: graph.model @layer
// FORWARD: graph.attention %{{.+}}, %{{.+}}, %{{.+}} causal : tensor<2x2x8x16xf32>
// FORWARD-NOT: with_lse
graph.model @layer {
  graph.param @wq : tensor<16x16xf32> init #graph.normal<std = 0.02>
  graph.input @x : tensor<2x2x8x16xf32>
  func.func @forward() {
    %w = graph.get_param @wq : tensor<16x16xf32>
    %x = graph.get_input @x : tensor<2x2x8x16xf32>
    %q = graph.matmul %x, %w : tensor<2x2x8x16xf32>, tensor<16x16xf32>
    %o = graph.attention %q, %x, %x causal : tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>
    %l = graph.mse_loss %o, %x : tensor<2x2x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// Two attentions of one layer with different scales: each gradient reads its own forward's o
// and lse.
// CHECK-LABEL: graph.model @two
// CHECK: %[[O1:.+]], %[[L1:.+]] = graph.attention %{{.+}}, %{{.+}}, %{{.+}} with_lse
// CHECK: %[[O2:.+]], %[[L2:.+]] = graph.attention %{{.+}}, %{{.+}}, %{{.+}} scale 5.000000e-01 with_lse
// CHECK: graph.attention_grad {{.+}} scale 5.000000e-01 saved(%[[O2]], %[[L2]]
// CHECK: graph.attention_grad {{.+}} saved(%[[O1]], %[[L1]]
graph.model @two {
  graph.param @wq : tensor<16x16xf32> init #graph.normal<std = 0.02>
  graph.input @x : tensor<2x8x16xf32>
  func.func @forward() {
    %w = graph.get_param @wq : tensor<16x16xf32>
    %x = graph.get_input @x : tensor<2x8x16xf32>
    %q = graph.matmul %x, %w : tensor<2x8x16xf32>, tensor<16x16xf32>
    %a = graph.attention %q, %x, %x : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
    %b = graph.attention %a, %q, %q scale 0.5 : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
    %l = graph.mse_loss %b, %x : tensor<2x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// A packed qkv_attention: its gradient reads o [.., T, H Dh] and lse [.., H, T].
// CHECK-LABEL: graph.model @packed
// CHECK: %[[O:.+]], %[[LSE:.+]] = graph.qkv_attention %[[X:.+]] heads 2 causal with_lse : tensor<2x8x96xf32>
// CHECK: graph.qkv_attention_grad %[[X]], %{{.+}} heads 2 causal saved(%[[O]], %[[LSE]] : tensor<2x8x32xf32>, tensor<2x2x8xf32>) : tensor<2x8x96xf32>, tensor<2x8x32xf32>
// BF16-LABEL: graph.model @packed
// BF16: %[[O:.+]], %[[LSE:.+]] = graph.qkv_attention %[[X:.+]] heads 2 causal with_lse {graph.precision = #graph.precision<compute = bf16, accumulate = f32, storage = bf16, rule = "reduced">} : tensor<2x8x96xbf16>
// BF16: graph.qkv_attention_grad %[[X]], %{{.+}} heads 2 causal saved(%[[O]], %[[LSE]] : tensor<2x8x32xbf16>, tensor<2x2x8xf32>) {{.*}}: tensor<2x8x96xbf16>, tensor<2x8x32xbf16>
graph.model @packed {
  graph.param @w : tensor<32x96xf32> init #graph.normal<std = 0.02>
  graph.input @x : tensor<2x8x32xf32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<32x96xf32>
    %x = graph.get_input @x : tensor<2x8x32xf32>
    %qkv = graph.matmul %x, %w : tensor<2x8x32xf32>, tensor<32x96xf32>
    %o = graph.qkv_attention %qkv heads 2 causal : tensor<2x8x96xf32>
    %l = graph.mse_loss %o, %x : tensor<2x8x32xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
