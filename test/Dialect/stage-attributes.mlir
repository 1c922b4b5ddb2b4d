// RUN: ampc-opt %s -split-input-file | ampc-opt -split-input-file | FileCheck %s

// stage-attributes.mlir: the graph.-prefixed attributes passes leave for later stages
// round-trip; their errors are in stage-attributes-invalid.mlir.

// graph-plan-remat's result on micro_step.
// CHECK-LABEL: graph.model @remat
// CHECK: func.func @forward() attributes {graph.remat = #graph.remat<budget_bytes = 9800, peak_bytes = 9488, no_remat_peak_bytes = 10512, live_bytes = 4352, extra_flops = 256, step_flops = 20486>}
graph.model @remat {
  graph.input @x : tensor<4xf32>
  func.func @forward() attributes {graph.remat = #graph.remat<budget_bytes = 9800, peak_bytes = 9488, no_remat_peak_bytes = 10512, live_bytes = 4352, extra_flops = 256, step_flops = 20486>} {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.sum %x axes [0] : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
