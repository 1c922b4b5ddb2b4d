// RUN: ampc-opt %s -split-input-file --graph-plan-memory | FileCheck %s
// RUN: ampc-opt %s -split-input-file --graph-plan-memory="alignment=64" | FileCheck %s --check-prefix=ALIGN64
// RUN: ampc-opt %s -split-input-file --graph-fuse --graph-plan-memory | FileCheck %s --check-prefix=FUSED
// RUN: not ampc-opt %s -split-input-file --graph-plan-memory="alignment=100" 2>&1 | FileCheck %s --check-prefix=BAD

// graph-plan-memory.mlir: arena offsets on graphs with known optimal arenas.

// A chain: each value dies when the next is made, so two 256-byte slots alternate.
// CHECK-LABEL: graph.model @chain
// CHECK: func.func @forward() attributes {graph.arena = #graph.arena<bytes = 512, peak_live_bytes = 512, alignment = 256>}
// Data read from an input takes no arena space: no attribute on the read.
// CHECK-NEXT: %x = graph.get_input @x : tensor<64xf32>
// CHECK: graph.exp %{{.+}} {graph.arena_offsets = array<i64: 0>}
// CHECK: graph.exp %{{.+}} {graph.arena_offsets = array<i64: 256>}
// CHECK: graph.exp %{{.+}} {graph.arena_offsets = array<i64: 0>}
// CHECK: graph.sum %{{.+}} axes [0] {graph.arena_offsets = array<i64: 256>}
// ALIGN64-LABEL: graph.model @chain
// ALIGN64: func.func @forward() attributes {graph.arena = #graph.arena<bytes = 512, peak_live_bytes = 512, alignment = 64>}
// After graph-fuse the exps and the sum are one kernel: only the sum's result (read by the
// loss) is stored, so the arena is one slot.
// FUSED-LABEL: graph.model @chain
// FUSED: func.func @forward() attributes {graph.arena = #graph.arena<bytes = 256, peak_live_bytes = 256, alignment = 256>
// FUSED-COUNT-3: graph.exp %{{.+}} {graph.arena_offsets = array<i64: -1>
// FUSED: graph.sum %{{.+}} axes [0] {graph.arena_offsets = array<i64: 0>
graph.model @chain {
  graph.input @x : tensor<64xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<64xf32>
    %a = graph.exp %x : tensor<64xf32>
    %b = graph.exp %a : tensor<64xf32>
    %c = graph.exp %b : tensor<64xf32>
    %l = graph.sum %c axes [0] : tensor<64xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// A value read late (%a, by the final add) stays live across the others: at the add, %a, %c and
// %d are live, so three 1 KiB slots are the optimum; the loss scalar reuses a freed slot.
// CHECK-LABEL: graph.model @skip
// CHECK: func.func @forward() attributes {graph.arena = #graph.arena<bytes = 3072, peak_live_bytes = 3072, alignment = 256>}
// CHECK: %[[A:.+]] = graph.exp %{{.+}} {graph.arena_offsets = array<i64: [[OA:[0-9]+]]>}
// CHECK-NOT: graph.arena_offsets = array<i64: [[OA]]>
// CHECK: graph.add %[[A]]
// ALIGN64-LABEL: graph.model @skip
// ALIGN64: func.func @forward() attributes {graph.arena = #graph.arena<bytes = 3072, peak_live_bytes = 3072, alignment = 64>}
// FUSED-LABEL: graph.model @skip
// FUSED: func.func @forward() attributes {graph.arena = #graph.arena<bytes = 256, peak_live_bytes = 256, alignment = 256>
graph.model @skip {
  graph.input @x : tensor<256xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<256xf32>
    %a = graph.exp %x : tensor<256xf32>
    %b = graph.exp %a : tensor<256xf32>
    %c = graph.exp %b : tensor<256xf32>
    %d = graph.add %a, %c : tensor<256xf32>, tensor<256xf32>
    %l = graph.sum %d axes [0] : tensor<256xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// BAD: error: graph-plan-memory: alignment must be a power of two, got 100
