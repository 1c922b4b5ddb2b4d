// RUN: ampc-opt %s -split-input-file --graph-build-training --graph-assign-precision | FileCheck %s
// RUN: ampc-opt %s -split-input-file --graph-build-training --graph-assign-precision="mode=fp16" | FileCheck %s --check-prefix=FP16
// RUN: ampc-opt %s -split-input-file --graph-build-training --graph-assign-precision="mode=fp32" | FileCheck %s --check-prefix=FP32
// RUN: ampc-opt %s -split-input-file --graph-build-training --graph-assign-precision="fp32-ops=matmul store-fp32-ops=layernorm" | FileCheck %s --check-prefix=FLAGS
// RUN: ampc-opt %s -split-input-file --graph-build-training --graph-assign-precision="policy=%S/Inputs/policy-reduced-layernorm.txt" | FileCheck %s --check-prefix=FILE
// RUN: ampc-opt %s -split-input-file --graph-build-training --graph-assign-precision="fp32-ops=add store-fp32-ops=add" | FileCheck %s --check-prefix=F32ADD

// graph-assign-precision.mlir: one case per policy rule (reduced, fp32, follow, parameter
// gradients in f32, parameter copies), per override (the keep_fp32 attribute, the flags, a
// policy file), per mode, per cast-elimination rule, and the norms reading the reduced residual
// stream as it is.

// The default bf16 policy on layernorm -> matmul -> bias add -> mse.
// CHECK-LABEL: graph.model @block attributes {graph.precision_mode = "bf16"} {
// Parameters read in bf16 get a copy, refreshed by their optimizer update; the norm's gain and
// bias are read by an f32 op and get none.
// CHECK: graph.param_copy @w.bf16 : tensor<8x8xbf16> of @w
// CHECK: graph.param_copy @b.bf16 : tensor<8xbf16> of @b
// CHECK-NOT: graph.param_copy
// CHECK: func.func @micro_step() {
// CHECK-DAG: %[[W:.+]] = graph.get_param @w.bf16 : tensor<8x8xbf16>
// CHECK-DAG: %[[B:.+]] = graph.get_param @b.bf16 : tensor<8xbf16>
// CHECK-DAG: %[[X:.+]] = graph.get_input @x : tensor<4x8xf32>
// fp32 rule: layernorm computes in f32; its result is stored in bf16.
// CHECK: %[[H:.+]] = graph.layernorm %[[X]], %{{.+}}, %{{.+}} {graph.precision = #graph.precision<compute = f32, accumulate = f32, storage = bf16, rule = "fp32">}
// CHECK-NEXT: %[[H16:.+]] = graph.cast %[[H]] {{.*}} : tensor<4x8xf32> -> tensor<4x8xbf16>
// reduced rule: the matmul reads bf16 and accumulates in f32.
// CHECK-NEXT: %[[M:.+]] = graph.matmul %[[H16]], %[[W]] {graph.precision = #graph.precision<compute = bf16, accumulate = f32, storage = bf16, rule = "reduced">} : tensor<4x8xbf16>, tensor<8x8xbf16>
// follow rule: the add runs in its inputs' type.
// CHECK-NEXT: %[[A:.+]] = graph.add %[[M]], %[[B]] {graph.precision = #graph.precision<compute = bf16, accumulate = bf16, storage = bf16, rule = "follow">} : tensor<4x8xbf16>, tensor<8xbf16>
// The loss reads f32.
// CHECK-NEXT: %[[A32:.+]] = graph.cast %[[A]] {{.*}} : tensor<4x8xbf16> -> tensor<4x8xf32>
// CHECK-NEXT: graph.mse_loss %[[A32]], %{{.+}} {graph.precision = #graph.precision<compute = f32, accumulate = f32, storage = f32, rule = "fp32">}
// A parameter gradient is stored in f32 before it reaches its accumulator: the weight-gradient
// matmul writes its f32 accumulation directly.
// CHECK: %[[DW:.+]] = graph.matmul %[[H16]], %{{.+}} transpose_lhs {graph.precision = #graph.precision<compute = bf16, accumulate = f32, storage = f32, rule = "reduced">} : tensor<4x8xbf16>, tensor<4x8xbf16> -> f32
// CHECK-NOT: graph.cast %[[DW]]
// CHECK: graph.accumulate_grad %[[DW]] into @w.grad : tensor<8x8xf32>
// CHECK: func.func @optimizer_step()
// CHECK: graph.adamw @w grad @w.grad moments @w.adam_m, @w.adam_v lr %{{.+}} grad_norm %{{.+}} copy @w.bf16
// CHECK: graph.adamw @b grad @b.grad moments @b.adam_m, @b.adam_v lr %{{.+}} grad_norm %{{.+}} copy @b.bf16
// CHECK: graph.adamw @g grad @g.grad moments @g.adam_m, @g.adam_v lr %{{.+}} grad_norm %{{.+}} {

