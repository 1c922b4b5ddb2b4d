// RUN: ampc-opt %s --split-input-file --graph-pack-qkv-attention | FileCheck %s
// RUN: ampc-opt %s --split-input-file --graph-pack-qkv-attention --graph-build-training --graph-save-attention-lse | FileCheck %s --check-prefix=TRAIN

// graph-pack-qkv-attention: split + reshape + transpose of one projection into q, k, v, and the
// transpose + reshape of the result, become one qkv_attention; its gradient writes the packed
// projection's gradient, with no transpose or concat in the step.

// CHECK-LABEL: graph.model @block
// CHECK: %[[QKV:.+]] = graph.matmul
// CHECK-NOT: graph.split
// CHECK-NOT: graph.transpose
// CHECK: %[[Y:.+]] = graph.qkv_attention %[[QKV]] heads 4 causal : tensor<2x8x192xf32>
// CHECK-NOT: graph.reshape
// CHECK: graph.matmul %[[Y]], %{{.+}} : tensor<2x8x64xf32>, tensor<64x64xf32>

// TRAIN-LABEL: graph.model @block
// TRAIN: func.func @micro_step()
// TRAIN: %[[QKV:.+]] = graph.matmul
// TRAIN: %[[O:.+]], %[[LSE:.+]] = graph.qkv_attention %[[QKV]] heads 4 causal with_lse : tensor<2x8x192xf32>
// TRAIN-NOT: graph.transpose
// TRAIN-NOT: graph.concat
// TRAIN: graph.qkv_attention_grad %[[QKV]], %{{.+}} heads 4 causal saved(%[[O]], %[[LSE]] : tensor<2x8x64xf32>, tensor<2x4x8xf32>) : tensor<2x8x192xf32>, tensor<2x8x64xf32>
// TRAIN-NOT: graph.transpose
// TRAIN-NOT: graph.concat
// TRAIN: func.func @optimizer_step()
graph.model @block {
  graph.param @w : tensor<64x192xf32> init #graph.normal<std = 0.02>
  graph.param @proj : tensor<64x64xf32> init #graph.normal<std = 0.02>
  graph.input @x : tensor<2x8x64xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x8x64xf32>
    %w = graph.get_param @w : tensor<64x192xf32>
    %p = graph.get_param @proj : tensor<64x64xf32>
    %qkv = graph.matmul %x, %w : tensor<2x8x64xf32>, tensor<64x192xf32>
    %q0, %k0, %v0 = graph.split %qkv axis 2 sizes [64, 64, 64] : tensor<2x8x192xf32>
    %q1 = graph.reshape %q0 : tensor<2x8x64xf32> -> tensor<2x8x4x16xf32>
    %q = graph.transpose %q1 [0, 2, 1, 3] : tensor<2x8x4x16xf32>
    %k1 = graph.reshape %k0 : tensor<2x8x64xf32> -> tensor<2x8x4x16xf32>
    %k = graph.transpose %k1 [0, 2, 1, 3] : tensor<2x8x4x16xf32>
    %v1 = graph.reshape %v0 : tensor<2x8x64xf32> -> tensor<2x8x4x16xf32>
    %v = graph.transpose %v1 [0, 2, 1, 3] : tensor<2x8x4x16xf32>
    %o = graph.attention %q, %k, %v causal : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>
    %o1 = graph.transpose %o [0, 2, 1, 3] : tensor<2x4x8x16xf32>
    %o2 = graph.reshape %o1 : tensor<2x8x4x16xf32> -> tensor<2x8x64xf32>
    %y = graph.matmul %o2, %p : tensor<2x8x64xf32>, tensor<64x64xf32>
    %l = graph.mse_loss %y, %x : tensor<2x8x64xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// A result read in its head-major form as well: that reader gets it rebuilt from the packed
// result (reshape, transpose); the scale carries over.
// CHECK-LABEL: graph.model @head_major_reader
// CHECK: %[[Y:.+]] = graph.qkv_attention %{{.+}} heads 2 scale 5.000000e-01 : tensor<3x8x96xf32>
// CHECK: %[[R:.+]] = graph.reshape %[[Y]] : tensor<3x8x32xf32> -> tensor<3x8x2x16xf32>
// CHECK: %[[T:.+]] = graph.transpose %[[R]] [0, 2, 1, 3] : tensor<3x8x2x16xf32>
// CHECK: graph.sum %[[T]]
// CHECK: graph.mse_loss %[[Y]], %{{.+}} : tensor<3x8x32xf32>
graph.model @head_major_reader {
  graph.param @w : tensor<32x96xf32> init #graph.normal<std = 0.02>
  graph.input @t : tensor<3x8x32xf32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<32x96xf32>
    %t = graph.get_input @t : tensor<3x8x32xf32>
    %qkv = graph.matmul %t, %w : tensor<3x8x32xf32>, tensor<32x96xf32>
    %q0, %k0, %v0 = graph.split %qkv axis 2 sizes [32, 32, 32] : tensor<3x8x96xf32>
    %q1 = graph.reshape %q0 : tensor<3x8x32xf32> -> tensor<3x8x2x16xf32>
    %q = graph.transpose %q1 [0, 2, 1, 3] : tensor<3x8x2x16xf32>
    %k1 = graph.reshape %k0 : tensor<3x8x32xf32> -> tensor<3x8x2x16xf32>
    %k = graph.transpose %k1 [0, 2, 1, 3] : tensor<3x8x2x16xf32>
    %v1 = graph.reshape %v0 : tensor<3x8x32xf32> -> tensor<3x8x2x16xf32>
    %v = graph.transpose %v1 [0, 2, 1, 3] : tensor<3x8x2x16xf32>
    %o = graph.attention %q, %k, %v scale 0.5 : tensor<3x2x8x16xf32>, tensor<3x2x8x16xf32>, tensor<3x2x8x16xf32>
    %s = graph.sum %o axes [0, 1, 2, 3] : tensor<3x2x8x16xf32>
    %o1 = graph.transpose %o [0, 2, 1, 3] : tensor<3x2x8x16xf32>
    %o2 = graph.reshape %o1 : tensor<3x8x2x16xf32> -> tensor<3x8x32xf32>
    %l = graph.mse_loss %o2, %t : tensor<3x8x32xf32>
    %m = graph.add %l, %s : tensor<f32>, tensor<f32>
    graph.loss %m : tensor<f32>
    return
  }
}

