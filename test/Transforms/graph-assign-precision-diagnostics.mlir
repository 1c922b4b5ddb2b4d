// RUN: not ampc-opt %s --graph-assign-precision="mode=fp8" 2>&1 | FileCheck %s --check-prefix=MODE
// RUN: not ampc-opt %s --graph-assign-precision="fp32-ops=matmul,convolution" 2>&1 | FileCheck %s --check-prefix=KIND
// RUN: not ampc-opt %s --graph-assign-precision="fp32-ops=gelu reduced-ops=gelu" 2>&1 | FileCheck %s --check-prefix=FLAGS
// RUN: not ampc-opt %s --graph-assign-precision="policy=%S/Inputs/policy-reduced-layernorm.txt fp32-ops=layernorm" 2>&1 | FileCheck %s --check-prefix=FILE-FLAG
// RUN: not ampc-opt %s --graph-assign-precision="policy=%S/Inputs/policy-malformed.txt" 2>&1 | FileCheck %s --check-prefix=MALFORMED
// RUN: not ampc-opt %s --graph-assign-precision="policy=%S/Inputs/policy-unknown-list.txt" 2>&1 | FileCheck %s --check-prefix=BAD-LIST
// RUN: not ampc-opt %s --graph-assign-precision="policy=%S/Inputs/no-such-policy.txt" 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not ampc-opt %s --graph-assign-precision="reduced-ops=," 2>&1 | FileCheck %s --check-prefix=EMPTY
// RUN: not ampc-opt %s --graph-assign-precision --graph-assign-precision 2>&1 | FileCheck %s --check-prefix=TWICE

// graph-assign-precision-diagnostics.mlir: invalid modes, policy files and flags. A kind put in
// two lists is a conflict, reported with both origins, never resolved silently.

// MODE: error: graph-assign-precision: invalid mode 'fp8': the modes are bf16, fp16 and fp32
// KIND: error: fp32-ops: unknown op kind 'convolution'; the policy governs add, attention,
// FLAGS: error: conflicting precision policy for 'gelu': reduced-ops puts it in reduced, fp32-ops in fp32
// FILE-FLAG: error: conflicting precision policy for 'layernorm': {{.*}}policy-reduced-layernorm.txt:2 puts it in reduced, fp32-ops in fp32
// MALFORMED: error: {{.*}}policy-malformed.txt:3: expected 'LIST: kind, kind, ...' with LIST one of reduced, fp32, follow, store_fp32
// BAD-LIST: error: {{.*}}policy-unknown-list.txt:1: unknown list 'bf16'; the lists are reduced, fp32, follow and store_fp32
// MISSING: error: cannot read the precision policy file '{{.*}}no-such-policy.txt': No such file or directory
// EMPTY: error: reduced-ops: no op kinds given for 'reduced'
// TWICE: error: already has a precision assignment ("bf16"); graph-assign-precision runs once

graph.model @m {
  graph.param @w : tensor<4x4xf32> init #graph.normal<std = 0.02>
  graph.input @x : tensor<2x4xf32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<4x4xf32>
    %x = graph.get_input @x : tensor<2x4xf32>
    %y = graph.matmul %x, %w : tensor<2x4xf32>, tensor<4x4xf32>
    %l = graph.mse_loss %y, %x : tensor<2x4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