// FP16: graph.model @block attributes {graph.precision_mode = "fp16"} {
// FP16: graph.param_copy @w.f16 : tensor<8x8xf16> of @w
// FP16: graph.matmul %{{.+}}, %{{.+}} {graph.precision = #graph.precision<compute = f16, accumulate = f32, storage = f16, rule = "reduced">} : tensor<4x8xf16>, tensor<8x8xf16>

// fp32 mode changes no type and inserts no cast.
// FP32: graph.model @block attributes {graph.precision_mode = "fp32"} {
// FP32-NOT: graph.param_copy
// FP32-NOT: graph.cast
// FP32: graph.matmul %{{.+}}, %{{.+}} {graph.precision = #graph.precision<compute = f32, accumulate = f32, storage = f32, rule = "fp32 mode">} : tensor<4x8xf32>, tensor<8x8xf32>
// FP32-NOT: graph.cast
// FP32: graph.model @kept

// Flags: matmul moves to the fp32 list; layernorm results are stored in f32.
// FLAGS: graph.model @block
// FLAGS-NOT: graph.param_copy @w
// FLAGS: %[[H:.+]] = graph.layernorm {{.*}}storage = f32, rule = "fp32">}
// FLAGS-NEXT: graph.matmul %[[H]], %{{.+}} {graph.precision = #graph.precision<compute = f32, accumulate = f32, storage = bf16, rule = "fp32">} : tensor<4x8xf32>, tensor<8x8xf32>