// -----

// The heads merged into the batch ([B H, T, Dh], as exports of bmm-based attention have it):
// the merging reshapes go too, and so does the one that splits the result again.
// CHECK-LABEL: graph.model @merged_heads
// CHECK-NOT: graph.transpose
// CHECK: %[[Y:.+]] = graph.qkv_attention %{{.+}} heads 2 causal : tensor<2x8x96xf32>
// CHECK-NOT: graph.reshape
// CHECK-NOT: graph.transpose
// CHECK: graph.mse_loss %[[Y]], %{{.+}} : tensor<2x8x32xf32>
graph.model @merged_heads {
  graph.param @w : tensor<32x96xf32> init #graph.normal<std = 0.02>
  graph.input @x : tensor<2x8x32xf32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<32x96xf32>
    %x = graph.get_input @x : tensor<2x8x32xf32>
    %qkv = graph.matmul %x, %w : tensor<2x8x32xf32>, tensor<32x96xf32>
    %q0, %k0, %v0 = graph.split %qkv axis 2 sizes [32, 32, 32] : tensor<2x8x96xf32>
    %q1 = graph.reshape %q0 : tensor<2x8x32xf32> -> tensor<2x8x2x16xf32>
    %q2 = graph.transpose %q1 [0, 2, 1, 3] : tensor<2x8x2x16xf32>
    %q = graph.reshape %q2 : tensor<2x2x8x16xf32> -> tensor<4x8x16xf32>
    %k1 = graph.reshape %k0 : tensor<2x8x32xf32> -> tensor<2x8x2x16xf32>
    %k2 = graph.transpose %k1 [0, 2, 1, 3] : tensor<2x8x2x16xf32>
    %k = graph.reshape %k2 : tensor<2x2x8x16xf32> -> tensor<4x8x16xf32>
    %v1 = graph.reshape %v0 : tensor<2x8x32xf32> -> tensor<2x8x2x16xf32>
    %v2 = graph.transpose %v1 [0, 2, 1, 3] : tensor<2x8x2x16xf32>
    %v = graph.reshape %v2 : tensor<2x2x8x16xf32> -> tensor<4x8x16xf32>
    %o = graph.attention %q, %k, %v causal : tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>
    %o1 = graph.reshape %o : tensor<4x8x16xf32> -> tensor<2x2x8x16xf32>
    %o2 = graph.transpose %o1 [0, 2, 1, 3] : tensor<2x2x8x16xf32>
    %o3 = graph.reshape %o2 : tensor<2x8x2x16xf32> -> tensor<2x8x32xf32>
    %l = graph.mse_loss %o3, %x : tensor<2x8x32xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// No match: k is read by something else too (moving it into the packed op would not remove its
// copy), and a split whose parts are used out of order (k first) is not q, k, v.
// CHECK-LABEL: graph.model @shared_key
// CHECK-NOT: graph.qkv_attention
// CHECK: graph.attention
// CHECK-LABEL: graph.model @swapped
// CHECK-NOT: graph.qkv_attention
// CHECK: graph.attention
graph.model @shared_key {
  graph.param @w : tensor<32x96xf32> init #graph.normal<std = 0.02>
  graph.input @x : tensor<2x8x32xf32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<32x96xf32>
    %x = graph.get_input @x : tensor<2x8x32xf32>
    %qkv = graph.matmul %x, %w : tensor<2x8x32xf32>, tensor<32x96xf32>
    %q0, %k0, %v0 = graph.split %qkv axis 2 sizes [32, 32, 32] : tensor<2x8x96xf32>
    %q1 = graph.reshape %q0 : tensor<2x8x32xf32> -> tensor<2x8x2x16xf32>
    %q = graph.transpose %q1 [0, 2, 1, 3] : tensor<2x8x2x16xf32>
    %k1 = graph.reshape %k0 : tensor<2x8x32xf32> -> tensor<2x8x2x16xf32>
    %k = graph.transpose %k1 [0, 2, 1, 3] : tensor<2x8x2x16xf32>
    %v1 = graph.reshape %v0 : tensor<2x8x32xf32> -> tensor<2x8x2x16xf32>
    %v = graph.transpose %v1 [0, 2, 1, 3] : tensor<2x8x2x16xf32>
    %o = graph.attention %q, %k, %v : tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>
    %l = graph.mse_loss %o, %k : tensor<2x2x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @swapped {
  graph.param @w : tensor<32x96xf32> init #graph.normal<std = 0.02>
  graph.input @x : tensor<2x8x32xf32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<32x96xf32>
    %x = graph.get_input @x : tensor<2x8x32xf32>
    %qkv = graph.matmul %x, %w : tensor<2x8x32xf32>, tensor<32x96xf32>
    %k0, %q0, %v0 = graph.split %qkv axis 2 sizes [32, 32, 32] : tensor<2x8x96xf32>
    %q1 = graph.reshape %q0 : tensor<2x8x32xf32> -> tensor<2x8x2x16xf32>
    %q = graph.transpose %q1 [0, 2, 1, 3] : tensor<2x8x2x16xf32>
    %k1 = graph.reshape %k0 : tensor<2x8x32xf32> -> tensor<2x8x2x16xf32>
    %k = graph.transpose %k1 [0, 2, 1, 3] : tensor<2x8x2x16xf32>
    %v1 = graph.reshape %v0 : tensor<2x8x32xf32> -> tensor<2x8x2x16xf32>
    %v = graph.transpose %v1 [0, 2, 1, 3] : tensor<2x8x2x16xf32>
    %o = graph.attention %q, %k, %v : tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>
    %l = graph.mse_loss %o, %o : tensor<2x2x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
