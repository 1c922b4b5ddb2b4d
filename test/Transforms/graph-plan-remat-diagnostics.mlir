// RUN: not ampc-opt %s --graph-build-training --graph-plan-remat="budget=9000 workspace=0" 2>&1 | FileCheck %s --check-prefix=TOO-SMALL
// RUN: not ampc-opt %s --graph-build-training --graph-plan-remat="budget=4KiB workspace=0" 2>&1 | FileCheck %s --check-prefix=PERSISTENT
// RUN: not ampc-opt %s --graph-build-training --graph-plan-remat="budget=lots" 2>&1 | FileCheck %s --check-prefix=BAD-BUDGET
// RUN: not ampc-opt %s --graph-build-training --graph-plan-remat="budget=1GiB workspace=50%" 2>&1 | FileCheck %s --check-prefix=BAD-WORKSPACE
// RUN: not ampc-opt %s --graph-build-training --graph-plan-remat="budget=1GiB alignment=100" 2>&1 | FileCheck %s --check-prefix=BAD-ALIGNMENT
// RUN: not ampc-opt %s --graph-plan-remat="budget=1GiB" 2>&1 | FileCheck %s --check-prefix=NOT-TRAINING

// graph-plan-remat-diagnostics.mlir: every error of the pass.

// Below the smallest peak any plan reaches: the error names it and what dominates it.
// TOO-SMALL: error: graph-plan-remat: memory budget 9000 bytes cannot be met; the smallest peak found is {{[0-9]+}} bytes, dominated by persistent state (5136 bytes), {{.*}}; the smallest budget that can be met is {{[0-9]+}} bytes
// Below what no recomputation reduces.
// PERSISTENT: error: graph-plan-remat: the memory budget 4096 bytes is below the persistent buffers and the optimizer step ({{[0-9]+}} bytes: parameters 1024, parameter copies 0, gradient accumulators 1024, optimizer state 2048, inputs 1024, workspace 0), which no recomputation reduces
// BAD-BUDGET: error: graph-plan-remat: cannot read the memory budget 'lots' (write bytes, 6GiB, 512MiB, 1.5GB or 75%)
// BAD-WORKSPACE: error: graph-plan-remat: cannot read the workspace size '50%' (write bytes, 64MiB or 1GB)
// BAD-ALIGNMENT: error: graph-plan-remat: alignment must be a power of two, got 100
// NOT-TRAINING: error: has no training step (micro_step and optimizer_step); run --graph-build-training before planning rematerialization
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
