// RUN: ampc-opt %s --graph-build-training --graph-assign-precision --graph-plan-memory | FileCheck %s

// graph-plan-memory-training.mlir: the training step after precision assignment; both functions
// get an arena, and parameters, their copies, inputs and state take none.
// The training step: both functions get an arena; parameters, inputs and state take none.
// CHECK-LABEL: graph.model @linear
// CHECK: func.func @micro_step() attributes {graph.arena = #graph.arena<bytes = {{[0-9]+}}, peak_live_bytes = {{[0-9]+}}, alignment = 256>}
// The reduced-precision copy of @w and the input are read where they live: no attribute.
// CHECK-NEXT: %w.bf16 = graph.get_param @w.bf16 : tensor<4x2xbf16>
// CHECK-NEXT: %x = graph.get_input @x : tensor<8x4xf32>
// CHECK: graph.matmul {{.*}}graph.arena_offsets = array<i64:
// CHECK: func.func @optimizer_step() -> (tensor<f32>, tensor<f32>) attributes {graph.arena = #graph.arena<bytes = 512, peak_live_bytes = 512, alignment = 256>}
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

