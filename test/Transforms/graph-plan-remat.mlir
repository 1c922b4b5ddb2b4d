// RUN: ampc-opt %s -split-input-file --graph-build-training --graph-plan-remat="budget=9800 workspace=0" | FileCheck %s
// RUN: ampc-opt %s -split-input-file --graph-build-training --graph-plan-remat="workspace=0" | FileCheck %s --check-prefix=NONE
// RUN: ampc-opt %s -split-input-file --graph-build-training --graph-plan-remat="budget=100% workspace=0" | FileCheck %s --check-prefix=FULL

// graph-plan-remat.mlir: small training steps whose best plan is known.
//
// A chain matmul -> tanh -> tanh -> tanh -> mean. Without remat the step needs 10512 bytes:
// 5136 of persistent buffers (w, its gradient, the AdamW moments, x) and every tanh output
// kept for the backward (tanh' = 1 - y^2 reads each). The backward reads the last tanh first
// and the first one last, so the only single recompute that lowers the peak is the middle
// tanh, rebuilt from the kept first one (256 FLOPs) just before its first reader; recomputing
// the first tanh would drag in the matmul. At 9800 bytes that is the plan.
// CHECK-LABEL: graph.model @chain
// CHECK: func.func @micro_step() attributes {graph.remat = #graph.remat<budget_bytes = 9800, peak_bytes = {{[0-9]+}}, no_remat_peak_bytes = 10512, live_bytes = {{[0-9]+}}, extra_flops = 256, step_flops = {{[0-9]+}}, persistent_bytes = {{[0-9]+}}>}
// The forward is unchanged.
// CHECK: %[[A:.+]] = graph.matmul
// CHECK-NEXT: %[[B:.+]] = graph.tanh %[[A]] :
// CHECK-NEXT: %[[C:.+]] = graph.tanh %[[B]] :
// CHECK-NEXT: %[[D:.+]] = graph.tanh %[[C]] :
// CHECK: graph.grad_seed
// The last tanh is read first and stays.
// CHECK: graph.mul %[[D]], %[[D]]
// CHECK-NOT: graph.matmul
// The clone comes right before its first reader, which reads it instead of the original.
// CHECK: %[[C2:.+]] = graph.tanh %[[B]] {graph.recomputed} : tensor<16x16xf32>
// CHECK-NEXT: graph.mul %[[C2]], %[[C2]]
// CHECK-NOT: recomputed
// CHECK: graph.mul %[[B]], %[[B]]
// CHECK: graph.matmul %{{.+}}, %{{.+}} transpose_lhs
// NONE-LABEL: graph.model @chain
// NONE-NOT: recomputed
// NONE-NOT: graph.remat
// FULL-LABEL: graph.model @chain
// FULL: graph.remat = #graph.remat<budget_bytes = 10512, peak_bytes = 10512, no_remat_peak_bytes = 10512, live_bytes = {{[0-9]+}}, extra_flops = 0,
// FULL-NOT: recomputed
graph.model @chain {
  graph.param @w : tensor<16x16xf32> init #graph.normal<std = 0.5>
  graph.input @x : tensor<16x16xf32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<16x16xf32>
    %x = graph.get_input @x : tensor<16x16xf32>
    %a = graph.matmul %x, %w : tensor<16x16xf32>, tensor<16x16xf32>
    %b = graph.tanh %a : tensor<16x16xf32>
    %c = graph.tanh %b : tensor<16x16xf32>
    %d = graph.tanh %c : tensor<16x16xf32>
    %l = graph.mean %d axes [0, 1] : tensor<16x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// Dropout is recomputed exactly: the clone keeps the forward's random stream, so its mask is
// the same. Here the cheapest plan under 9800 bytes rebuilds dropout and the tanh after it
// (512 FLOPs) from the kept first tanh, not the matmul.
// CHECK-LABEL: graph.model @dropout_chain
// CHECK: extra_flops = 512,
// CHECK: %[[B:.+]] = graph.tanh
// CHECK-NEXT: graph.dropout %[[B]] {p = 2.500000e-01 : f64, stream = 0 : i64}
// CHECK: graph.grad_seed
// CHECK: %[[C2:.+]] = graph.dropout %[[B]] {graph.recomputed, p = 2.500000e-01 : f64, stream = 0 : i64}
// CHECK-NEXT: %[[D2:.+]] = graph.tanh %[[C2]] {graph.recomputed}
// CHECK-NEXT: graph.mul %[[D2]], %[[D2]]
// NONE-LABEL: graph.model @dropout_chain
// NONE-NOT: recomputed
// FULL-LABEL: graph.model @dropout_chain
// FULL-NOT: recomputed
graph.model @dropout_chain {
  graph.param @w : tensor<16x16xf32> init #graph.normal<std = 0.5>
  graph.input @x : tensor<16x16xf32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<16x16xf32>
    %x = graph.get_input @x : tensor<16x16xf32>
    %a = graph.matmul %x, %w : tensor<16x16xf32>, tensor<16x16xf32>
    %b = graph.tanh %a : tensor<16x16xf32>
    %c = graph.dropout %b {p = 0.25 : f64} : tensor<16x16xf32>
    %d = graph.tanh %c : tensor<16x16xf32>
    %e = graph.tanh %d : tensor<16x16xf32>
    %l = graph.mean %e axes [0, 1] : tensor<16x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
