// RUN: ampc-opt %s -split-input-file | ampc-opt -split-input-file | FileCheck %s
// RUN: ampc-opt %s -split-input-file -mlir-print-op-generic | ampc-opt -split-input-file | FileCheck %s
// RUN: ampc-opt %s -split-input-file -mlir-print-op-generic | FileCheck %s --check-prefix=GENERIC

// training-ops.mlir: round trip of the ops that graph-build-training writes: the gradient ops,
// the training state (graph.state, graph.grad_seed, graph.accumulate_grad) and the optimizer
// step (graph.global_norm, graph.lr_schedule, graph.adamw, graph.sgd), and the `stream`
// attribute of graph.dropout. The first RUN prints the custom form and parses it back; the second
// goes through the generic form. The GENERIC prefix checks the result types the custom form
// leaves out (inferred gradients, the f32 scalars of the optimizer step) and the default-valued
// attributes it does not print. Each case is a complete model with one graph.loss in its entry
// function; the optimizer ops sit in a separate @optimizer_step, as the pass writes them.

// The activation gradients and softmax_grad keep the type of their operands.
// CHECK-LABEL: graph.model @activation_grads {
// CHECK: %[[X:.+]] = graph.get_input @x : tensor<4x8xf32>
// CHECK: %[[DY:.+]] = graph.get_input @dy : tensor<4x8xf32>
// CHECK: %[[H:.+]] = graph.get_input @h : tensor<4x8xbf16>
// CHECK: %[[S:.+]] = graph.get_input @s : tensor<2x4x8x8xf32>
// CHECK: %[[RELU:.+]] = graph.relu_grad %[[X]], %[[DY]] : tensor<4x8xf32>
// CHECK: %[[SILU:.+]] = graph.silu_grad %[[X]], %[[RELU]] : tensor<4x8xf32>
// CHECK: %[[HSW:.+]] = graph.hardswish_grad %[[X]], %[[SILU]] : tensor<4x8xf32>
// CHECK: %[[SIG:.+]] = graph.sigmoid_grad %[[X]], %[[HSW]] : tensor<4x8xf32>
// CHECK: %[[HSIG:.+]] = graph.hardsigmoid_grad %[[X]], %[[SIG]] : tensor<4x8xf32>
// CHECK: %[[SP:.+]] = graph.softplus_grad %[[X]], %[[HSIG]] : tensor<4x8xf32>
// CHECK: %[[GT:.+]] = graph.gelu_grad tanh %[[X]], %[[SP]] : tensor<4x8xf32>
// CHECK: %[[GE:.+]] = graph.gelu_grad erf %[[X]], %[[GT]] : tensor<4x8xf32>
// CHECK: %[[GH:.+]] = graph.gelu_grad tanh %[[H]], %[[H]] : tensor<4x8xbf16>
// CHECK: %[[P:.+]] = graph.softmax %[[S]] causal : tensor<2x4x8x8xf32>
// CHECK: %[[SG:.+]] = graph.softmax_grad %[[P]], %[[S]] : tensor<2x4x8x8xf32>
// CHECK: %[[L:.+]] = graph.mse_loss %[[GE]], %[[X]] : tensor<4x8xf32>
// CHECK: graph.loss %[[L]] : tensor<f32>

