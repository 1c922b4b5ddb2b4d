// RUN: ampc-opt %s -split-input-file | ampc-opt -split-input-file | FileCheck %s
// RUN: ampc-opt %s -split-input-file -mlir-print-op-generic | ampc-opt -split-input-file | FileCheck %s
// RUN: ampc-opt %s -split-input-file -mlir-print-op-generic | FileCheck %s --check-prefix=GENERIC

// ops.mlir: round trip of every op and attribute of the graph dialect. The first RUN prints the
// custom form and parses it back; the second goes through the generic form. The GENERIC prefix
// checks the result types that the custom form leaves out because the ops infer them
// (broadcasting, matmul, transpose, slice, split, concat, reductions, embedding, norms,
// attention, losses). Initializer fields are matched in either spelling of a float that the
// attribute printer may use: the exponent form (`2.000000e-02`) or the shortest one (`0.02`).

// CHECK-LABEL: graph.model @given_weights attributes {weights = "given.safetensors"} {
// CHECK: graph.param @fc1.weight : tensor<4x2xf32> init #graph.given{{$}}
// GENERIC-LABEL: "graph.model"() <{sym_name = "given_weights", weights = "given.safetensors"}>
// GENERIC: "graph.param"() <{init = #graph.given, sym_name = "fc1.weight", type = tensor<4x2xf32>}> : () -> ()
graph.model @given_weights attributes {weights = "given.safetensors"} {
  graph.param @fc1.weight : tensor<4x2xf32> init #graph.given
  graph.input @x : tensor<8x4xf32>
  func.func @forward() {
    %w = graph.get_param @fc1.weight : tensor<4x2xf32>
    %x = graph.get_input @x : tensor<8x4xf32>
    %p = graph.matmul %x, %w : tensor<8x4xf32>, tensor<4x2xf32>
    %l = graph.sum %p axes [0, 1] : tensor<8x2xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// CHECK-LABEL: graph.model @structure {
// CHECK: graph.param @w_normal : tensor<4x2xf32> init #graph.normal<mean = {{0\.0|0\.000000e\+00}}, std = {{0\.02|2\.000000e-02}}>{{$}}
// CHECK: graph.param @w_normal_mean : tensor<4x2xf32> init #graph.normal<mean = {{1\.0|1\.000000e\+00}}, std = {{0\.5|5\.000000e-01}}>{{$}}
// CHECK: graph.param @w_uniform : tensor<4x2xbf16> init #graph.uniform<low = {{-0\.1|-1\.000000e-01}}, high = {{0\.1|1\.000000e-01}}>{{$}}
// CHECK: graph.param @b_zeros : tensor<2xf16> init #graph.zeros {weight_decay = true}
// CHECK: graph.param @g_ones : tensor<2xf32> init #graph.ones {weight_decay = false}
// CHECK: graph.input @x_f32 : tensor<8x4xf32>
// CHECK: graph.input @x_bf16 : tensor<8x4xbf16>
// CHECK: graph.input @x_f16 : tensor<8x4xf16>
// CHECK: graph.input @tokens_i32 : tensor<8xi32>
// CHECK: graph.input @tokens_i64 : tensor<8xi64>
// CHECK: func.func @forward() {
// CHECK: %[[W:.+]] = graph.get_param @w_normal : tensor<4x2xf32>
// CHECK: %[[X:.+]] = graph.get_input @x_f32 : tensor<8x4xf32>
// CHECK: %[[H:.+]] = graph.get_input @x_bf16 : tensor<8x4xbf16>
// CHECK: %[[T:.+]] = graph.get_input @tokens_i64 : tensor<8xi64>
// CHECK: %[[P:.+]] = graph.matmul %[[X]], %[[W]] : tensor<8x4xf32>, tensor<4x2xf32>
// CHECK: %[[L:.+]] = graph.sum %[[P]] axes [0, 1] : tensor<8x2xf32>
// CHECK: graph.loss %[[L]] : tensor<f32>
// CHECK: return

// GENERIC-LABEL: "graph.model"() <{sym_name = "structure"}>
// GENERIC: "graph.param"() <{init = #graph.normal<mean = {{0\.0|0\.000000e\+00}}, std = {{0\.02|2\.000000e-02}}>, sym_name = "w_normal", type = tensor<4x2xf32>}> : () -> ()
// GENERIC: "graph.param"() <{init = #graph.zeros, sym_name = "b_zeros", type = tensor<2xf16>, weight_decay = true}> : () -> ()
// GENERIC: "graph.input"() <{sym_name = "tokens_i32", type = tensor<8xi32>}> : () -> ()
// GENERIC: "graph.get_param"() <{name = @w_normal}> : () -> tensor<4x2xf32>
// GENERIC: "graph.loss"(%{{.+}}) : (tensor<f32>) -> ()
graph.model @structure {
  graph.param @w_normal : tensor<4x2xf32> init #graph.normal<std = 0.02>
  graph.param @w_normal_mean : tensor<4x2xf32> init #graph.normal<mean = 1.0, std = 0.5>
  graph.param @w_uniform : tensor<4x2xbf16> init #graph.uniform<low = -0.1, high = 0.1>
  graph.param @b_zeros : tensor<2xf16> init #graph.zeros {weight_decay = true}
  graph.param @g_ones : tensor<2xf32> init #graph.ones {weight_decay = false}
  graph.input @x_f32 : tensor<8x4xf32>
  graph.input @x_bf16 : tensor<8x4xbf16>
  graph.input @x_f16 : tensor<8x4xf16>
  graph.input @tokens_i32 : tensor<8xi32>
  graph.input @tokens_i64 : tensor<8xi64>
  func.func @forward() {
    %w = graph.get_param @w_normal : tensor<4x2xf32>
    %x = graph.get_input @x_f32 : tensor<8x4xf32>
    %h = graph.get_input @x_bf16 : tensor<8x4xbf16>
    %t = graph.get_input @tokens_i64 : tensor<8xi64>
    %p = graph.matmul %x, %w : tensor<8x4xf32>, tensor<4x2xf32>
    %l = graph.sum %p axes [0, 1] : tensor<8x2xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// Fields of an initializer may come in any order; the printer writes them in a fixed one.
// CHECK-LABEL: graph.model @initializer_field_order {
// CHECK: graph.param @w : tensor<4xf32> init #graph.normal<mean = {{-1\.0|-1\.000000e\+00}}, std = {{0\.25|2\.500000e-01}}>{{$}}
// CHECK: graph.param @u : tensor<4xf32> init #graph.uniform<low = {{-2\.0|-2\.000000e\+00}}, high = {{3\.0|3\.000000e\+00}}>{{$}}
graph.model @initializer_field_order {
  graph.param @w : tensor<4xf32> init #graph.normal<std = 0.25, mean = -1.0>
  graph.param @u : tensor<4xf32> init #graph.uniform<high = 3.0, low = -2.0>
  func.func @forward() {
    %w = graph.get_param @w : tensor<4xf32>
    %u = graph.get_param @u : tensor<4xf32>
    %l = graph.mse_loss %w, %u : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// Values that need an exponent must print as float literals that parse back (a literal needs a
// `.`: `1e-05` is rejected by the parser), which the second ampc-opt of each RUN checks.
// CHECK-LABEL: graph.model @initializer_exponents {
// CHECK: graph.param @w : tensor<4xf32> init #graph.normal<mean = {{1\.0*e\+20}}, std = {{1\.0*e-0?5}}>{{$}}
// CHECK: graph.param @u : tensor<4xf32> init #graph.uniform<low = {{-1\.50*e-0?7}}, high = {{2\.50*e\+30}}>{{$}}
graph.model @initializer_exponents {
  graph.param @w : tensor<4xf32> init #graph.normal<mean = 1.0e20, std = 1.0e-5>
  graph.param @u : tensor<4xf32> init #graph.uniform<low = -1.5e-7, high = 2.5e+30>
  func.func @forward() {
    %w = graph.get_param @w : tensor<4xf32>
    %u = graph.get_param @u : tensor<4xf32>
    %l = graph.mse_loss %w, %u : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// A loss may be any scalar float tensor, not only the f32 of the loss ops.
// CHECK-LABEL: graph.model @bf16_loss {
// CHECK: %[[X:.+]] = graph.get_input @x : tensor<8xbf16>
// CHECK: %[[L:.+]] = graph.mean %[[X]] axes [0] : tensor<8xbf16>
// CHECK: graph.loss %[[L]] : tensor<bf16>

// GENERIC-LABEL: "graph.model"() <{sym_name = "bf16_loss"}>
// GENERIC: "graph.mean"(%{{.+}}) <{axes = array<i64: 0>}> : (tensor<8xbf16>) -> tensor<bf16>
graph.model @bf16_loss {
  graph.input @x : tensor<8xbf16>
  func.func @forward() {
    %x = graph.get_input @x : tensor<8xbf16>
    %l = graph.mean %x axes [0] : tensor<8xbf16>
    graph.loss %l : tensor<bf16>
    return
  }
}

// -----

// CHECK-LABEL: graph.model @constants {
// CHECK: %[[A:.+]] = graph.constant dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>
// CHECK: %[[B:.+]] = graph.constant dense<5.000000e-01> : tensor<2xbf16>
// CHECK: %[[C:.+]] = graph.constant dense<{{\[\[}}1, 2], [3, 4]]> : tensor<2x2xi32>
// CHECK: %[[D:.+]] = graph.constant dense<7> : tensor<3xi64>
// CHECK: %[[E:.+]] = graph.constant dense<2.000000e+00> : tensor<f32>
// CHECK: %[[F:.+]] = graph.constant dense<[1.000000e+00, -2.000000e+00]> : tensor<2xf16>
// CHECK: %[[L:.+]] = graph.mse_loss %[[A]], %[[A]] : tensor<2xf32>
// CHECK: graph.loss %[[L]] : tensor<f32>

// GENERIC-LABEL: "graph.model"() <{sym_name = "constants"}>
// GENERIC: "graph.constant"() <{value = dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>}> : () -> tensor<2xf32>
// GENERIC: "graph.constant"() <{value = dense<5.000000e-01> : tensor<2xbf16>}> : () -> tensor<2xbf16>
// GENERIC: "graph.constant"() <{value = dense<{{\[\[}}1, 2], [3, 4]]> : tensor<2x2xi32>}> : () -> tensor<2x2xi32>
graph.model @constants {
  func.func @forward() {
    %a = graph.constant dense<[1.0, 2.0]> : tensor<2xf32>
    %b = graph.constant dense<0.5> : tensor<2xbf16>
    %c = graph.constant dense<[[1, 2], [3, 4]]> : tensor<2x2xi32>
    %d = graph.constant dense<7> : tensor<3xi64>
    %e = graph.constant dense<2.0> : tensor<f32>
    %f = graph.constant dense<[1.0, -2.0]> : tensor<2xf16>
    %l = graph.mse_loss %a, %a : tensor<2xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// CHECK-LABEL: graph.model @casts {
// CHECK: %[[X:.+]] = graph.get_input @x : tensor<4x8xf32>
// CHECK: %[[Y:.+]] = graph.get_input @labels : tensor<4xi64>
// CHECK: %[[H:.+]] = graph.cast %[[X]] : tensor<4x8xf32> -> tensor<4x8xbf16>
// CHECK: %[[F:.+]] = graph.cast %[[H]] : tensor<4x8xbf16> -> tensor<4x8xf32>
// CHECK: %[[I:.+]] = graph.cast %[[X]] : tensor<4x8xf32> -> tensor<4x8xi32>
// CHECK: %[[G:.+]] = graph.cast %[[Y]] : tensor<4xi64> -> tensor<4xf16>
// CHECK: %[[L:.+]] = graph.mse_loss %[[F]], %[[X]] : tensor<4x8xf32>
graph.model @casts {
  graph.input @x : tensor<4x8xf32>
  graph.input @labels : tensor<4xi64>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %y = graph.get_input @labels : tensor<4xi64>
    %h = graph.cast %x : tensor<4x8xf32> -> tensor<4x8xbf16>
    %f = graph.cast %h : tensor<4x8xbf16> -> tensor<4x8xf32>
    %i = graph.cast %x : tensor<4x8xf32> -> tensor<4x8xi32>
    %g = graph.cast %y : tensor<4xi64> -> tensor<4xf16>
    %l = graph.mse_loss %f, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// Same shapes, a missing leading dimension, 1 against 8 on both sides, and a scalar.
// CHECK-LABEL: graph.model @binary {
// CHECK: %[[X:.+]] = graph.get_input @x : tensor<4x8xf32>
// CHECK: %[[B:.+]] = graph.get_input @b : tensor<8xf32>
// CHECK: %[[C:.+]] = graph.get_input @c : tensor<4x1xf32>
// CHECK: %[[S:.+]] = graph.get_input @s : tensor<f32>
// CHECK: %[[ADD:.+]] = graph.add %[[X]], %[[X]] : tensor<4x8xf32>, tensor<4x8xf32>
// CHECK: %[[SUB:.+]] = graph.sub %[[ADD]], %[[B]] : tensor<4x8xf32>, tensor<8xf32>
// CHECK: %[[MUL:.+]] = graph.mul %[[C]], %[[B]] : tensor<4x1xf32>, tensor<8xf32>
// CHECK: %[[DIV:.+]] = graph.div %[[MUL]], %[[S]] : tensor<4x8xf32>, tensor<f32>
// CHECK: %[[H:.+]] = graph.add %[[S]], %[[S]] : tensor<f32>, tensor<f32>
// CHECK: %[[L:.+]] = graph.mse_loss %[[DIV]], %[[SUB]] : tensor<4x8xf32>

// GENERIC-LABEL: "graph.model"() <{sym_name = "binary"}>
// GENERIC: "graph.add"(%{{.+}}, %{{.+}}) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// GENERIC: "graph.sub"(%{{.+}}, %{{.+}}) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// GENERIC: "graph.mul"(%{{.+}}, %{{.+}}) : (tensor<4x1xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// GENERIC: "graph.div"(%{{.+}}, %{{.+}}) : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
// GENERIC: "graph.add"(%{{.+}}, %{{.+}}) : (tensor<f32>, tensor<f32>) -> tensor<f32>
graph.model @binary {
  graph.input @x : tensor<4x8xf32>
  graph.input @b : tensor<8xf32>
  graph.input @c : tensor<4x1xf32>
  graph.input @s : tensor<f32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %b = graph.get_input @b : tensor<8xf32>
    %c = graph.get_input @c : tensor<4x1xf32>
    %s = graph.get_input @s : tensor<f32>
    %add = graph.add %x, %x : tensor<4x8xf32>, tensor<4x8xf32>
    %sub = graph.sub %add, %b : tensor<4x8xf32>, tensor<8xf32>
    %mul = graph.mul %c, %b : tensor<4x1xf32>, tensor<8xf32>
    %div = graph.div %mul, %s : tensor<4x8xf32>, tensor<f32>
    %h = graph.add %s, %s : tensor<f32>, tensor<f32>
    %l = graph.mse_loss %div, %sub : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// Binary ops keep the operands' element type.
// CHECK-LABEL: graph.model @binary_bf16 {
// CHECK: %[[X:.+]] = graph.get_input @x : tensor<2x3xbf16>
// CHECK: %[[B:.+]] = graph.get_input @b : tensor<3xbf16>
// CHECK: %[[Y:.+]] = graph.mul %[[X]], %[[B]] : tensor<2x3xbf16>, tensor<3xbf16>
// CHECK: %[[L:.+]] = graph.mse_loss %[[Y]], %[[X]] : tensor<2x3xbf16>

// GENERIC-LABEL: "graph.model"() <{sym_name = "binary_bf16"}>
// GENERIC: "graph.mul"(%{{.+}}, %{{.+}}) : (tensor<2x3xbf16>, tensor<3xbf16>) -> tensor<2x3xbf16>
graph.model @binary_bf16 {
  graph.input @x : tensor<2x3xbf16>
  graph.input @b : tensor<3xbf16>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x3xbf16>
    %b = graph.get_input @b : tensor<3xbf16>
    %y = graph.mul %x, %b : tensor<2x3xbf16>, tensor<3xbf16>
    %l = graph.mse_loss %y, %x : tensor<2x3xbf16>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// CHECK-LABEL: graph.model @unary {
// CHECK: %[[X:.+]] = graph.get_input @x : tensor<4x8xf32>
// CHECK: %[[NEG:.+]] = graph.neg %[[X]] : tensor<4x8xf32>
// CHECK: %[[RELU:.+]] = graph.relu %[[NEG]] : tensor<4x8xf32>
// CHECK: %[[SILU:.+]] = graph.silu %[[RELU]] : tensor<4x8xf32>
// CHECK: %[[HSW:.+]] = graph.hardswish %[[SILU]] : tensor<4x8xf32>
// CHECK: %[[SIG:.+]] = graph.sigmoid %[[HSW]] : tensor<4x8xf32>
// CHECK: %[[HSIG:.+]] = graph.hardsigmoid %[[SIG]] : tensor<4x8xf32>
// CHECK: %[[SP:.+]] = graph.softplus %[[HSIG]] : tensor<4x8xf32>
// CHECK: %[[TANH:.+]] = graph.tanh %[[SP]] : tensor<4x8xf32>
// CHECK: %[[EXP:.+]] = graph.exp %[[TANH]] : tensor<4x8xf32>
// CHECK: %[[LOG:.+]] = graph.log %[[EXP]] : tensor<4x8xf32>
// CHECK: %[[SQRT:.+]] = graph.sqrt %[[LOG]] : tensor<4x8xf32>
// CHECK: %[[RSQRT:.+]] = graph.rsqrt %[[SQRT]] : tensor<4x8xf32>
// CHECK: %[[GT:.+]] = graph.gelu tanh %[[RSQRT]] : tensor<4x8xf32>
// CHECK: %[[GE:.+]] = graph.gelu erf %[[GT]] : tensor<4x8xf32>
// CHECK: %[[H:.+]] = graph.gelu erf %{{.+}} : tensor<4x8xf16>
// CHECK: %[[L:.+]] = graph.mse_loss %[[GE]], %[[X]] : tensor<4x8xf32>

// GENERIC-LABEL: "graph.model"() <{sym_name = "unary"}>
// GENERIC: "graph.gelu"(%{{.+}}) <{approximation = 1 : i32}> : (tensor<4x8xf32>) -> tensor<4x8xf32>
// GENERIC: "graph.gelu"(%{{.+}}) <{approximation = 0 : i32}> : (tensor<4x8xf32>) -> tensor<4x8xf32>
graph.model @unary {
  graph.input @x : tensor<4x8xf32>
  graph.input @h : tensor<4x8xf16>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %neg = graph.neg %x : tensor<4x8xf32>
    %relu = graph.relu %neg : tensor<4x8xf32>
    %silu = graph.silu %relu : tensor<4x8xf32>
    %hardswish = graph.hardswish %silu : tensor<4x8xf32>
    %sigmoid = graph.sigmoid %hardswish : tensor<4x8xf32>
    %hardsigmoid = graph.hardsigmoid %sigmoid : tensor<4x8xf32>
    %softplus = graph.softplus %hardsigmoid : tensor<4x8xf32>
    %tanh = graph.tanh %softplus : tensor<4x8xf32>
    %exp = graph.exp %tanh : tensor<4x8xf32>
    %log = graph.log %exp : tensor<4x8xf32>
    %sqrt = graph.sqrt %log : tensor<4x8xf32>
    %rsqrt = graph.rsqrt %sqrt : tensor<4x8xf32>
    %gt = graph.gelu tanh %rsqrt : tensor<4x8xf32>
    %ge = graph.gelu erf %gt : tensor<4x8xf32>
    %hin = graph.get_input @h : tensor<4x8xf16>
    %h = graph.gelu erf %hin : tensor<4x8xf16>
    %l = graph.mse_loss %ge, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// CHECK-LABEL: graph.model @dropout {
// CHECK: %[[X:.+]] = graph.get_input @x : tensor<4x8xf32>
// CHECK: %[[D:.+]] = graph.dropout %[[X]] {p = 1.000000e-01 : f64} : tensor<4x8xf32>
// CHECK: %[[Z:.+]] = graph.dropout %[[D]] {p = 0.000000e+00 : f64} : tensor<4x8xf32>
// CHECK: %[[L:.+]] = graph.mse_loss %[[Z]], %[[X]] : tensor<4x8xf32>

// GENERIC-LABEL: "graph.model"() <{sym_name = "dropout"}>
// GENERIC: "graph.dropout"(%{{.+}}) <{p = 1.000000e-01 : f64}> : (tensor<4x8xf32>) -> tensor<4x8xf32>
graph.model @dropout {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %d = graph.dropout %x {p = 0.1 : f64} : tensor<4x8xf32>
    %z = graph.dropout %d {p = 0.0 : f64} : tensor<4x8xf32>
    %l = graph.mse_loss %z, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// A 3-D activation times a 2-D weight, batched q k^T, batched q^T q, and batch dimensions
// [1, 3] x [2, 1] broadcasting to [2, 3] with both operands transposed.
// CHECK-LABEL: graph.model @matmul {
// CHECK: %[[X:.+]] = graph.get_input @x : tensor<2x3x4xf32>
// CHECK: %[[W:.+]] = graph.get_input @w : tensor<4x5xf32>
// CHECK: %[[Q:.+]] = graph.get_input @q : tensor<2x4x8x16xf32>
// CHECK: %[[A:.+]] = graph.get_input @a : tensor<1x3x4x6xf32>
// CHECK: %[[B:.+]] = graph.get_input @b : tensor<2x1x5x4xf32>
// CHECK: %[[P:.+]] = graph.matmul %[[X]], %[[W]] : tensor<2x3x4xf32>, tensor<4x5xf32>
// CHECK: %[[S:.+]] = graph.matmul %[[Q]], %[[Q]] transpose_rhs : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>
// CHECK: %[[G:.+]] = graph.matmul %[[Q]], %[[Q]] transpose_lhs : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>
// CHECK: %[[T:.+]] = graph.matmul %[[A]], %[[B]] transpose_lhs transpose_rhs : tensor<1x3x4x6xf32>, tensor<2x1x5x4xf32>
// CHECK: %[[L:.+]] = graph.sum %[[T]] axes [0, 1, 2, 3] : tensor<2x3x6x5xf32>

// GENERIC-LABEL: "graph.model"() <{sym_name = "matmul"}>
// GENERIC: "graph.matmul"(%{{.+}}, %{{.+}}) : (tensor<2x3x4xf32>, tensor<4x5xf32>) -> tensor<2x3x5xf32>
// GENERIC: "graph.matmul"(%{{.+}}, %{{.+}}) <{transpose_rhs}> : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x8xf32>
// GENERIC: "graph.matmul"(%{{.+}}, %{{.+}}) <{transpose_lhs}> : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x16x16xf32>
// GENERIC: "graph.matmul"(%{{.+}}, %{{.+}}) <{transpose_lhs, transpose_rhs}> : (tensor<1x3x4x6xf32>, tensor<2x1x5x4xf32>) -> tensor<2x3x6x5xf32>
graph.model @matmul {
  graph.input @x : tensor<2x3x4xf32>
  graph.input @w : tensor<4x5xf32>
  graph.input @q : tensor<2x4x8x16xf32>
  graph.input @a : tensor<1x3x4x6xf32>
  graph.input @b : tensor<2x1x5x4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x3x4xf32>
    %w = graph.get_input @w : tensor<4x5xf32>
    %q = graph.get_input @q : tensor<2x4x8x16xf32>
    %a = graph.get_input @a : tensor<1x3x4x6xf32>
    %b = graph.get_input @b : tensor<2x1x5x4xf32>
    %p = graph.matmul %x, %w : tensor<2x3x4xf32>, tensor<4x5xf32>
    %s = graph.matmul %q, %q transpose_rhs : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>
    %g = graph.matmul %q, %q transpose_lhs : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>
    %t = graph.matmul %a, %b transpose_lhs transpose_rhs : tensor<1x3x4x6xf32>, tensor<2x1x5x4xf32>
    %l = graph.sum %t axes [0, 1, 2, 3] : tensor<2x3x6x5xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// CHECK-LABEL: graph.model @transpose {
// CHECK: %[[X:.+]] = graph.get_input @x : tensor<2x8x4x16xf32>
// CHECK: %[[T:.+]] = graph.transpose %[[X]] [0, 2, 1, 3] : tensor<2x8x4x16xf32>
// CHECK: %[[I:.+]] = graph.transpose %{{.+}} [1, 0] : tensor<3x5xi32>
// CHECK: %[[L:.+]] = graph.sum %[[T]] axes [0, 1, 2, 3] : tensor<2x4x8x16xf32>

// GENERIC-LABEL: "graph.model"() <{sym_name = "transpose"}>
// GENERIC: "graph.transpose"(%{{.+}}) <{permutation = array<i64: 0, 2, 1, 3>}> : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
// GENERIC: "graph.transpose"(%{{.+}}) <{permutation = array<i64: 1, 0>}> : (tensor<3x5xi32>) -> tensor<5x3xi32>
graph.model @transpose {
  graph.input @x : tensor<2x8x4x16xf32>
  graph.input @ids : tensor<3x5xi32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x8x4x16xf32>
    %ids = graph.get_input @ids : tensor<3x5xi32>
    %t = graph.transpose %x [0, 2, 1, 3] : tensor<2x8x4x16xf32>
    %i = graph.transpose %ids [1, 0] : tensor<3x5xi32>
    %l = graph.sum %t axes [0, 1, 2, 3] : tensor<2x4x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// CHECK-LABEL: graph.model @reshape_broadcast {
// CHECK: %[[X:.+]] = graph.get_input @x : tensor<2x8x64xf32>
// CHECK: %[[B:.+]] = graph.get_input @b : tensor<8xf32>
// CHECK: %[[R:.+]] = graph.reshape %[[X]] : tensor<2x8x64xf32> -> tensor<2x8x4x16xf32>
// CHECK: %[[F:.+]] = graph.reshape %[[X]] : tensor<2x8x64xf32> -> tensor<1024xf32>
// CHECK: %[[BB:.+]] = graph.broadcast %[[B]] : tensor<8xf32> -> tensor<2x4x8xf32>
// CHECK: %[[BC:.+]] = graph.broadcast %{{.+}} : tensor<4x1xf32> -> tensor<3x4x8xf32>
// CHECK: %[[L:.+]] = graph.sum %[[R]] axes [0, 1, 2, 3] : tensor<2x8x4x16xf32>
graph.model @reshape_broadcast {
  graph.input @x : tensor<2x8x64xf32>
  graph.input @b : tensor<8xf32>
  graph.input @c : tensor<4x1xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x8x64xf32>
    %b = graph.get_input @b : tensor<8xf32>
    %r = graph.reshape %x : tensor<2x8x64xf32> -> tensor<2x8x4x16xf32>
    %f = graph.reshape %x : tensor<2x8x64xf32> -> tensor<1024xf32>
    %bb = graph.broadcast %b : tensor<8xf32> -> tensor<2x4x8xf32>
    %c = graph.get_input @c : tensor<4x1xf32>
    %bc = graph.broadcast %c : tensor<4x1xf32> -> tensor<3x4x8xf32>
    %l = graph.sum %r axes [0, 1, 2, 3] : tensor<2x8x4x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// CHECK-LABEL: graph.model @slice_split_concat {
// CHECK: %[[X:.+]] = graph.get_input @x : tensor<2x8x64xf32>
// CHECK: %[[S:.+]] = graph.slice %[[X]] starts [0, 0, 8] sizes [2, 4, 8] : tensor<2x8x64xf32>
// CHECK: %[[P:.+]]:3 = graph.split %[[X]] axis 2 sizes [16, 16, 32] : tensor<2x8x64xf32>
// CHECK: %[[C:.+]] = graph.concat %[[P]]#2, %[[P]]#0, %[[P]]#1 axis 2 : tensor<2x8x32xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
// CHECK: %[[ONE:.+]] = graph.concat %[[S]] axis 0 : tensor<2x4x8xf32>
// CHECK: %[[L:.+]] = graph.mse_loss %[[C]], %[[X]] : tensor<2x8x64xf32>

// GENERIC-LABEL: "graph.model"() <{sym_name = "slice_split_concat"}>
// GENERIC: "graph.slice"(%{{.+}}) <{sizes = array<i64: 2, 4, 8>, starts = array<i64: 0, 0, 8>}> : (tensor<2x8x64xf32>) -> tensor<2x4x8xf32>
// GENERIC: "graph.split"(%{{.+}}) <{axis = 2 : i64, sizes = array<i64: 16, 16, 32>}> : (tensor<2x8x64xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x32xf32>)
// GENERIC: "graph.concat"(%{{.+}}, %{{.+}}, %{{.+}}) <{axis = 2 : i64}> : (tensor<2x8x32xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x64xf32>
// GENERIC: "graph.concat"(%{{.+}}) <{axis = 0 : i64}> : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
graph.model @slice_split_concat {
  graph.input @x : tensor<2x8x64xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x8x64xf32>
    %s = graph.slice %x starts [0, 0, 8] sizes [2, 4, 8] : tensor<2x8x64xf32>
    %p:3 = graph.split %x axis 2 sizes [16, 16, 32] : tensor<2x8x64xf32>
    %c = graph.concat %p#2, %p#0, %p#1 axis 2 : tensor<2x8x32xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
    %one = graph.concat %s axis 0 : tensor<2x4x8xf32>
    %l = graph.mse_loss %c, %x : tensor<2x8x64xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// CHECK-LABEL: graph.model @reductions {
// CHECK: %[[X:.+]] = graph.get_input @x : tensor<2x3x4xf32>
// CHECK: %[[S:.+]] = graph.sum %[[X]] axes [1] : tensor<2x3x4xf32>
// CHECK: %[[SK:.+]] = graph.sum %[[X]] axes [1] keepdims : tensor<2x3x4xf32>
// CHECK: %[[M:.+]] = graph.mean %[[X]] axes [0, 2] : tensor<2x3x4xf32>
// CHECK: %[[MK:.+]] = graph.mean %[[X]] axes [0, 2] keepdims : tensor<2x3x4xf32>
// CHECK: %[[X1:.+]] = graph.max %[[X]] axes [2] : tensor<2x3x4xf32>
// CHECK: %[[XK:.+]] = graph.max %[[X]] axes [0, 1, 2] keepdims : tensor<2x3x4xf32>
// The keepdims results feed ops whose operand types the custom form prints.
// CHECK: %{{.+}} = graph.sum %[[SK]] axes [0, 1, 2] : tensor<2x1x4xf32>
// CHECK: %{{.+}} = graph.mean %[[MK]] axes [1] : tensor<1x3x1xf32>
// CHECK: %{{.+}} = graph.max %[[XK]] axes [0] : tensor<1x1x1xf32>
// CHECK: %[[L:.+]] = graph.sum %[[X]] axes [0, 1, 2] : tensor<2x3x4xf32>
// CHECK: graph.loss %[[L]] : tensor<f32>

// GENERIC-LABEL: "graph.model"() <{sym_name = "reductions"}>
// GENERIC: "graph.sum"(%{{.+}}) <{axes = array<i64: 1>}> : (tensor<2x3x4xf32>) -> tensor<2x4xf32>
// GENERIC: "graph.sum"(%{{.+}}) <{axes = array<i64: 1>, keepdims}> : (tensor<2x3x4xf32>) -> tensor<2x1x4xf32>
// GENERIC: "graph.mean"(%{{.+}}) <{axes = array<i64: 0, 2>}> : (tensor<2x3x4xf32>) -> tensor<3xf32>
// GENERIC: "graph.mean"(%{{.+}}) <{axes = array<i64: 0, 2>, keepdims}> : (tensor<2x3x4xf32>) -> tensor<1x3x1xf32>
// GENERIC: "graph.max"(%{{.+}}) <{axes = array<i64: 2>}> : (tensor<2x3x4xf32>) -> tensor<2x3xf32>
// GENERIC: "graph.max"(%{{.+}}) <{axes = array<i64: 0, 1, 2>, keepdims}> : (tensor<2x3x4xf32>) -> tensor<1x1x1xf32>
// GENERIC: "graph.sum"(%{{.+}}) <{axes = array<i64: 0, 1, 2>}> : (tensor<2x1x4xf32>) -> tensor<f32>
// GENERIC: "graph.mean"(%{{.+}}) <{axes = array<i64: 1>}> : (tensor<1x3x1xf32>) -> tensor<1x1xf32>
// GENERIC: "graph.max"(%{{.+}}) <{axes = array<i64: 0>}> : (tensor<1x1x1xf32>) -> tensor<1x1xf32>
graph.model @reductions {
  graph.input @x : tensor<2x3x4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x3x4xf32>
    %s = graph.sum %x axes [1] : tensor<2x3x4xf32>
    %sk = graph.sum %x axes [1] keepdims : tensor<2x3x4xf32>
    %m = graph.mean %x axes [0, 2] : tensor<2x3x4xf32>
    %mk = graph.mean %x axes [0, 2] keepdims : tensor<2x3x4xf32>
    %x1 = graph.max %x axes [2] : tensor<2x3x4xf32>
    %xk = graph.max %x axes [0, 1, 2] keepdims : tensor<2x3x4xf32>
    %a = graph.sum %sk axes [0, 1, 2] : tensor<2x1x4xf32>
    %b = graph.mean %mk axes [1] : tensor<1x3x1xf32>
    %c = graph.max %xk axes [0] : tensor<1x1x1xf32>
    %l = graph.sum %x axes [0, 1, 2] : tensor<2x3x4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// CHECK-LABEL: graph.model @embedding {
// CHECK: graph.param @wte : tensor<16x8xf32> init #graph.normal<mean = {{0\.0|0\.000000e\+00}}, std = {{0\.02|2\.000000e-02}}>
// CHECK: %[[WTE:.+]] = graph.get_param @wte : tensor<16x8xf32>
// CHECK: %[[TOK:.+]] = graph.get_input @tokens : tensor<2x4xi32>
// CHECK: %[[IDS:.+]] = graph.get_input @ids : tensor<3xi64>
// CHECK: %[[E:.+]] = graph.embedding %[[WTE]][%[[TOK]]] : tensor<16x8xf32>, tensor<2x4xi32>
// CHECK: %[[F:.+]] = graph.embedding %[[WTE]][%[[IDS]]] : tensor<16x8xf32>, tensor<3xi64>
// CHECK: %[[L:.+]] = graph.sum %[[E]] axes [0, 1, 2] : tensor<2x4x8xf32>

// GENERIC-LABEL: "graph.model"() <{sym_name = "embedding"}>
// GENERIC: "graph.embedding"(%{{.+}}, %{{.+}}) : (tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
// GENERIC: "graph.embedding"(%{{.+}}, %{{.+}}) : (tensor<16x8xf32>, tensor<3xi64>) -> tensor<3x8xf32>
graph.model @embedding {
  graph.param @wte : tensor<16x8xf32> init #graph.normal<std = 0.02>
  graph.input @tokens : tensor<2x4xi32>
  graph.input @ids : tensor<3xi64>
  func.func @forward() {
    %wte = graph.get_param @wte : tensor<16x8xf32>
    %tokens = graph.get_input @tokens : tensor<2x4xi32>
    %ids = graph.get_input @ids : tensor<3xi64>
    %e = graph.embedding %wte[%tokens] : tensor<16x8xf32>, tensor<2x4xi32>
    %f = graph.embedding %wte[%ids] : tensor<16x8xf32>, tensor<3xi64>
    %l = graph.sum %e axes [0, 1, 2] : tensor<2x4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// The default epsilon (1e-5) is not printed; an explicit one is. A bf16 x with f32 gains gives
// a bf16 result (graph-assign-precision's form: f32 compute from the bf16 residual stream).
// CHECK-LABEL: graph.model @norms {
// CHECK: %[[G:.+]] = graph.get_param @g : tensor<8xf32>
// CHECK: %[[B:.+]] = graph.get_param @b : tensor<8xf32>
// CHECK: %[[X:.+]] = graph.get_input @x : tensor<2x4x8xf32>
// CHECK: %[[LN:.+]] = graph.layernorm %[[X]], %[[G]], %[[B]] : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
// CHECK: %[[LN2:.+]] = graph.layernorm %[[LN]], %[[G]], %[[B]] {epsilon = 9.9999999999999995E-7 : f64} : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
// CHECK: %[[RMS:.+]] = graph.rmsnorm %[[LN2]], %[[G]] : tensor<2x4x8xf32>, tensor<8xf32>
// CHECK: %[[RMS2:.+]] = graph.rmsnorm %[[RMS]], %[[G]] {epsilon = 9.9999999999999995E-7 : f64} : tensor<2x4x8xf32>, tensor<8xf32>
// CHECK: %[[H:.+]] = graph.get_input @h : tensor<2x4x8xbf16>
// CHECK: graph.layernorm %[[H]], %[[G]], %[[B]] : tensor<2x4x8xbf16>, tensor<8xf32>, tensor<8xf32>
// CHECK: graph.rmsnorm %[[H]], %[[G]] : tensor<2x4x8xbf16>, tensor<8xf32>
// CHECK: %[[L:.+]] = graph.mse_loss %[[RMS2]], %[[X]] : tensor<2x4x8xf32>

// GENERIC-LABEL: "graph.model"() <{sym_name = "norms"}>
// GENERIC: "graph.layernorm"(%{{.+}}, %{{.+}}, %{{.+}}) <{epsilon = 1.000000e-05 : f64}> : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
// GENERIC: "graph.layernorm"(%{{.+}}, %{{.+}}, %{{.+}}) <{epsilon = 9.9999999999999995E-7 : f64}> : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
// GENERIC: "graph.rmsnorm"(%{{.+}}, %{{.+}}) <{epsilon = 1.000000e-05 : f64}> : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
// GENERIC: "graph.rmsnorm"(%{{.+}}, %{{.+}}) <{epsilon = 9.9999999999999995E-7 : f64}> : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
// GENERIC: "graph.layernorm"(%{{.+}}, %{{.+}}, %{{.+}}) <{epsilon = 1.000000e-05 : f64}> : (tensor<2x4x8xbf16>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xbf16>
// GENERIC: "graph.rmsnorm"(%{{.+}}, %{{.+}}) <{epsilon = 1.000000e-05 : f64}> : (tensor<2x4x8xbf16>, tensor<8xf32>) -> tensor<2x4x8xbf16>
graph.model @norms {
  graph.param @g : tensor<8xf32> init #graph.ones
  graph.param @b : tensor<8xf32> init #graph.zeros
  graph.input @x : tensor<2x4x8xf32>
  graph.input @h : tensor<2x4x8xbf16>
  func.func @forward() {
    %g = graph.get_param @g : tensor<8xf32>
    %b = graph.get_param @b : tensor<8xf32>
    %x = graph.get_input @x : tensor<2x4x8xf32>
    %ln = graph.layernorm %x, %g, %b : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
    %ln2 = graph.layernorm %ln, %g, %b {epsilon = 1.0e-06 : f64} : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
    %rms = graph.rmsnorm %ln2, %g : tensor<2x4x8xf32>, tensor<8xf32>
    %rms2 = graph.rmsnorm %rms, %g {epsilon = 1.0e-06 : f64} : tensor<2x4x8xf32>, tensor<8xf32>
    %h = graph.get_input @h : tensor<2x4x8xbf16>
    %hln = graph.layernorm %h, %g, %b : tensor<2x4x8xbf16>, tensor<8xf32>, tensor<8xf32>
    %hrms = graph.rmsnorm %h, %g : tensor<2x4x8xbf16>, tensor<8xf32>
    %l = graph.mse_loss %rms2, %x : tensor<2x4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// Plain softmax, causal on square scores (T = S = 8), and causal with S = 12 > T = 4.
// CHECK-LABEL: graph.model @softmax {
// CHECK: %[[X:.+]] = graph.get_input @x : tensor<2x4x8x8xf32>
// CHECK: %[[Y:.+]] = graph.get_input @y : tensor<2x4x12xf32>
// CHECK: %[[P:.+]] = graph.softmax %[[X]] : tensor<2x4x8x8xf32>
// CHECK: %[[C:.+]] = graph.softmax %[[P]] causal : tensor<2x4x8x8xf32>
// CHECK: %[[R:.+]] = graph.softmax %[[Y]] causal : tensor<2x4x12xf32>
// CHECK: %[[L:.+]] = graph.mse_loss %[[C]], %[[X]] : tensor<2x4x8x8xf32>

// GENERIC-LABEL: "graph.model"() <{sym_name = "softmax"}>
// GENERIC: "graph.softmax"(%{{.+}}) : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
// GENERIC: "graph.softmax"(%{{.+}}) <{causal}> : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
// GENERIC: "graph.softmax"(%{{.+}}) <{causal}> : (tensor<2x4x12xf32>) -> tensor<2x4x12xf32>
graph.model @softmax {
  graph.input @x : tensor<2x4x8x8xf32>
  graph.input @y : tensor<2x4x12xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x8x8xf32>
    %y = graph.get_input @y : tensor<2x4x12xf32>
    %p = graph.softmax %x : tensor<2x4x8x8xf32>
    %c = graph.softmax %p causal : tensor<2x4x8x8xf32>
    %r = graph.softmax %y causal : tensor<2x4x12xf32>
    %l = graph.mse_loss %c, %x : tensor<2x4x8x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// q [.., T = 8, 16], k [.., S = 12, 16], v [.., 12, 32] -> [.., 8, 32].
// CHECK-LABEL: graph.model @attention {
// CHECK: %[[Q:.+]] = graph.get_input @q : tensor<2x4x8x16xf32>
// CHECK: %[[K:.+]] = graph.get_input @k : tensor<2x4x12x16xf32>
// CHECK: %[[V:.+]] = graph.get_input @v : tensor<2x4x12x32xf32>
// CHECK: %[[A:.+]] = graph.attention %[[Q]], %[[K]], %[[V]] : tensor<2x4x8x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x12x32xf32>
// CHECK: %[[B:.+]] = graph.attention %[[Q]], %[[Q]], %[[Q]] causal : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>
// CHECK: %[[C:.+]] = graph.attention %[[Q]], %[[K]], %[[V]] causal scale 1.250000e-01 : tensor<2x4x8x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x12x32xf32>
// CHECK: %[[D:.+]] = graph.attention %[[Q]], %[[K]], %[[K]] scale 2.500000e-01 : tensor<2x4x8x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x12x16xf32>
// CHECK: %[[L:.+]] = graph.sum %[[C]] axes [0, 1, 2, 3] : tensor<2x4x8x32xf32>

// GENERIC-LABEL: "graph.model"() <{sym_name = "attention"}>
// GENERIC: "graph.attention"(%{{.+}}, %{{.+}}, %{{.+}}) : (tensor<2x4x8x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x12x32xf32>) -> tensor<2x4x8x32xf32>
// GENERIC: "graph.attention"(%{{.+}}, %{{.+}}, %{{.+}}) <{causal}> : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
// GENERIC: "graph.attention"(%{{.+}}, %{{.+}}, %{{.+}}) <{causal, scale = 1.250000e-01 : f64}> : (tensor<2x4x8x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x12x32xf32>) -> tensor<2x4x8x32xf32>
// GENERIC: "graph.attention"(%{{.+}}, %{{.+}}, %{{.+}}) <{scale = 2.500000e-01 : f64}> : (tensor<2x4x8x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x12x16xf32>) -> tensor<2x4x8x16xf32>
graph.model @attention {
  graph.input @q : tensor<2x4x8x16xf32>
  graph.input @k : tensor<2x4x12x16xf32>
  graph.input @v : tensor<2x4x12x32xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x4x8x16xf32>
    %k = graph.get_input @k : tensor<2x4x12x16xf32>
    %v = graph.get_input @v : tensor<2x4x12x32xf32>
    %a = graph.attention %q, %k, %v : tensor<2x4x8x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x12x32xf32>
    %b = graph.attention %q, %q, %q causal : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>
    %c = graph.attention %q, %k, %v causal scale 0.125 : tensor<2x4x8x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x12x32xf32>
    %d = graph.attention %q, %k, %k scale 0.25 : tensor<2x4x8x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x12x16xf32>
    %l = graph.sum %c axes [0, 1, 2, 3] : tensor<2x4x8x32xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// qkv [.., T = 8, 3 x 4 heads x 16] -> [.., 8, 64]; with_lse adds the f32 [.., 4, 8].
// CHECK-LABEL: graph.model @qkv_attention {
// CHECK: %[[X:.+]] = graph.get_input @qkv : tensor<2x8x192xbf16>
// CHECK: %[[A:.+]] = graph.qkv_attention %[[X]] heads 4 : tensor<2x8x192xbf16>
// CHECK: %[[B:.+]], %[[LSE:.+]] = graph.qkv_attention %[[X]] heads 4 causal scale 1.250000e-01 with_lse : tensor<2x8x192xbf16>
// CHECK: %[[C:.+]] = graph.qkv_attention %[[X]] heads 2 causal : tensor<2x8x192xbf16>

// GENERIC-LABEL: "graph.model"() <{sym_name = "qkv_attention"}>
// GENERIC: "graph.qkv_attention"(%{{.+}}) <{heads = 4 : i64}> : (tensor<2x8x192xbf16>) -> tensor<2x8x64xbf16>
// GENERIC: "graph.qkv_attention"(%{{.+}}) <{causal, heads = 4 : i64, scale = 1.250000e-01 : f64, with_lse}> : (tensor<2x8x192xbf16>) -> (tensor<2x8x64xbf16>, tensor<2x4x8xf32>)
// GENERIC: "graph.qkv_attention"(%{{.+}}) <{causal, heads = 2 : i64}> : (tensor<2x8x192xbf16>) -> tensor<2x8x64xbf16>
graph.model @qkv_attention {
  graph.input @qkv : tensor<2x8x192xbf16>
  func.func @forward() {
    %x = graph.get_input @qkv : tensor<2x8x192xbf16>
    %a = graph.qkv_attention %x heads 4 : tensor<2x8x192xbf16>
    %b, %lse = graph.qkv_attention %x heads 4 causal scale 0.125 with_lse : tensor<2x8x192xbf16>
    %c = graph.qkv_attention %x heads 2 causal : tensor<2x8x192xbf16>
    %d = graph.add %a, %c : tensor<2x8x64xbf16>, tensor<2x8x64xbf16>
    %e = graph.cast %d : tensor<2x8x64xbf16> -> tensor<2x8x64xf32>
    %l = graph.sum %e axes [0, 1, 2] : tensor<2x8x64xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// with_lse: a second result, the f32 row log-sum-exp [.., T].
// CHECK-LABEL: graph.model @attention_with_lse {
// CHECK: %[[Q:.+]] = graph.get_input @q : tensor<2x4x8x16xbf16>
// CHECK: %[[O:.+]], %[[LSE:.+]] = graph.attention %[[Q]], %[[Q]], %[[Q]] causal with_lse : tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>
// CHECK: %[[P:.+]], %[[M:.+]] = graph.attention %[[Q]], %[[Q]], %[[Q]] scale 2.500000e-01 with_lse : tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>
// CHECK: graph.sum %[[LSE]] axes [0, 1, 2] : tensor<2x4x8xf32>

// GENERIC-LABEL: "graph.model"() <{sym_name = "attention_with_lse"}>
// GENERIC: "graph.attention"(%{{.+}}, %{{.+}}, %{{.+}}) <{causal, with_lse}> : (tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>) -> (tensor<2x4x8x16xbf16>, tensor<2x4x8xf32>)
// GENERIC: "graph.attention"(%{{.+}}, %{{.+}}, %{{.+}}) <{scale = 2.500000e-01 : f64, with_lse}> : (tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>) -> (tensor<2x4x8x16xbf16>, tensor<2x4x8xf32>)
graph.model @attention_with_lse {
  graph.input @q : tensor<2x4x8x16xbf16>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x4x8x16xbf16>
    %o, %lse = graph.attention %q, %q, %q causal with_lse : tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>
    %p, %m = graph.attention %q, %q, %q scale 0.25 with_lse : tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>
    %l = graph.sum %lse axes [0, 1, 2] : tensor<2x4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// Default ignore_index (-100) and reduction (mean) are not printed; explicit values are.
// CHECK-LABEL: graph.model @losses {
// CHECK: %[[LOGITS:.+]] = graph.get_input @logits : tensor<2x4x16xf32>
// CHECK: %[[LABELS:.+]] = graph.get_input @labels : tensor<2x4xi32>
// CHECK: %[[LABELS64:.+]] = graph.get_input @labels64 : tensor<2x4xi64>
// CHECK: %[[A:.+]] = graph.cross_entropy %[[LOGITS]], %[[LABELS]] : tensor<2x4x16xf32>, tensor<2x4xi32>{{$}}
// CHECK: %[[B:.+]] = graph.cross_entropy %[[LOGITS]], %[[LABELS64]] {ignore_index = 0 : i64} : tensor<2x4x16xf32>, tensor<2x4xi64>
// CHECK: %[[C:.+]] = graph.cross_entropy %[[LOGITS]], %[[LABELS]] {ignore_index = -1 : i64, reduction = 1 : i32} : tensor<2x4x16xf32>, tensor<2x4xi32>
// CHECK: %[[D:.+]] = graph.cross_entropy %[[LOGITS]], %[[LABELS]] {reduction = 1 : i32} : tensor<2x4x16xf32>, tensor<2x4xi32>
// CHECK: %[[E:.+]] = graph.cross_entropy %{{.+}}, %{{.+}} : tensor<16xbf16>, tensor<i64>
// CHECK: %[[M:.+]] = graph.mse_loss %[[LOGITS]], %[[LOGITS]] : tensor<2x4x16xf32>
// CHECK: %[[S:.+]] = graph.add %[[A]], %[[M]] : tensor<f32>, tensor<f32>
// CHECK: graph.loss %[[S]] : tensor<f32>

// GENERIC-LABEL: "graph.model"() <{sym_name = "losses"}>
// GENERIC: "graph.cross_entropy"(%{{.+}}, %{{.+}}) <{ignore_index = -100 : i64, reduction = 0 : i32}> : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
// GENERIC: "graph.cross_entropy"(%{{.+}}, %{{.+}}) <{ignore_index = 0 : i64, reduction = 0 : i32}> : (tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<f32>
// GENERIC: "graph.cross_entropy"(%{{.+}}, %{{.+}}) <{ignore_index = -1 : i64, reduction = 1 : i32}> : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
// GENERIC: "graph.cross_entropy"(%{{.+}}, %{{.+}}) <{ignore_index = -100 : i64, reduction = 1 : i32}> : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
// GENERIC: "graph.cross_entropy"(%{{.+}}, %{{.+}}) <{ignore_index = -100 : i64, reduction = 0 : i32}> : (tensor<16xbf16>, tensor<i64>) -> tensor<f32>
// GENERIC: "graph.mse_loss"(%{{.+}}, %{{.+}}) : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<f32>
graph.model @losses {
  graph.input @logits : tensor<2x4x16xf32>
  graph.input @labels : tensor<2x4xi32>
  graph.input @labels64 : tensor<2x4xi64>
  graph.input @one_logits : tensor<16xbf16>
  graph.input @one_label : tensor<i64>
  func.func @forward() {
    %logits = graph.get_input @logits : tensor<2x4x16xf32>
    %labels = graph.get_input @labels : tensor<2x4xi32>
    %labels64 = graph.get_input @labels64 : tensor<2x4xi64>
    %a = graph.cross_entropy %logits, %labels : tensor<2x4x16xf32>, tensor<2x4xi32>
    %b = graph.cross_entropy %logits, %labels64 {ignore_index = 0 : i64} : tensor<2x4x16xf32>, tensor<2x4xi64>
    %c = graph.cross_entropy %logits, %labels {ignore_index = -1 : i64, reduction = 1 : i32} : tensor<2x4x16xf32>, tensor<2x4xi32>
    %d = graph.cross_entropy %logits, %labels {reduction = 1 : i32} : tensor<2x4x16xf32>, tensor<2x4xi32>
    %one_logits = graph.get_input @one_logits : tensor<16xbf16>
    %one_label = graph.get_input @one_label : tensor<i64>
    %e = graph.cross_entropy %one_logits, %one_label : tensor<16xbf16>, tensor<i64>
    %m = graph.mse_loss %logits, %logits : tensor<2x4x16xf32>
    %s = graph.add %a, %m : tensor<f32>, tensor<f32>
    graph.loss %s : tensor<f32>
    return
  }
}

// -----

// A block written once as a private function and called from the entry function.
// CHECK-LABEL: graph.model @call {
// CHECK: func.func private @layer(%[[A:.+]]: tensor<2x4xf32>, %[[B:.+]]: tensor<4x4xf32>) -> tensor<2x4xf32> {
// CHECK: %[[Y:.+]] = graph.matmul %[[A]], %[[B]] : tensor<2x4xf32>, tensor<4x4xf32>
// CHECK: return %[[Y]] : tensor<2x4xf32>
// CHECK: func.func @forward() {
// CHECK: %[[W:.+]] = graph.get_param @w : tensor<4x4xf32>
// CHECK: %[[X:.+]] = graph.get_input @x : tensor<2x4xf32>
// CHECK: %[[H:.+]] = call @layer(%[[X]], %[[W]]) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
// CHECK: %[[L:.+]] = graph.mse_loss %[[H]], %[[X]] : tensor<2x4xf32>
// CHECK: graph.loss %[[L]] : tensor<f32>

// GENERIC-LABEL: "graph.model"() <{sym_name = "call"}>
// GENERIC: "func.func"() <{function_type = (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>, sym_name = "layer", sym_visibility = "private"}>
// GENERIC: "func.call"(%{{.+}}, %{{.+}}) <{callee = @layer}> : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
graph.model @call {
  graph.param @w : tensor<4x4xf32> init #graph.normal<std = 0.02>
  graph.input @x : tensor<2x4xf32>
  func.func private @layer(%x: tensor<2x4xf32>, %w: tensor<4x4xf32>) -> tensor<2x4xf32> {
    %y = graph.matmul %x, %w : tensor<2x4xf32>, tensor<4x4xf32>
    return %y : tensor<2x4xf32>
  }
  func.func @forward() {
    %w = graph.get_param @w : tensor<4x4xf32>
    %x = graph.get_input @x : tensor<2x4xf32>
    %h = func.call @layer(%x, %w) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %l = graph.mse_loss %h, %x : tensor<2x4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// CHECK-LABEL: graph.model @convolution {
// CHECK: %[[C:.+]] = graph.conv2d %[[X:.+]], %[[W:.+]] strides [2, 2] padding [1, 0, 2, 1] dilations [1, 2] : tensor<2x4x9x9xf32>, tensor<6x4x3x2xf32>
// CHECK: %[[D:.+]] = graph.conv2d %[[C]], %[[DW:.+]] groups 6 : tensor<2x6x5x4xf32>, tensor<12x1x1x1xf32>
// CHECK: %[[K:.+]] = graph.clip %[[D]] {max = 6.000000e+00 : f64, min = 0.000000e+00 : f64} : tensor<2x12x5x4xf32>
// CHECK: %[[M:.+]] = graph.max_pool2d %[[K]] kernel_size [3, 3] strides [2, 2] padding [1, 1, 1, 1] ceil_mode : tensor<2x12x5x4xf32>
// CHECK: %[[N:.+]] = graph.max_pool2d %[[K]] kernel_size [2, 2] strides [1, 1] dilations [2, 1] : tensor<2x12x5x4xf32>
// CHECK: %[[A:.+]] = graph.avg_pool2d %[[M]] kernel_size [2, 2] strides [2, 2] padding [1, 1, 1, 1] ceil_mode count_include_pad : tensor<2x12x3x3xf32>
// CHECK: graph.mean %[[A]] axes [2, 3] : tensor<2x12x2x2xf32>

// GENERIC-LABEL: "graph.model"() <{sym_name = "convolution"}>
// GENERIC: "graph.conv2d"(%{{.+}}, %{{.+}}) <{dilations = array<i64: 1, 2>, groups = 1 : i64, padding = array<i64: 1, 0, 2, 1>, strides = array<i64: 2, 2>}> : (tensor<2x4x9x9xf32>, tensor<6x4x3x2xf32>) -> tensor<2x6x5x4xf32>
// GENERIC: "graph.conv2d"(%{{.+}}, %{{.+}}) <{{.+}}groups = 6 : i64{{.+}}}> : (tensor<2x6x5x4xf32>, tensor<12x1x1x1xf32>) -> tensor<2x12x5x4xf32>
// GENERIC: "graph.max_pool2d"(%{{.+}}) <{{.+}}> : (tensor<2x12x5x4xf32>) -> tensor<2x12x3x3xf32>
// GENERIC: "graph.max_pool2d"(%{{.+}}) <{{.+}}> : (tensor<2x12x5x4xf32>) -> tensor<2x12x3x3xf32>
// GENERIC: "graph.avg_pool2d"(%{{.+}}) <{{.+}}> : (tensor<2x12x3x3xf32>) -> tensor<2x12x2x2xf32>
graph.model @convolution {
  graph.param @w : tensor<6x4x3x2xf32> init #graph.zeros
  graph.param @dw : tensor<12x1x1x1xf32> init #graph.zeros
  graph.input @x : tensor<2x4x9x9xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x9x9xf32>
    %w = graph.get_param @w : tensor<6x4x3x2xf32>
    %dw = graph.get_param @dw : tensor<12x1x1x1xf32>
    %c = graph.conv2d %x, %w strides [2, 2] padding [1, 0, 2, 1] dilations [1, 2] : tensor<2x4x9x9xf32>, tensor<6x4x3x2xf32>
    %d = graph.conv2d %c, %dw groups 6 : tensor<2x6x5x4xf32>, tensor<12x1x1x1xf32>
    %k = graph.clip %d {min = 0.0 : f64, max = 6.0 : f64} : tensor<2x12x5x4xf32>
    %m = graph.max_pool2d %k kernel_size [3, 3] strides [2, 2] padding [1, 1, 1, 1] ceil_mode : tensor<2x12x5x4xf32>
    %n = graph.max_pool2d %k kernel_size [2, 2] strides [1, 1] dilations [2, 1] : tensor<2x12x5x4xf32>
    %a = graph.avg_pool2d %m kernel_size [2, 2] strides [2, 2] padding [1, 1, 1, 1] ceil_mode count_include_pad : tensor<2x12x3x3xf32>
    %g = graph.mean %a axes [2, 3] : tensor<2x12x2x2xf32>
    %s = graph.sum %n axes [0, 1, 2, 3] : tensor<2x12x3x3xf32>
    %t = graph.sum %g axes [0, 1] : tensor<2x12xf32>
    %l = graph.add %s, %t : tensor<f32>, tensor<f32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// A batch norm with its running statistics: untrained parameters, updated in place.
// CHECK-LABEL: graph.model @batch_norm {
// CHECK: graph.param @bn.running_mean : tensor<4xf32> init #graph.zeros untrained
// CHECK: graph.param @bn.num_batches_tracked : tensor<f32> init #graph.zeros untrained
// CHECK: %[[Y:.+]] = graph.batch_norm %[[X:.+]], %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} {epsilon = 1.000000e-03 : f64} : tensor<2x4x3x3xbf16>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
// CHECK: graph.update_running_stats %[[X]] {count = @bn.num_batches_tracked, mean = @bn.running_mean, momentum = 1.000000e-01 : f64, var = @bn.running_var} : tensor<2x4x3x3xbf16>
// GENERIC-LABEL: "graph.model"() <{sym_name = "batch_norm"}>
// GENERIC: "graph.param"() <{init = #graph.zeros, sym_name = "bn.running_mean", type = tensor<4xf32>, untrained}>
// GENERIC: "graph.batch_norm"(%{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}) <{epsilon = 1.000000e-03 : f64}> : (tensor<2x4x3x3xbf16>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4x3x3xbf16>
graph.model @batch_norm {
  graph.param @bn.weight : tensor<4xf32> init #graph.ones
  graph.param @bn.bias : tensor<4xf32> init #graph.zeros
  graph.param @bn.running_mean : tensor<4xf32> init #graph.zeros untrained
  graph.param @bn.running_var : tensor<4xf32> init #graph.ones untrained
  graph.param @bn.num_batches_tracked : tensor<f32> init #graph.zeros untrained
  graph.input @x : tensor<2x4x3x3xbf16>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x3x3xbf16>
    %g = graph.get_param @bn.weight : tensor<4xf32>
    %b = graph.get_param @bn.bias : tensor<4xf32>
    %rm = graph.get_param @bn.running_mean : tensor<4xf32>
    %rv = graph.get_param @bn.running_var : tensor<4xf32>
    %y = graph.batch_norm %x, %g, %b, %rm, %rv {epsilon = 1.0e-03 : f64} : tensor<2x4x3x3xbf16>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
    graph.update_running_stats %x {momentum = 0.1 : f64, mean = @bn.running_mean, var = @bn.running_var, count = @bn.num_batches_tracked} : tensor<2x4x3x3xbf16>
    %l = graph.sum %y axes [0, 1, 2, 3] : tensor<2x4x3x3xbf16>
    graph.loss %l : tensor<bf16>
    return
  }
}
