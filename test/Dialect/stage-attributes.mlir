// RUN: ampc-opt %s -split-input-file | ampc-opt -split-input-file | FileCheck %s

// stage-attributes.mlir: the graph.-prefixed attributes passes leave for later stages
// round-trip; their errors are in stage-attributes-invalid.mlir.

// graph-plan-remat's result on micro_step.
// CHECK-LABEL: graph.model @remat
// CHECK: func.func @forward() attributes {graph.remat = #graph.remat<budget_bytes = 9800, peak_bytes = 9488, no_remat_peak_bytes = 10512, live_bytes = 4352, extra_flops = 256, step_flops = 20486, persistent_bytes = 0>}
graph.model @remat {
  graph.input @x : tensor<4xf32>
  func.func @forward() attributes {graph.remat = #graph.remat<budget_bytes = 9800, peak_bytes = 9488, no_remat_peak_bytes = 10512, live_bytes = 4352, extra_flops = 256, step_flops = 20486, persistent_bytes = 0>} {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.sum %x axes [0] : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// What graph-assign-precision, graph-insert-loss-scaling, graph-plan-remat, graph-fuse and
// graph-plan-memory leave: precision, the mode, the debug flag, a clone's mark, the fused group,
// the schedule, the arena offsets and the arena.
// CHECK-LABEL: graph.model @stages attributes {graph.debug_nonfinite, graph.precision_mode = "bf16"}
// CHECK: func.func @forward() attributes {graph.arena = #graph.arena<bytes = 512, peak_live_bytes = 260, alignment = 256>, graph.fusion_schedule = array<i64: 1, 0>}
// CHECK: graph.get_input @x {graph.fusion = #graph.fusion<group = 0, kind = none>}
// CHECK: graph.exp %{{.+}} {graph.arena_offsets = array<i64: 0>, graph.fusion = #graph.fusion<group = 1, kind = elementwise>, graph.precision = #graph.precision<compute = f32, accumulate = f32, storage = f32, rule = "fp32">, graph.recomputed}
// CHECK: graph.sum %{{.+}} axes [0] {graph.arena_offsets = array<i64: 256>, graph.fusion = #graph.fusion<group = 1, kind = elementwise>}
graph.model @stages attributes {graph.precision_mode = "bf16", graph.debug_nonfinite} {
  graph.input @x : tensor<64xf32>
  func.func @forward() attributes {graph.fusion_schedule = array<i64: 1, 0>, graph.arena = #graph.arena<bytes = 512, peak_live_bytes = 260, alignment = 256>} {
    %x = graph.get_input @x {graph.fusion = #graph.fusion<group = 0, kind = none>} : tensor<64xf32>
    %e = graph.exp %x {graph.arena_offsets = array<i64: 0>, graph.fusion = #graph.fusion<group = 1, kind = elementwise>, graph.precision = #graph.precision<compute = f32, accumulate = f32, storage = f32, rule = "fp32">, graph.recomputed} : tensor<64xf32>
    %l = graph.sum %e axes [0] {graph.arena_offsets = array<i64: 256>, graph.fusion = #graph.fusion<group = 1, kind = elementwise>} : tensor<64xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