// GENERIC-LABEL: "graph.model"() <{sym_name = "activation_grads"}>
// GENERIC: "graph.relu_grad"(%{{.+}}, %{{.+}}) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// GENERIC: "graph.silu_grad"(%{{.+}}, %{{.+}}) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// GENERIC: "graph.hardswish_grad"(%{{.+}}, %{{.+}}) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// GENERIC: "graph.gelu_grad"(%{{.+}}, %{{.+}}) <{approximation = 1 : i32}> : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// GENERIC: "graph.gelu_grad"(%{{.+}}, %{{.+}}) <{approximation = 0 : i32}> : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// GENERIC: "graph.gelu_grad"(%{{.+}}, %{{.+}}) <{approximation = 1 : i32}> : (tensor<4x8xbf16>, tensor<4x8xbf16>) -> tensor<4x8xbf16>
// GENERIC: "graph.softmax_grad"(%{{.+}}, %{{.+}}) : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
graph.model @activation_grads {
  graph.input @x : tensor<4x8xf32>
  graph.input @dy : tensor<4x8xf32>
  graph.input @h : tensor<4x8xbf16>
  graph.input @s : tensor<2x4x8x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %dy = graph.get_input @dy : tensor<4x8xf32>
    %h = graph.get_input @h : tensor<4x8xbf16>
    %s = graph.get_input @s : tensor<2x4x8x8xf32>
    %relu = graph.relu_grad %x, %dy : tensor<4x8xf32>
    %silu = graph.silu_grad %x, %relu : tensor<4x8xf32>
    %hardswish = graph.hardswish_grad %x, %silu : tensor<4x8xf32>
    %sigmoid = graph.sigmoid_grad %x, %hardswish : tensor<4x8xf32>
    %hardsigmoid = graph.hardsigmoid_grad %x, %sigmoid : tensor<4x8xf32>
    %softplus = graph.softplus_grad %x, %hardsigmoid : tensor<4x8xf32>
    %gt = graph.gelu_grad tanh %x, %softplus : tensor<4x8xf32>
    %ge = graph.gelu_grad erf %x, %gt : tensor<4x8xf32>
    %gh = graph.gelu_grad tanh %h, %h : tensor<4x8xbf16>
    %p = graph.softmax %s causal : tensor<2x4x8x8xf32>
    %sg = graph.softmax_grad %p, %s : tensor<2x4x8x8xf32>
    %l = graph.mse_loss %ge, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// pad undoes a slice ([2, 8] -> [2, 16] with 8 zeros in front of dimension 1), pads both ends
// of every dimension, keeps the element type, and accepts a scalar with no paddings.
// CHECK-LABEL: graph.model @pad {
// CHECK: %[[X:.+]] = graph.get_input @x : tensor<2x16xf32>
// CHECK: %[[H:.+]] = graph.get_input @h : tensor<3xbf16>
// CHECK: %[[S:.+]] = graph.get_input @s : tensor<f32>
// CHECK: %[[SL:.+]] = graph.slice %[[X]] starts [0, 8] sizes [2, 8] : tensor<2x16xf32>
// CHECK: %[[UNDO:.+]] = graph.pad %[[SL]] low [0, 8] high [0, 0] : tensor<2x8xf32>
// CHECK: %[[BOTH:.+]] = graph.pad %[[SL]] low [1, 2] high [3, 4] : tensor<2x8xf32>
// CHECK: %[[HP:.+]] = graph.pad %[[H]] low [0] high [5] : tensor<3xbf16>
// CHECK: %[[SP:.+]] = graph.pad %[[S]] low [] high [] : tensor<f32>
// CHECK: %[[L:.+]] = graph.mse_loss %[[UNDO]], %[[X]] : tensor<2x16xf32>

// GENERIC-LABEL: "graph.model"() <{sym_name = "pad"}>
// GENERIC: "graph.pad"(%{{.+}}) <{high = array<i64: 0, 0>, low = array<i64: 0, 8>}> : (tensor<2x8xf32>) -> tensor<2x16xf32>
// GENERIC: "graph.pad"(%{{.+}}) <{high = array<i64: 3, 4>, low = array<i64: 1, 2>}> : (tensor<2x8xf32>) -> tensor<6x14xf32>
// GENERIC: "graph.pad"(%{{.+}}) <{high = array<i64: 5>, low = array<i64: 0>}> : (tensor<3xbf16>) -> tensor<8xbf16>
// GENERIC: "graph.pad"(%{{.+}}) <{high = array<i64>, low = array<i64>}> : (tensor<f32>) -> tensor<f32>
graph.model @pad {
  graph.input @x : tensor<2x16xf32>
  graph.input @h : tensor<3xbf16>
  graph.input @s : tensor<f32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x16xf32>
    %h = graph.get_input @h : tensor<3xbf16>
    %s = graph.get_input @s : tensor<f32>
    %sl = graph.slice %x starts [0, 8] sizes [2, 8] : tensor<2x16xf32>
    %undo = graph.pad %sl low [0, 8] high [0, 0] : tensor<2x8xf32>
    %both = graph.pad %sl low [1, 2] high [3, 4] : tensor<2x8xf32>
    %hp = graph.pad %h low [0] high [5] : tensor<3xbf16>
    %sp = graph.pad %s low [] high [] : tensor<f32>
    %l = graph.mse_loss %undo, %x : tensor<2x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// The gradient of a max has the max's result shape: dropped axes, kept axes, and a scalar.
// CHECK-LABEL: graph.model @max_grad {
// CHECK: %[[X:.+]] = graph.get_input @x : tensor<2x3x4xf32>
// CHECK: %[[M:.+]] = graph.max %[[X]] axes [2] : tensor<2x3x4xf32>
// CHECK: %[[DM:.+]] = graph.max_grad %[[X]], %[[M]] axes [2] : tensor<2x3x4xf32>, tensor<2x3xf32>
// CHECK: %[[MK:.+]] = graph.max %[[X]] axes [0, 2] keepdims : tensor<2x3x4xf32>
// CHECK: %[[DK:.+]] = graph.max_grad %[[X]], %[[MK]] axes [0, 2] keepdims : tensor<2x3x4xf32>, tensor<1x3x1xf32>
// CHECK: %[[MA:.+]] = graph.max %[[X]] axes [0, 1, 2] : tensor<2x3x4xf32>
// CHECK: %[[DA:.+]] = graph.max_grad %[[X]], %[[MA]] axes [0, 1, 2] : tensor<2x3x4xf32>, tensor<f32>
// CHECK: %[[DH:.+]] = graph.max_grad %{{.+}}, %{{.+}} axes [1] : tensor<4x8xf16>, tensor<4xf16>
// CHECK: %[[L:.+]] = graph.mse_loss %[[DM]], %[[DK]] : tensor<2x3x4xf32>

// GENERIC-LABEL: "graph.model"() <{sym_name = "max_grad"}>
// GENERIC: "graph.max_grad"(%{{.+}}, %{{.+}}) <{axes = array<i64: 2>}> : (tensor<2x3x4xf32>, tensor<2x3xf32>) -> tensor<2x3x4xf32>
// GENERIC: "graph.max_grad"(%{{.+}}, %{{.+}}) <{axes = array<i64: 0, 2>, keepdims}> : (tensor<2x3x4xf32>, tensor<1x3x1xf32>) -> tensor<2x3x4xf32>
// GENERIC: "graph.max_grad"(%{{.+}}, %{{.+}}) <{axes = array<i64: 0, 1, 2>}> : (tensor<2x3x4xf32>, tensor<f32>) -> tensor<2x3x4xf32>
// GENERIC: "graph.max_grad"(%{{.+}}, %{{.+}}) <{axes = array<i64: 1>}> : (tensor<4x8xf16>, tensor<4xf16>) -> tensor<4x8xf16>
graph.model @max_grad {
  graph.input @x : tensor<2x3x4xf32>
  graph.input @h : tensor<4x8xf16>
  graph.input @dh : tensor<4xf16>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x3x4xf32>
    %m = graph.max %x axes [2] : tensor<2x3x4xf32>
    %dm = graph.max_grad %x, %m axes [2] : tensor<2x3x4xf32>, tensor<2x3xf32>
    %mk = graph.max %x axes [0, 2] keepdims : tensor<2x3x4xf32>
    %dk = graph.max_grad %x, %mk axes [0, 2] keepdims : tensor<2x3x4xf32>, tensor<1x3x1xf32>
    %ma = graph.max %x axes [0, 1, 2] : tensor<2x3x4xf32>
    %da = graph.max_grad %x, %ma axes [0, 1, 2] : tensor<2x3x4xf32>, tensor<f32>
    %h = graph.get_input @h : tensor<4x8xf16>
    %dhin = graph.get_input @dh : tensor<4xf16>
    %dh = graph.max_grad %h, %dhin axes [1] : tensor<4x8xf16>, tensor<4xf16>
    %l = graph.mse_loss %dm, %dk : tensor<2x3x4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// embedding_grad spells its result (the table's type, which the operands cannot tell); i32 and
// i64 ids of any rank, a scalar id included.
// CHECK-LABEL: graph.model @embedding_grad {
// CHECK: %[[WTE:.+]] = graph.get_param @wte : tensor<16x8xf32>
// CHECK: %[[TOK:.+]] = graph.get_input @tokens : tensor<2x4xi32>
// CHECK: %[[IDS:.+]] = graph.get_input @ids : tensor<3xi64>
// CHECK: %[[ONE:.+]] = graph.get_input @one : tensor<i64>
// CHECK: %[[DH:.+]] = graph.get_input @dh : tensor<3x8xbf16>
// CHECK: %[[E:.+]] = graph.embedding %[[WTE]][%[[TOK]]] : tensor<16x8xf32>, tensor<2x4xi32>
// CHECK: %[[DW:.+]] = graph.embedding_grad %[[TOK]], %[[E]] : tensor<2x4xi32>, tensor<2x4x8xf32> -> tensor<16x8xf32>
// CHECK: %[[DB:.+]] = graph.embedding_grad %[[IDS]], %[[DH]] : tensor<3xi64>, tensor<3x8xbf16> -> tensor<16x8xbf16>
// CHECK: %[[ROW:.+]] = graph.embedding %[[WTE]][%[[ONE]]] : tensor<16x8xf32>, tensor<i64>
// CHECK: %[[DS:.+]] = graph.embedding_grad %[[ONE]], %[[ROW]] : tensor<i64>, tensor<8xf32> -> tensor<16x8xf32>
// CHECK: %[[L:.+]] = graph.mse_loss %[[DW]], %[[WTE]] : tensor<16x8xf32>

// GENERIC-LABEL: "graph.model"() <{sym_name = "embedding_grad"}>
// GENERIC: "graph.embedding_grad"(%{{.+}}, %{{.+}}) : (tensor<2x4xi32>, tensor<2x4x8xf32>) -> tensor<16x8xf32>
// GENERIC: "graph.embedding_grad"(%{{.+}}, %{{.+}}) : (tensor<3xi64>, tensor<3x8xbf16>) -> tensor<16x8xbf16>
// GENERIC: "graph.embedding_grad"(%{{.+}}, %{{.+}}) : (tensor<i64>, tensor<8xf32>) -> tensor<16x8xf32>
graph.model @embedding_grad {
  graph.param @wte : tensor<16x8xf32> init #graph.normal<std = 0.02>
  graph.input @tokens : tensor<2x4xi32>
  graph.input @ids : tensor<3xi64>
  graph.input @one : tensor<i64>
  graph.input @dh : tensor<3x8xbf16>
  func.func @forward() {
    %wte = graph.get_param @wte : tensor<16x8xf32>
    %tokens = graph.get_input @tokens : tensor<2x4xi32>
    %ids = graph.get_input @ids : tensor<3xi64>
    %one = graph.get_input @one : tensor<i64>
    %dh = graph.get_input @dh : tensor<3x8xbf16>
    %e = graph.embedding %wte[%tokens] : tensor<16x8xf32>, tensor<2x4xi32>
    %dw = graph.embedding_grad %tokens, %e : tensor<2x4xi32>, tensor<2x4x8xf32> -> tensor<16x8xf32>
    %db = graph.embedding_grad %ids, %dh : tensor<3xi64>, tensor<3x8xbf16> -> tensor<16x8xbf16>
    %row = graph.embedding %wte[%one] : tensor<16x8xf32>, tensor<i64>
    %ds = graph.embedding_grad %one, %row : tensor<i64>, tensor<8xf32> -> tensor<16x8xf32>
    %l = graph.mse_loss %dw, %wte : tensor<16x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// layernorm_grad returns dx (typed like x), dgamma and dbeta (typed like gamma); rmsnorm_grad
// returns dx and dgamma. The printer names the results after them (%input_grad, %gamma_grad,
// ...). The default epsilon (1e-5) is not printed; an explicit one is. x and dy may be bf16
// with an f32 gamma (graph-assign-precision's form: f32 compute from the bf16 residual stream).
// CHECK-LABEL: graph.model @norm_grads {
// CHECK: %[[G:.+]] = graph.get_param @g : tensor<8xf32>
// CHECK: %[[X:.+]] = graph.get_input @x : tensor<2x4x8xf32>
// CHECK: %[[DY:.+]] = graph.get_input @dy : tensor<2x4x8xf32>
// CHECK: %[[LN_DX:.+]], %[[LN_DG:.+]], %[[LN_DB:.+]] = graph.layernorm_grad %[[X]], %[[G]], %[[DY]] : tensor<2x4x8xf32>, tensor<8xf32>{{$}}
// CHECK: %[[LN2_DX:.+]], %[[LN2_DG:.+]], %[[LN2_DB:.+]] = graph.layernorm_grad %[[LN_DX]], %[[G]], %[[DY]] {epsilon = 9.9999999999999995E-7 : f64} : tensor<2x4x8xf32>, tensor<8xf32>
// CHECK: %[[RMS_DX:.+]], %[[RMS_DG:.+]] = graph.rmsnorm_grad %[[LN2_DX]], %[[G]], %[[DY]] : tensor<2x4x8xf32>, tensor<8xf32>{{$}}
// CHECK: %[[RMS2_DX:.+]], %[[RMS2_DG:.+]] = graph.rmsnorm_grad %[[X]], %[[G]], %[[RMS_DX]] {epsilon = 9.9999999999999995E-7 : f64} : tensor<2x4x8xf32>, tensor<8xf32>
// CHECK: %{{.+}}, %{{.+}}, %{{.+}} = graph.layernorm_grad %{{.+}}, %{{.+}}, %{{.+}} : tensor<4x8xbf16>, tensor<8xbf16>
// CHECK: %{{.+}}, %{{.+}}, %{{.+}} = graph.layernorm_grad %{{.+}}, %[[G]], %{{.+}} : tensor<4x8xbf16>, tensor<8xf32>
// CHECK: %{{.+}}, %{{.+}} = graph.rmsnorm_grad %{{.+}}, %[[G]], %{{.+}} : tensor<4x8xbf16>, tensor<8xf32>
// CHECK: %[[DG:.+]] = graph.add %[[LN_DG]], %[[RMS2_DG]] : tensor<8xf32>, tensor<8xf32>
// CHECK: %[[L:.+]] = graph.mse_loss %[[DG]], %[[LN2_DB]] : tensor<8xf32>

// GENERIC-LABEL: "graph.model"() <{sym_name = "norm_grads"}>
// GENERIC: "graph.layernorm_grad"(%{{.+}}, %{{.+}}, %{{.+}}) <{epsilon = 1.000000e-05 : f64}> : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>)
// GENERIC: "graph.layernorm_grad"(%{{.+}}, %{{.+}}, %{{.+}}) <{epsilon = 9.9999999999999995E-7 : f64}> : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>)
// GENERIC: "graph.rmsnorm_grad"(%{{.+}}, %{{.+}}, %{{.+}}) <{epsilon = 1.000000e-05 : f64}> : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<8xf32>)
// GENERIC: "graph.rmsnorm_grad"(%{{.+}}, %{{.+}}, %{{.+}}) <{epsilon = 9.9999999999999995E-7 : f64}> : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<8xf32>)
// GENERIC: "graph.layernorm_grad"(%{{.+}}, %{{.+}}, %{{.+}}) <{epsilon = 1.000000e-05 : f64}> : (tensor<4x8xbf16>, tensor<8xbf16>, tensor<4x8xbf16>) -> (tensor<4x8xbf16>, tensor<8xbf16>, tensor<8xbf16>)
// GENERIC: "graph.layernorm_grad"(%{{.+}}, %{{.+}}, %{{.+}}) <{epsilon = 1.000000e-05 : f64}> : (tensor<4x8xbf16>, tensor<8xf32>, tensor<4x8xbf16>) -> (tensor<4x8xbf16>, tensor<8xf32>, tensor<8xf32>)
// GENERIC: "graph.rmsnorm_grad"(%{{.+}}, %{{.+}}, %{{.+}}) <{epsilon = 1.000000e-05 : f64}> : (tensor<4x8xbf16>, tensor<8xf32>, tensor<4x8xbf16>) -> (tensor<4x8xbf16>, tensor<8xf32>)
graph.model @norm_grads {
  graph.param @g : tensor<8xf32> init #graph.ones
  graph.input @x : tensor<2x4x8xf32>
  graph.input @dy : tensor<2x4x8xf32>
  graph.input @h : tensor<4x8xbf16>
  graph.input @hg : tensor<8xbf16>
  func.func @forward() {
    %g = graph.get_param @g : tensor<8xf32>
    %x = graph.get_input @x : tensor<2x4x8xf32>
    %dy = graph.get_input @dy : tensor<2x4x8xf32>
    %ln:3 = graph.layernorm_grad %x, %g, %dy : tensor<2x4x8xf32>, tensor<8xf32>
    %ln2:3 = graph.layernorm_grad %ln#0, %g, %dy {epsilon = 1.0e-06 : f64} : tensor<2x4x8xf32>, tensor<8xf32>
    %rms:2 = graph.rmsnorm_grad %ln2#0, %g, %dy : tensor<2x4x8xf32>, tensor<8xf32>
    %rms2:2 = graph.rmsnorm_grad %x, %g, %rms#0 {epsilon = 1.0e-06 : f64} : tensor<2x4x8xf32>, tensor<8xf32>
    %h = graph.get_input @h : tensor<4x8xbf16>
    %hg = graph.get_input @hg : tensor<8xbf16>
    %hln:3 = graph.layernorm_grad %h, %hg, %h : tensor<4x8xbf16>, tensor<8xbf16>
    %mln:3 = graph.layernorm_grad %h, %g, %h : tensor<4x8xbf16>, tensor<8xf32>
    %mrms:2 = graph.rmsnorm_grad %h, %g, %h : tensor<4x8xbf16>, tensor<8xf32>
    %dg = graph.add %ln#1, %rms2#1 : tensor<8xf32>, tensor<8xf32>
    %l = graph.mse_loss %dg, %ln2#2 : tensor<8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// q [.., T = 8, 16], k [.., S = 12, 16], v [.., 12, 32], dy [.., 8, 32]: dq, dk and dv
// (printed as %query_grad, %key_grad, %value_grad) are typed like q, k and v. Causal attention
// also on square scores, and explicit scales.
// CHECK-LABEL: graph.model @attention_grad {
// CHECK: %[[Q:.+]] = graph.get_input @q : tensor<2x4x8x16xf32>
// CHECK: %[[K:.+]] = graph.get_input @k : tensor<2x4x12x16xf32>
// CHECK: %[[V:.+]] = graph.get_input @v : tensor<2x4x12x32xf32>
// CHECK: %[[DY:.+]] = graph.get_input @dy : tensor<2x4x8x32xf32>
// CHECK: %[[A_DQ:.+]], %[[A_DK:.+]], %[[A_DV:.+]] = graph.attention_grad %[[Q]], %[[K]], %[[V]], %[[DY]] : tensor<2x4x8x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x12x32xf32>, tensor<2x4x8x32xf32>
// CHECK: %[[B_DQ:.+]], %[[B_DK:.+]], %[[B_DV:.+]] = graph.attention_grad %[[Q]], %[[Q]], %[[Q]], %[[A_DQ]] causal : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>
// CHECK: %[[C_DQ:.+]], %[[C_DK:.+]], %[[C_DV:.+]] = graph.attention_grad %[[Q]], %[[K]], %[[V]], %[[DY]] causal scale 1.250000e-01 : tensor<2x4x8x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x12x32xf32>, tensor<2x4x8x32xf32>
// CHECK: %[[D_DQ:.+]], %[[D_DK:.+]], %[[D_DV:.+]] = graph.attention_grad %[[Q]], %[[K]], %[[K]], %[[B_DV]] scale 2.500000e-01 : tensor<2x4x8x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x8x16xf32>
// CHECK: %[[L:.+]] = graph.mse_loss %[[C_DK]], %[[D_DK]] : tensor<2x4x12x16xf32>

// GENERIC-LABEL: "graph.model"() <{sym_name = "attention_grad"}>
// GENERIC: "graph.attention_grad"(%{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}) : (tensor<2x4x8x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x12x32xf32>, tensor<2x4x8x32xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x12x32xf32>)
// GENERIC: "graph.attention_grad"(%{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}) <{causal}> : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>)
// GENERIC: "graph.attention_grad"(%{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}) <{causal, scale = 1.250000e-01 : f64}> : (tensor<2x4x8x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x12x32xf32>, tensor<2x4x8x32xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x12x32xf32>)
// GENERIC: "graph.attention_grad"(%{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}) <{scale = 2.500000e-01 : f64}> : (tensor<2x4x8x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x8x16xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x12x16xf32>)
graph.model @attention_grad {
  graph.input @q : tensor<2x4x8x16xf32>
  graph.input @k : tensor<2x4x12x16xf32>
  graph.input @v : tensor<2x4x12x32xf32>
  graph.input @dy : tensor<2x4x8x32xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x4x8x16xf32>
    %k = graph.get_input @k : tensor<2x4x12x16xf32>
    %v = graph.get_input @v : tensor<2x4x12x32xf32>
    %dy = graph.get_input @dy : tensor<2x4x8x32xf32>
    %a:3 = graph.attention_grad %q, %k, %v, %dy : tensor<2x4x8x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x12x32xf32>, tensor<2x4x8x32xf32>
    %b:3 = graph.attention_grad %q, %q, %q, %a#0 causal : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>
    %c:3 = graph.attention_grad %q, %k, %v, %dy causal scale 0.125 : tensor<2x4x8x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x12x32xf32>, tensor<2x4x8x32xf32>
    %d:3 = graph.attention_grad %q, %k, %k, %b#2 scale 0.25 : tensor<2x4x8x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x8x16xf32>
    %l = graph.mse_loss %c#1, %d#1 : tensor<2x4x12x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// saved(o, lse): the forward's output and f32 row log-sum-exp [.., T].
// CHECK-LABEL: graph.model @attention_grad_saved {
// CHECK: %[[O:.+]], %[[LSE:.+]] = graph.attention %[[Q:.+]], %[[K:.+]], %[[V:.+]] causal with_lse
// CHECK: %{{.+}}, %{{.+}}, %{{.+}} = graph.attention_grad %[[Q]], %[[K]], %[[V]], %[[DY:.+]] causal saved(%[[O]], %[[LSE]] : tensor<2x4x8x32xf32>, tensor<2x4x8xf32>) : tensor<2x4x8x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x12x32xf32>, tensor<2x4x8x32xf32>

// GENERIC-LABEL: "graph.model"() <{sym_name = "attention_grad_saved"}>
// GENERIC: "graph.attention_grad"(%{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}) <{causal}> : (tensor<2x4x8x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x12x32xf32>, tensor<2x4x8x32xf32>, tensor<2x4x8x32xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x12x32xf32>)
graph.model @attention_grad_saved {
  graph.input @q : tensor<2x4x8x16xf32>
  graph.input @k : tensor<2x4x12x16xf32>
  graph.input @v : tensor<2x4x12x32xf32>
  graph.input @dy : tensor<2x4x8x32xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x4x8x16xf32>
    %k = graph.get_input @k : tensor<2x4x12x16xf32>
    %v = graph.get_input @v : tensor<2x4x12x32xf32>
    %dy = graph.get_input @dy : tensor<2x4x8x32xf32>
    %o, %lse = graph.attention %q, %k, %v causal with_lse : tensor<2x4x8x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x12x32xf32>
    %g:3 = graph.attention_grad %q, %k, %v, %dy causal saved(%o, %lse : tensor<2x4x8x32xf32>, tensor<2x4x8xf32>) : tensor<2x4x8x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x12x32xf32>, tensor<2x4x8x32xf32>
    %l = graph.mse_loss %g#0, %q : tensor<2x4x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// qkv_attention_grad: dy [.., T, H Dh] -> the packed gradient, typed like qkv; optionally the
// forward's o and f32 lse [.., H, T].
// CHECK-LABEL: graph.model @qkv_attention_grad {
// CHECK: %[[X:.+]] = graph.get_input @qkv : tensor<2x8x192xf32>
// CHECK: %[[DY:.+]] = graph.get_input @dy : tensor<2x8x64xf32>
// CHECK: %{{.+}} = graph.qkv_attention_grad %[[X]], %[[DY]] heads 4 : tensor<2x8x192xf32>, tensor<2x8x64xf32>
// CHECK: %[[O:.+]], %[[LSE:.+]] = graph.qkv_attention %[[X]] heads 4 causal scale 1.250000e-01 with_lse
// CHECK: %{{.+}} = graph.qkv_attention_grad %[[X]], %[[DY]] heads 4 causal scale 1.250000e-01 saved(%[[O]], %[[LSE]] : tensor<2x8x64xf32>, tensor<2x4x8xf32>) : tensor<2x8x192xf32>, tensor<2x8x64xf32>

// GENERIC-LABEL: "graph.model"() <{sym_name = "qkv_attention_grad"}>
// GENERIC: "graph.qkv_attention_grad"(%{{.+}}, %{{.+}}) <{heads = 4 : i64}> : (tensor<2x8x192xf32>, tensor<2x8x64xf32>) -> tensor<2x8x192xf32>
// GENERIC: "graph.qkv_attention_grad"(%{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}) <{causal, heads = 4 : i64, scale = 1.250000e-01 : f64}> : (tensor<2x8x192xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x4x8xf32>) -> tensor<2x8x192xf32>
graph.model @qkv_attention_grad {
  graph.input @qkv : tensor<2x8x192xf32>
  graph.input @dy : tensor<2x8x64xf32>
  func.func @forward() {
    %x = graph.get_input @qkv : tensor<2x8x192xf32>
    %dy = graph.get_input @dy : tensor<2x8x64xf32>
    %a = graph.qkv_attention_grad %x, %dy heads 4 : tensor<2x8x192xf32>, tensor<2x8x64xf32>
    %o, %lse = graph.qkv_attention %x heads 4 causal scale 0.125 with_lse : tensor<2x8x192xf32>
    %b = graph.qkv_attention_grad %x, %dy heads 4 causal scale 0.125 saved(%o, %lse : tensor<2x8x64xf32>, tensor<2x4x8xf32>) : tensor<2x8x192xf32>, tensor<2x8x64xf32>
    %l = graph.mse_loss %a, %b : tensor<2x8x192xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// The incoming gradient is always an f32 scalar, so the custom form does not spell its type.
// Default ignore_index (-100) and reduction (mean) are not printed; explicit values are.
// CHECK-LABEL: graph.model @cross_entropy_grad {
// CHECK: %[[LOGITS:.+]] = graph.get_input @logits : tensor<2x4x16xf32>
// CHECK: %[[LABELS:.+]] = graph.get_input @labels : tensor<2x4xi32>
// CHECK: %[[LABELS64:.+]] = graph.get_input @labels64 : tensor<2x4xi64>
// CHECK: %[[LOSS:.+]] = graph.cross_entropy %[[LOGITS]], %[[LABELS]] : tensor<2x4x16xf32>, tensor<2x4xi32>
// CHECK: graph.loss %[[LOSS]] : tensor<f32>
// CHECK: %[[ONE:.+]] = graph.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[A:.+]] = graph.cross_entropy_grad %[[LOGITS]], %[[LABELS]], %[[ONE]] : tensor<2x4x16xf32>, tensor<2x4xi32>{{$}}
// CHECK: %[[B:.+]] = graph.cross_entropy_grad %[[LOGITS]], %[[LABELS64]], %[[ONE]] {ignore_index = 0 : i64} : tensor<2x4x16xf32>, tensor<2x4xi64>
// CHECK: %[[C:.+]] = graph.cross_entropy_grad %[[LOGITS]], %[[LABELS]], %[[LOSS]] {ignore_index = -1 : i64, reduction = 1 : i32} : tensor<2x4x16xf32>, tensor<2x4xi32>
// CHECK: %[[D:.+]] = graph.cross_entropy_grad %{{.+}}, %{{.+}}, %[[ONE]] {reduction = 1 : i32} : tensor<16xbf16>, tensor<i64>

// GENERIC-LABEL: "graph.model"() <{sym_name = "cross_entropy_grad"}>
// GENERIC: "graph.cross_entropy_grad"(%{{.+}}, %{{.+}}, %{{.+}}) <{ignore_index = -100 : i64, reduction = 0 : i32}> : (tensor<2x4x16xf32>, tensor<2x4xi32>, tensor<f32>) -> tensor<2x4x16xf32>
// GENERIC: "graph.cross_entropy_grad"(%{{.+}}, %{{.+}}, %{{.+}}) <{ignore_index = 0 : i64, reduction = 0 : i32}> : (tensor<2x4x16xf32>, tensor<2x4xi64>, tensor<f32>) -> tensor<2x4x16xf32>
// GENERIC: "graph.cross_entropy_grad"(%{{.+}}, %{{.+}}, %{{.+}}) <{ignore_index = -1 : i64, reduction = 1 : i32}> : (tensor<2x4x16xf32>, tensor<2x4xi32>, tensor<f32>) -> tensor<2x4x16xf32>
// GENERIC: "graph.cross_entropy_grad"(%{{.+}}, %{{.+}}, %{{.+}}) <{ignore_index = -100 : i64, reduction = 1 : i32}> : (tensor<16xbf16>, tensor<i64>, tensor<f32>) -> tensor<16xbf16>
graph.model @cross_entropy_grad {
  graph.input @logits : tensor<2x4x16xf32>
  graph.input @labels : tensor<2x4xi32>
  graph.input @labels64 : tensor<2x4xi64>
  graph.input @one_logits : tensor<16xbf16>
  graph.input @one_label : tensor<i64>
  func.func @forward() {
    %logits = graph.get_input @logits : tensor<2x4x16xf32>
    %labels = graph.get_input @labels : tensor<2x4xi32>
    %labels64 = graph.get_input @labels64 : tensor<2x4xi64>
    %loss = graph.cross_entropy %logits, %labels : tensor<2x4x16xf32>, tensor<2x4xi32>
    graph.loss %loss : tensor<f32>
    %one = graph.constant dense<1.0> : tensor<f32>
    %a = graph.cross_entropy_grad %logits, %labels, %one : tensor<2x4x16xf32>, tensor<2x4xi32>
    %b = graph.cross_entropy_grad %logits, %labels64, %one {ignore_index = 0 : i64} : tensor<2x4x16xf32>, tensor<2x4xi64>
    %c = graph.cross_entropy_grad %logits, %labels, %loss {ignore_index = -1 : i64, reduction = 1 : i32} : tensor<2x4x16xf32>, tensor<2x4xi32>
    %one_logits = graph.get_input @one_logits : tensor<16xbf16>
    %one_label = graph.get_input @one_label : tensor<i64>
    %d = graph.cross_entropy_grad %one_logits, %one_label, %one {reduction = 1 : i32} : tensor<16xbf16>, tensor<i64>
    return
  }
}

// -----

// A dropout's random stream is optional; the backward dropout reuses the forward's stream.
// CHECK-LABEL: graph.model @dropout_stream {
// CHECK: %[[X:.+]] = graph.get_input @x : tensor<4x8xf32>
// CHECK: %[[D:.+]] = graph.dropout %[[X]] {p = 1.000000e-01 : f64, stream = 0 : i64} : tensor<4x8xf32>
// CHECK: %[[E:.+]] = graph.dropout %[[D]] {p = 5.000000e-01 : f64, stream = 7 : i64} : tensor<4x8xf32>
// CHECK: %[[F:.+]] = graph.dropout %[[E]] {p = 1.000000e-01 : f64} : tensor<4x8xf32>
// CHECK: %[[DE:.+]] = graph.dropout %[[F]] {p = 5.000000e-01 : f64, stream = 7 : i64} : tensor<4x8xf32>
// CHECK: %[[L:.+]] = graph.mse_loss %[[F]], %[[X]] : tensor<4x8xf32>

// GENERIC-LABEL: "graph.model"() <{sym_name = "dropout_stream"}>
// GENERIC: "graph.dropout"(%{{.+}}) <{p = 1.000000e-01 : f64, stream = 0 : i64}> : (tensor<4x8xf32>) -> tensor<4x8xf32>
// GENERIC: "graph.dropout"(%{{.+}}) <{p = 5.000000e-01 : f64, stream = 7 : i64}> : (tensor<4x8xf32>) -> tensor<4x8xf32>
// GENERIC: "graph.dropout"(%{{.+}}) <{p = 1.000000e-01 : f64}> : (tensor<4x8xf32>) -> tensor<4x8xf32>
graph.model @dropout_stream {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %d = graph.dropout %x {p = 0.1 : f64, stream = 0 : i64} : tensor<4x8xf32>
    %e = graph.dropout %d {stream = 7 : i64, p = 0.5 : f64} : tensor<4x8xf32>
    %f = graph.dropout %e {p = 0.1 : f64} : tensor<4x8xf32>
    %de = graph.dropout %f {p = 0.5 : f64, stream = 7 : i64} : tensor<4x8xf32>
    %l = graph.mse_loss %f, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// A micro-step: the model holds f32 states next to its parameters and inputs; the backward pass
// starts from graph.grad_seed (with and without a loss scale) and adds each gradient into its
// accumulator, an f32 state, whatever the gradient's own float type.
// CHECK-LABEL: graph.model @micro_step {
// CHECK: graph.param @w : tensor<4x2xf32> init
// CHECK: graph.param @e : tensor<2xbf16> init #graph.zeros
// CHECK: graph.input @x : tensor<8x4xf32>
// CHECK: graph.input @y : tensor<8x2xf32>
// CHECK: graph.input @scale : tensor<f32>
// CHECK: graph.state @w.grad : tensor<4x2xf32>{{$}}
// CHECK: graph.state @e.grad : tensor<2xf32>{{$}}
// CHECK: graph.state @s : tensor<f32>{{$}}
// CHECK: func.func @micro_step() {
// CHECK: %[[W:.+]] = graph.get_param @w : tensor<4x2xf32>
// CHECK: %[[E:.+]] = graph.get_param @e : tensor<2xbf16>
// CHECK: %[[X:.+]] = graph.get_input @x : tensor<8x4xf32>
// CHECK: %[[Y:.+]] = graph.get_input @y : tensor<8x2xf32>
// CHECK: %[[P:.+]] = graph.matmul %[[X]], %[[W]] : tensor<8x4xf32>, tensor<4x2xf32>
// CHECK: %[[L:.+]] = graph.mse_loss %[[P]], %[[Y]] : tensor<8x2xf32>
// CHECK: graph.loss %[[L]] : tensor<f32>
// CHECK: %[[SEED:.+]] = graph.grad_seed accum_steps 2{{$}}
// CHECK: %[[SCALE:.+]] = graph.get_input @scale : tensor<f32>
// CHECK: %[[SCALED:.+]] = graph.grad_seed scale %[[SCALE]] accum_steps 1{{$}}
// CHECK: %[[DP:.+]] = graph.mul %[[P]], %[[SEED]] : tensor<8x2xf32>, tensor<f32>
// CHECK: %[[DW:.+]] = graph.matmul %[[X]], %[[DP]] transpose_lhs : tensor<8x4xf32>, tensor<8x2xf32>
// CHECK: graph.accumulate_grad %[[DW]] into @w.grad : tensor<4x2xf32>
// CHECK: graph.accumulate_grad %[[E]] into @e.grad : tensor<2xbf16>
// CHECK: graph.accumulate_grad %[[SCALED]] into @s : tensor<f32>
// CHECK: return

// GENERIC-LABEL: "graph.model"() <{sym_name = "micro_step"}>
// GENERIC: "graph.state"() <{sym_name = "w.grad", type = tensor<4x2xf32>}> : () -> ()
// GENERIC: "graph.state"() <{sym_name = "e.grad", type = tensor<2xf32>}> : () -> ()
// GENERIC: "graph.grad_seed"() <{accum_steps = 2 : i64}> : () -> tensor<f32>
// GENERIC: "graph.grad_seed"(%{{.+}}) <{accum_steps = 1 : i64}> : (tensor<f32>) -> tensor<f32>
// GENERIC: "graph.accumulate_grad"(%{{.+}}) <{accumulator = @w.grad}> : (tensor<4x2xf32>) -> ()
// GENERIC: "graph.accumulate_grad"(%{{.+}}) <{accumulator = @e.grad}> : (tensor<2xbf16>) -> ()
graph.model @micro_step {
  graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02>
  graph.param @e : tensor<2xbf16> init #graph.zeros
  graph.input @x : tensor<8x4xf32>
  graph.input @y : tensor<8x2xf32>
  graph.input @scale : tensor<f32>
  graph.state @w.grad : tensor<4x2xf32>
  graph.state @e.grad : tensor<2xf32>
  graph.state @s : tensor<f32>
  func.func @micro_step() {
    %w = graph.get_param @w : tensor<4x2xf32>
    %e = graph.get_param @e : tensor<2xbf16>
    %x = graph.get_input @x : tensor<8x4xf32>
    %y = graph.get_input @y : tensor<8x2xf32>
    %p = graph.matmul %x, %w : tensor<8x4xf32>, tensor<4x2xf32>
    %l = graph.mse_loss %p, %y : tensor<8x2xf32>
    graph.loss %l : tensor<f32>
    %seed = graph.grad_seed accum_steps 2
    %scale = graph.get_input @scale : tensor<f32>
    %scaled = graph.grad_seed scale %scale accum_steps 1
    %dp = graph.mul %p, %seed : tensor<8x2xf32>, tensor<f32>
    %dw = graph.matmul %x, %dp transpose_lhs : tensor<8x4xf32>, tensor<8x2xf32>
    graph.accumulate_grad %dw into @w.grad : tensor<4x2xf32>
    graph.accumulate_grad %e into @e.grad : tensor<2xbf16>
    graph.accumulate_grad %scaled into @s : tensor<f32>
    return
  }
}

// -----

// The optimizer step of the graph-build-training example: the global norm of the accumulators,
// a constant learning rate, and one AdamW update per parameter, in a function of its own that
// returns the norm and the rate.
// CHECK-LABEL: graph.model @adamw {
// CHECK: graph.state @w.grad : tensor<4x2xf32>
// CHECK: graph.state @w.adam_m : tensor<4x2xf32>
// CHECK: graph.state @w.adam_v : tensor<4x2xf32>
// CHECK: graph.state @b.grad : tensor<2xf32>
// CHECK: graph.state @b.adam_m : tensor<2xf32>
// CHECK: graph.state @b.adam_v : tensor<2xf32>
// CHECK: func.func @micro_step() {
// CHECK: graph.loss
// CHECK: func.func @optimizer_step() -> (tensor<f32>, tensor<f32>) {
// CHECK: %[[NORM:.+]] = graph.global_norm [@w.grad, @b.grad]{{$}}
// CHECK: %[[LR:.+]] = graph.lr_schedule constant {lr = 3.000000e-04 : f64}{{$}}
// CHECK: graph.adamw @w grad @w.grad moments @w.adam_m, @w.adam_v lr %[[LR]] grad_norm %[[NORM]] {beta1 = 9.000000e-01 : f64, beta2 = 0.94999999999999996 : f64, clip_norm = 1.000000e+00 : f64, eps = 1.000000e-08 : f64, weight_decay = 1.000000e-01 : f64}
// CHECK: graph.adamw @b grad @b.grad moments @b.adam_m, @b.adam_v lr %[[LR]] grad_norm %[[NORM]] {beta1 = 0.000000e+00 : f64, beta2 = 0.000000e+00 : f64, clip_norm = 0.000000e+00 : f64, eps = 1.000000e+00 : f64, weight_decay = 0.000000e+00 : f64}
// CHECK: return %[[NORM]], %[[LR]] : tensor<f32>, tensor<f32>

// GENERIC-LABEL: "graph.model"() <{sym_name = "adamw"}>
// GENERIC: "graph.global_norm"() <{states = [@w.grad, @b.grad]}> : () -> tensor<f32>
// GENERIC: "graph.lr_schedule"() <{decay_steps = 0 : i64, kind = 0 : i32, lr = 3.000000e-04 : f64, min_lr = 0.000000e+00 : f64, warmup_steps = 0 : i64}> : () -> tensor<f32>
// GENERIC: "graph.adamw"(%{{.+}}, %{{.+}}) <{beta1 = 9.000000e-01 : f64, beta2 = 0.94999999999999996 : f64, clip_norm = 1.000000e+00 : f64, eps = 1.000000e-08 : f64, first_moment = @w.adam_m, grad = @w.grad, param = @w, second_moment = @w.adam_v, weight_decay = 1.000000e-01 : f64}> : (tensor<f32>, tensor<f32>) -> ()
graph.model @adamw {
  graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02>
  graph.param @b : tensor<2xf32> init #graph.zeros
  graph.input @x : tensor<8x4xf32>
  graph.input @y : tensor<8x2xf32>
  graph.state @w.grad : tensor<4x2xf32>
  graph.state @w.adam_m : tensor<4x2xf32>
  graph.state @w.adam_v : tensor<4x2xf32>
  graph.state @b.grad : tensor<2xf32>
  graph.state @b.adam_m : tensor<2xf32>
  graph.state @b.adam_v : tensor<2xf32>
  func.func @micro_step() {
    %w = graph.get_param @w : tensor<4x2xf32>
    %b = graph.get_param @b : tensor<2xf32>
    %x = graph.get_input @x : tensor<8x4xf32>
    %y = graph.get_input @y : tensor<8x2xf32>
    %p = graph.matmul %x, %w : tensor<8x4xf32>, tensor<4x2xf32>
    %q = graph.add %p, %b : tensor<8x2xf32>, tensor<2xf32>
    %l = graph.mse_loss %q, %y : tensor<8x2xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() -> (tensor<f32>, tensor<f32>) {
    %norm = graph.global_norm [@w.grad, @b.grad]
    %lr = graph.lr_schedule constant {lr = 3.0e-04 : f64}
    graph.adamw @w grad @w.grad moments @w.adam_m, @w.adam_v lr %lr grad_norm %norm
        {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64,
         clip_norm = 1.0 : f64}
    // The edges of the ranges: betas of 0, no decay, no clipping.
    graph.adamw @b grad @b.grad moments @b.adam_m, @b.adam_v lr %lr grad_norm %norm
        {beta1 = 0.0 : f64, beta2 = 0.0 : f64, eps = 1.0 : f64, weight_decay = 0.0 : f64,
         clip_norm = 0.0 : f64}
    return %norm, %lr : tensor<f32>, tensor<f32>
  }
}

// -----

// SGD with momentum under a cosine schedule; the momentum buffer is a state shaped like the
// parameter. Momentum 0 is plain SGD.
// CHECK-LABEL: graph.model @sgd {
// CHECK: graph.state @w.grad : tensor<4x2xf32>
// CHECK: graph.state @w.momentum : tensor<4x2xf32>
// CHECK: func.func @optimizer_step() -> (tensor<f32>, tensor<f32>) {
// CHECK: %[[NORM:.+]] = graph.global_norm [@w.grad]{{$}}
// CHECK: %[[LR:.+]] = graph.lr_schedule cosine {decay_steps = 1000 : i64, lr = 6.000000e-04 : f64, min_lr = 6.000000e-05 : f64, warmup_steps = 100 : i64}{{$}}
// CHECK: graph.sgd @w grad @w.grad momentum_buffer @w.momentum lr %[[LR]] grad_norm %[[NORM]] {clip_norm = 0.000000e+00 : f64, momentum = 9.000000e-01 : f64, weight_decay = 0.000000e+00 : f64}
// CHECK: graph.sgd @w grad @w.grad momentum_buffer @w.momentum lr %[[LR]] grad_norm %[[NORM]] {clip_norm = 1.000000e+00 : f64, momentum = 0.000000e+00 : f64, weight_decay = 1.000000e-02 : f64}
// CHECK: return %[[NORM]], %[[LR]] : tensor<f32>, tensor<f32>

// GENERIC-LABEL: "graph.model"() <{sym_name = "sgd"}>
// GENERIC: "graph.lr_schedule"() <{decay_steps = 1000 : i64, kind = 1 : i32, lr = 6.000000e-04 : f64, min_lr = 6.000000e-05 : f64, warmup_steps = 100 : i64}> : () -> tensor<f32>
// GENERIC: "graph.sgd"(%{{.+}}, %{{.+}}) <{clip_norm = 0.000000e+00 : f64, grad = @w.grad, momentum = 9.000000e-01 : f64, momentum_buffer = @w.momentum, param = @w, weight_decay = 0.000000e+00 : f64}> : (tensor<f32>, tensor<f32>) -> ()
graph.model @sgd {
  graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02>
  graph.input @x : tensor<8x4xf32>
  graph.input @y : tensor<8x2xf32>
  graph.state @w.grad : tensor<4x2xf32>
  graph.state @w.momentum : tensor<4x2xf32>
  func.func @micro_step() {
    %w = graph.get_param @w : tensor<4x2xf32>
    %x = graph.get_input @x : tensor<8x4xf32>
    %y = graph.get_input @y : tensor<8x2xf32>
    %p = graph.matmul %x, %w : tensor<8x4xf32>, tensor<4x2xf32>
    %l = graph.mse_loss %p, %y : tensor<8x2xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() -> (tensor<f32>, tensor<f32>) {
    %norm = graph.global_norm [@w.grad]
    %lr = graph.lr_schedule cosine {lr = 6.0e-04 : f64, min_lr = 6.0e-05 : f64,
                                    warmup_steps = 100 : i64, decay_steps = 1000 : i64}
    graph.sgd @w grad @w.grad momentum_buffer @w.momentum lr %lr grad_norm %norm
        {momentum = 0.9 : f64, weight_decay = 0.0 : f64, clip_norm = 0.0 : f64}
    graph.sgd @w grad @w.grad momentum_buffer @w.momentum lr %lr grad_norm %norm
        {momentum = 0.0 : f64, weight_decay = 0.01 : f64, clip_norm = 1.0 : f64}
    return %norm, %lr : tensor<f32>, tensor<f32>
  }
}

// -----

// Schedules at their edges: the default fields are not printed (decay_steps = 0 means the run's
// number of steps), min_lr may equal lr, and a constant schedule may warm up.
// CHECK-LABEL: graph.model @lr_schedules {
// CHECK: func.func @optimizer_step() -> (tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>) {
// CHECK: %[[A:.+]] = graph.lr_schedule constant {lr = 1.000000e+00 : f64}{{$}}
// CHECK: %[[B:.+]] = graph.lr_schedule constant {lr = 1.000000e-03 : f64, warmup_steps = 10 : i64}{{$}}
// CHECK: %[[C:.+]] = graph.lr_schedule cosine {lr = 1.000000e-03 : f64}{{$}}
// CHECK: %[[D:.+]] = graph.lr_schedule cosine {decay_steps = 11 : i64, lr = 1.000000e-03 : f64, min_lr = 1.000000e-03 : f64, warmup_steps = 10 : i64}{{$}}
// CHECK: return %[[A]], %[[B]], %[[C]], %[[D]] : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>

// GENERIC-LABEL: "graph.model"() <{sym_name = "lr_schedules"}>
// GENERIC: "graph.lr_schedule"() <{decay_steps = 0 : i64, kind = 0 : i32, lr = 1.000000e+00 : f64, min_lr = 0.000000e+00 : f64, warmup_steps = 0 : i64}> : () -> tensor<f32>
// GENERIC: "graph.lr_schedule"() <{decay_steps = 0 : i64, kind = 0 : i32, lr = 1.000000e-03 : f64, min_lr = 0.000000e+00 : f64, warmup_steps = 10 : i64}> : () -> tensor<f32>
// GENERIC: "graph.lr_schedule"() <{decay_steps = 0 : i64, kind = 1 : i32, lr = 1.000000e-03 : f64, min_lr = 0.000000e+00 : f64, warmup_steps = 0 : i64}> : () -> tensor<f32>
// GENERIC: "graph.lr_schedule"() <{decay_steps = 11 : i64, kind = 1 : i32, lr = 1.000000e-03 : f64, min_lr = 1.000000e-03 : f64, warmup_steps = 10 : i64}> : () -> tensor<f32>
graph.model @lr_schedules {
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() -> (tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>) {
    %a = graph.lr_schedule constant {lr = 1.0 : f64}
    %b = graph.lr_schedule constant {lr = 1.0e-03 : f64, warmup_steps = 10 : i64}
    %c = graph.lr_schedule cosine {lr = 1.0e-03 : f64}
    %d = graph.lr_schedule cosine {lr = 1.0e-03 : f64, min_lr = 1.0e-03 : f64,
                                   warmup_steps = 10 : i64, decay_steps = 11 : i64}
    return %a, %b, %c, %d : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>
  }
}

// -----

// A matmul of reduced-precision operands that writes its f32 accumulation (a weight gradient).
// CHECK-LABEL: graph.model @matmul_f32_result {
// CHECK: %{{.+}} = graph.matmul %[[X:.+]], %[[DY:.+]] transpose_lhs : tensor<8x4xbf16>, tensor<8x2xbf16> -> f32
// GENERIC-LABEL: "graph.model"() <{sym_name = "matmul_f32_result"}>
// GENERIC: "graph.matmul"(%{{.+}}, %{{.+}}) <{result_element = f32, transpose_lhs}> : (tensor<8x4xbf16>, tensor<8x2xbf16>) -> tensor<4x2xf32>
graph.model @matmul_f32_result {
  graph.input @x : tensor<8x4xbf16>
  graph.input @dy : tensor<8x2xbf16>
  func.func @forward() {
    %x = graph.get_input @x : tensor<8x4xbf16>
    %dy = graph.get_input @dy : tensor<8x2xbf16>
    %g = graph.matmul %x, %dy transpose_lhs : tensor<8x4xbf16>, tensor<8x2xbf16> -> f32
    %l = graph.sum %g axes [0, 1] : tensor<4x2xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// The gradients of the convolution, pooling and clip ops. A convolution's data gradient and an
// average pooling's gradient name the input's shape in their result type; the weight gradient
// may write f32 from bf16 operands.
// CHECK-LABEL: graph.model @convolution_grads {
// CHECK: graph.conv2d_grad_input %[[DY:.+]], %[[W:.+]] strides [2, 2] padding [1, 0, 2, 1] dilations [1, 2] : tensor<2x6x5x4xf32>, tensor<6x4x3x2xf32> -> tensor<2x4x9x9xf32>
// CHECK: graph.conv2d_grad_weight %[[X:.+]], %[[DY]] strides [2, 2] padding [1, 0, 2, 1] dilations [1, 2] : tensor<2x4x9x9xf32>, tensor<2x6x5x4xf32> -> tensor<6x4x3x2xf32>
// CHECK: graph.conv2d_grad_weight %{{.+}}, %{{.+}} groups 2 : tensor<2x4x9x9xbf16>, tensor<2x6x9x9xbf16> -> tensor<6x2x1x1xf32>
// CHECK: graph.max_pool2d_grad %[[X]], %{{.+}} kernel_size [3, 3] strides [2, 2] padding [1, 1, 1, 1] ceil_mode : tensor<2x4x9x9xf32>, tensor<2x4x5x5xf32>
// CHECK: graph.avg_pool2d_grad %{{.+}} kernel_size [3, 3] strides [2, 2] padding [1, 1, 1, 1] ceil_mode count_include_pad : tensor<2x4x5x5xf32> -> tensor<2x4x9x9xf32>
// CHECK: graph.clip_grad %[[X]], %{{.+}} {max = 6.000000e+00 : f64, min = 0.000000e+00 : f64} : tensor<2x4x9x9xf32>
// GENERIC-LABEL: "graph.model"() <{sym_name = "convolution_grads"}>
// GENERIC: "graph.conv2d_grad_input"(%{{.+}}, %{{.+}}) <{dilations = array<i64: 1, 2>, groups = 1 : i64, padding = array<i64: 1, 0, 2, 1>, strides = array<i64: 2, 2>}>
// GENERIC: "graph.max_pool2d_grad"(%{{.+}}, %{{.+}}) <{ceil_mode, dilations = array<i64: 1, 1>, kernel_size = array<i64: 3, 3>, padding = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>}> : (tensor<2x4x9x9xf32>, tensor<2x4x5x5xf32>) -> tensor<2x4x9x9xf32>
graph.model @convolution_grads {
  graph.input @x : tensor<2x4x9x9xf32>
  graph.input @w : tensor<6x4x3x2xf32>
  graph.input @dy : tensor<2x6x5x4xf32>
  graph.input @hx : tensor<2x4x9x9xbf16>
  graph.input @hdy : tensor<2x6x9x9xbf16>
  graph.input @py : tensor<2x4x5x5xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x9x9xf32>
    %w = graph.get_input @w : tensor<6x4x3x2xf32>
    %dy = graph.get_input @dy : tensor<2x6x5x4xf32>
    %hx = graph.get_input @hx : tensor<2x4x9x9xbf16>
    %hdy = graph.get_input @hdy : tensor<2x6x9x9xbf16>
    %py = graph.get_input @py : tensor<2x4x5x5xf32>
    %dx = graph.conv2d_grad_input %dy, %w strides [2, 2] padding [1, 0, 2, 1] dilations [1, 2] : tensor<2x6x5x4xf32>, tensor<6x4x3x2xf32> -> tensor<2x4x9x9xf32>
    %dw = graph.conv2d_grad_weight %x, %dy strides [2, 2] padding [1, 0, 2, 1] dilations [1, 2] : tensor<2x4x9x9xf32>, tensor<2x6x5x4xf32> -> tensor<6x4x3x2xf32>
    %hw = graph.conv2d_grad_weight %hx, %hdy groups 2 : tensor<2x4x9x9xbf16>, tensor<2x6x9x9xbf16> -> tensor<6x2x1x1xf32>
    %mx = graph.max_pool2d_grad %x, %py kernel_size [3, 3] strides [2, 2] padding [1, 1, 1, 1] ceil_mode : tensor<2x4x9x9xf32>, tensor<2x4x5x5xf32>
    %ax = graph.avg_pool2d_grad %py kernel_size [3, 3] strides [2, 2] padding [1, 1, 1, 1] ceil_mode count_include_pad : tensor<2x4x5x5xf32> -> tensor<2x4x9x9xf32>
    %cx = graph.clip_grad %x, %mx {min = 0.0 : f64, max = 6.0 : f64} : tensor<2x4x9x9xf32>
    %s1 = graph.sum %dx axes [0, 1, 2, 3] : tensor<2x4x9x9xf32>
    %s2 = graph.sum %dw axes [0, 1, 2, 3] : tensor<6x4x3x2xf32>
    %s3 = graph.sum %hw axes [0, 1, 2, 3] : tensor<6x2x1x1xf32>
    %s4 = graph.sum %ax axes [0, 1, 2, 3] : tensor<2x4x9x9xf32>
    %s5 = graph.sum %cx axes [0, 1, 2, 3] : tensor<2x4x9x9xf32>
    %a = graph.add %s1, %s2 : tensor<f32>, tensor<f32>
    %b = graph.add %a, %s3 : tensor<f32>, tensor<f32>
    %c = graph.add %b, %s4 : tensor<f32>, tensor<f32>
    %l = graph.add %c, %s5 : tensor<f32>, tensor<f32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// CHECK-LABEL: graph.model @batch_norm_grad {
// CHECK: %{{.+}}, %{{.+}}, %{{.+}} = graph.batch_norm_grad %{{.+}}, %{{.+}}, %{{.+}} : tensor<2x4x3x3xbf16>, tensor<4xf32>
// GENERIC-LABEL: "graph.model"() <{sym_name = "batch_norm_grad"}>
// GENERIC: "graph.batch_norm_grad"(%{{.+}}, %{{.+}}, %{{.+}}) <{epsilon = 1.000000e-05 : f64}> : (tensor<2x4x3x3xbf16>, tensor<4xf32>, tensor<2x4x3x3xbf16>) -> (tensor<2x4x3x3xbf16>, tensor<4xf32>, tensor<4xf32>)
graph.model @batch_norm_grad {
  graph.input @x : tensor<2x4x3x3xbf16>
  graph.input @g : tensor<4xf32>
  graph.input @dy : tensor<2x4x3x3xbf16>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x3x3xbf16>
    %g = graph.get_input @g : tensor<4xf32>
    %dy = graph.get_input @dy : tensor<2x4x3x3xbf16>
    %dx, %dg, %db = graph.batch_norm_grad %x, %g, %dy : tensor<2x4x3x3xbf16>, tensor<4xf32>
    %l = graph.sum %dg axes [0] : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