// A policy file moves layernorm to the reduced list.
// FILE: graph.model @block
// FILE: graph.layernorm %{{.+}}, %{{.+}}, %{{.+}} {graph.precision = #graph.precision<compute = bf16, accumulate = f32, storage = bf16, rule = "reduced">} : tensor<4x8xbf16>, tensor<8xbf16>, tensor<8xbf16>
graph.model @block {
  graph.param @w : tensor<8x8xf32> init #graph.normal<std = 0.02>
  graph.param @b : tensor<8xf32> init #graph.zeros
  graph.param @g : tensor<8xf32> init #graph.ones
  graph.param @beta : tensor<8xf32> init #graph.zeros
  graph.input @x : tensor<4x8xf32>
  graph.input @y : tensor<4x8xf32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<8x8xf32>
    %b = graph.get_param @b : tensor<8xf32>
    %g = graph.get_param @g : tensor<8xf32>
    %beta = graph.get_param @beta : tensor<8xf32>
    %x = graph.get_input @x : tensor<4x8xf32>
    %y = graph.get_input @y : tensor<4x8xf32>
    %h = graph.layernorm %x, %g, %beta : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>
    %m = graph.matmul %h, %w : tensor<4x8xf32>, tensor<8x8xf32>
    %a = graph.add %m, %b : tensor<4x8xf32>, tensor<8xf32>
    %l = graph.mse_loss %a, %y : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// keep_fp32 on an op of the model file keeps it, and its gradient, in f32.
// CHECK-LABEL: graph.model @kept
// CHECK-NOT: graph.param_copy @w
// CHECK: graph.matmul %{{.+}}, %{{.+}} {graph.precision = #graph.precision<compute = f32, accumulate = f32, storage = f32, rule = "keep_fp32">, keep_fp32} : tensor<4x8xf32>, tensor<8x8xf32>
// CHECK: graph.grad_seed
// CHECK: graph.matmul %{{.+}}, %{{.+}} transpose_lhs {graph.precision = #graph.precision<compute = f32, accumulate = f32, storage = f32, rule = "keep_fp32">, keep_fp32} : tensor<4x8xf32>, tensor<4x8xf32>
graph.model @kept {
  graph.param @w : tensor<8x8xf32> init #graph.normal<std = 0.02>
  graph.input @x : tensor<4x8xf32>
  graph.input @y : tensor<4x8xf32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<8x8xf32>
    %x = graph.get_input @x : tensor<4x8xf32>
    %y = graph.get_input @y : tensor<4x8xf32>
    %m = graph.matmul %x, %w {keep_fp32} : tensor<4x8xf32>, tensor<8x8xf32>
    %l = graph.mse_loss %m, %y : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// follow with inputs of different types picks the one that converts fewer elements: here the
// f32 data (32 elements) wins over converting it, and the small bf16 value is widened.
// CHECK-LABEL: graph.model @follow_cost
// CHECK: %[[V:.+]] = graph.matmul {{.*}} : tensor<1x8xbf16>, tensor<8x8xbf16>
// CHECK: %[[V32:.+]] = graph.cast %[[V]] {{.*}} : tensor<1x8xbf16> -> tensor<1x8xf32>
// CHECK: graph.add %{{.+}}, %[[V32]] {graph.precision = #graph.precision<compute = f32, accumulate = f32, storage = f32, rule = "follow">} : tensor<4x8xf32>, tensor<1x8xf32>
graph.model @follow_cost {
  graph.param @w : tensor<8x8xf32> init #graph.normal<std = 0.02>
  graph.input @x : tensor<4x8xf32>
  graph.input @v : tensor<1x8xf32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<8x8xf32>
    %x = graph.get_input @x : tensor<4x8xf32>
    %v = graph.get_input @v : tensor<1x8xf32>
    %p = graph.matmul %v, %w : tensor<1x8xf32>, tensor<8x8xf32>
    %s = graph.add %x, %p : tensor<4x8xf32>, tensor<1x8xf32>
    %l = graph.sum %s axes [0, 1] : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// Cast elimination on casts written in the model: a widening undone is removed (bf16 -> f32 ->
// bf16 is the original value); a cast to the type a value already has is removed; the same value
// cast to the same type twice is cast once; a cast of a constant becomes a constant. The exp
// reads f32, so its bf16 input is widened once.
// CHECK-LABEL: graph.model @casts
// CHECK: %[[X:.+]] = graph.get_input @x : tensor<4xbf16>
// CHECK-NOT: graph.cast %[[X]] {{.*}}-> tensor<4xbf16>
// CHECK: %[[X32:.+]] = graph.cast %[[X]] {{.*}}: tensor<4xbf16> -> tensor<4xf32>
// CHECK-NOT: graph.cast %[[X]]
// CHECK: graph.exp %[[X32]]
// CHECK: graph.constant dense<{{.*}}> : tensor<4xbf16>
// CHECK-NOT: graph.cast %{{.+}} : tensor<4xf32> -> tensor<4xf32>
graph.model @casts {
  graph.param @w : tensor<4xf32> init #graph.ones
  graph.input @x : tensor<4xbf16>
  func.func @forward() {
    %w = graph.get_param @w : tensor<4xf32>
    %x = graph.get_input @x : tensor<4xbf16>
    %up = graph.cast %x : tensor<4xbf16> -> tensor<4xf32>
    %down = graph.cast %up : tensor<4xf32> -> tensor<4xbf16>
    %e = graph.exp %down : tensor<4xbf16>
    %up2 = graph.cast %x : tensor<4xbf16> -> tensor<4xf32>
    %same = graph.cast %up2 : tensor<4xf32> -> tensor<4xf32>
    %c = graph.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
    %c16 = graph.cast %c : tensor<4xf32> -> tensor<4xbf16>
    %wc = graph.cast %w : tensor<4xf32> -> tensor<4xbf16>
    %p = graph.mul %wc, %c16 : tensor<4xbf16>, tensor<4xbf16>
    %q = graph.cast %p : tensor<4xbf16> -> tensor<4xf32>
    %e32 = graph.cast %e : tensor<4xbf16> -> tensor<4xf32>
    %r = graph.mul %q, %e32 : tensor<4xf32>, tensor<4xf32>
    %t = graph.add %r, %same : tensor<4xf32>, tensor<4xf32>
    %l = graph.sum %t axes [0] : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// A weight read through a transpose: its gradient is still a parameter gradient, so the matmul
// that computes it writes f32 and the transpose back to the weight's layout runs in f32.
// CHECK-LABEL: graph.model @transposed_weight
// CHECK: graph.grad_seed
// CHECK: %[[DWT:.+]] = graph.matmul %{{.+}}, %{{.+}} transpose_lhs {{.*}}storage = f32, rule = "reduced">} : tensor<4x8xbf16>, tensor<4x16xbf16> -> f32
// CHECK-NEXT: %[[DW:.+]] = graph.transpose %[[DWT]] [1, 0] {graph.precision = #graph.precision<compute = f32, accumulate = f32, storage = f32, rule = "follow">} : tensor<8x16xf32>
// CHECK: graph.accumulate_grad %[[DW]] into @w.grad : tensor<16x8xf32>
graph.model @transposed_weight {
  graph.param @w : tensor<16x8xf32> init #graph.normal<std = 0.02>
  graph.input @x : tensor<4x8xf32>
  graph.input @y : tensor<4x16xf32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<16x8xf32>
    %x = graph.get_input @x : tensor<4x8xf32>
    %y = graph.get_input @y : tensor<4x16xf32>
    %wt = graph.transpose %w [1, 0] : tensor<16x8xf32>
    %p = graph.matmul %x, %wt : tensor<4x8xf32>, tensor<8x16xf32>
    %l = graph.mse_loss %p, %y : tensor<4x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// A residual stream: the add of two bf16 matmul results runs in bf16. The layernorm computes in
// f32 but reads that bf16 sum as it is (widening each element as it loads it) and writes its
// result in bf16, where it is stored; its gradient reads the same bf16 sum and a bf16 dy. No f32
// copy of the residual is made, so none is kept for the backward pass.
// CHECK-LABEL: graph.model @residual
// CHECK: %[[H:.+]] = graph.matmul
// CHECK: %[[F:.+]] = graph.matmul %[[H]]
// CHECK: %[[R:.+]] = graph.add %[[H]], %[[F]] {graph.precision = #graph.precision<compute = bf16, accumulate = bf16, storage = bf16, rule = "follow">} : tensor<4x8xbf16>, tensor<4x8xbf16>
// CHECK-NOT: graph.cast %[[R]]
// CHECK: %[[N:.+]] = graph.layernorm %[[R]], %{{.+}}, %{{.+}} {graph.precision = #graph.precision<compute = f32, accumulate = f32, storage = bf16, rule = "fp32">} : tensor<4x8xbf16>, tensor<8xf32>, tensor<8xf32>
// CHECK-NOT: graph.cast %[[N]]
// CHECK: graph.matmul %[[N]], %{{.+}} {{.*}} : tensor<4x8xbf16>, tensor<8x8xbf16>
// CHECK: graph.grad_seed
// CHECK-NOT: graph.cast %[[R]]
// CHECK: %[[DN:.+]] = graph.matmul %{{.+}}, %{{.+}} transpose_rhs {{.*}} : tensor<4x8xbf16>, tensor<8x8xbf16>
// CHECK-NOT: graph.cast %[[DN]]
// CHECK: %[[DR:.+]], %{{.+}}, %{{.+}} = graph.layernorm_grad %[[R]], %{{.+}}, %[[DN]] {graph.precision = #graph.precision<compute = f32, accumulate = f32, storage = bf16, rule = "fp32">} : tensor<4x8xbf16>, tensor<8xf32>
// CHECK-NOT: graph.cast %[[DR]]
// CHECK: graph.add %[[DR]], %{{.+}} {{.*}} : tensor<4x8xbf16>, tensor<4x8xbf16>
// CHECK-NOT: graph.cast %[[R]]
// CHECK: return

// FP16: graph.model @residual
// FP16: %[[R:.+]] = graph.add {{.*}} : tensor<4x8xf16>, tensor<4x8xf16>
// FP16: graph.layernorm %[[R]], {{.*}} : tensor<4x8xf16>, tensor<8xf32>, tensor<8xf32>
// FP16: graph.layernorm_grad %[[R]], {{.*}} : tensor<4x8xf16>, tensor<8xf32>

// FP32: graph.model @residual
// FP32: graph.layernorm {{.*}} : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>
// FP32: graph.layernorm_grad {{.*}} : tensor<4x8xf32>, tensor<8xf32>

// A policy that computes and stores the residual adds in f32: the norm and its gradient read
// the f32 residual, and write f32 results that are then stored in bf16, as before.
// F32ADD: graph.model @residual
// F32ADD: %[[R:.+]] = graph.add {{.*}}storage = f32, rule = "fp32">} : tensor<4x8xf32>, tensor<4x8xf32>
// F32ADD-NEXT: %[[N:.+]] = graph.layernorm %[[R]], {{.*}} : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>
// F32ADD-NEXT: graph.cast %[[N]] {{.*}} : tensor<4x8xf32> -> tensor<4x8xbf16>
// F32ADD: %[[DR:.+]], %{{.+}}, %{{.+}} = graph.layernorm_grad %[[R]], {{.*}} : tensor<4x8xf32>, tensor<8xf32>
// F32ADD-NEXT: graph.cast %[[DR]] {{.*}} : tensor<4x8xf32> -> tensor<4x8xbf16>
graph.model @residual {
  graph.param @w0 : tensor<8x8xf32> init #graph.normal<std = 0.02>
  graph.param @w1 : tensor<8x8xf32> init #graph.normal<std = 0.02>
  graph.param @w2 : tensor<8x8xf32> init #graph.normal<std = 0.02>
  graph.param @g : tensor<8xf32> init #graph.ones
  graph.param @b : tensor<8xf32> init #graph.zeros
  graph.input @x : tensor<4x8xf32>
  graph.input @t : tensor<4x8xf32>
  func.func @forward() {
    %w0 = graph.get_param @w0 : tensor<8x8xf32>
    %w1 = graph.get_param @w1 : tensor<8x8xf32>
    %w2 = graph.get_param @w2 : tensor<8x8xf32>
    %g = graph.get_param @g : tensor<8xf32>
    %b = graph.get_param @b : tensor<8xf32>
    %x = graph.get_input @x : tensor<4x8xf32>
    %t = graph.get_input @t : tensor<4x8xf32>
    %h = graph.matmul %x, %w0 : tensor<4x8xf32>, tensor<8x8xf32>
    %f = graph.matmul %h, %w1 : tensor<4x8xf32>, tensor<8x8xf32>
    %r = graph.add %h, %f : tensor<4x8xf32>, tensor<4x8xf32>
    %n = graph.layernorm %r, %g, %b : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>
    %y = graph.matmul %n, %w2 : tensor<4x8xf32>, tensor<8x8xf32>
    %l = graph.mse_loss %y, %t : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
