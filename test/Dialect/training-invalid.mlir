// RUN: ampc-opt %s -split-input-file -verify-diagnostics

// training-invalid.mlir: one case per diagnostic of the ops that graph-build-training writes,
// grouped by op: the gradient ops (their result-type inference and verifiers in the "Gradient
// ops" section of GraphOps.cpp, with the shape rules they share with the forward ops), then the
// training state and the optimizer step (graph.state, graph.grad_seed, graph.accumulate_grad,
// graph.global_norm, graph.lr_schedule, graph.adamw, graph.sgd), whose symbol references are
// checked when the enclosing graph.model verifies its symbol uses. Representative ODS-generated
// constraint errors (f32-only state, f32 scalars, attribute kinds, SameOperandsAndResultType,
// AllTypesMatch) are included. Every case is a well-formed model except for the op under test,
// so each diagnostic comes from the check it names. Inference errors are reported while the
// custom form is parsed; verifier and symbol errors after parsing.

//===----------------------------------------------------------------------===//
// graph.relu_grad, graph.silu_grad, graph.hardswish_grad, graph.gelu_grad, graph.softmax_grad
//===----------------------------------------------------------------------===//

// The custom form spells one type; the generic form can give the gradient another.
graph.model @relu_grad_mixed_types {
  graph.input @x : tensor<4x8xf32>
  graph.input @dy : tensor<4x8xbf16>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %dy = graph.get_input @dy : tensor<4x8xbf16>
    // expected-error @+1 {{'graph.relu_grad' op requires the same type for all operands and results}}
    %dx = "graph.relu_grad"(%x, %dy) : (tensor<4x8xf32>, tensor<4x8xbf16>) -> tensor<4x8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @hardswish_grad_result_type_differs {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+1 {{'graph.hardswish_grad' op requires the same type for all operands and results}}
    %dx = "graph.hardswish_grad"(%x, %x) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf16>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @gelu_grad_unknown_approximation {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+1 {{custom op 'graph.gelu_grad' expected string or keyword containing one of the following enum values for attribute 'approximation' [erf, tanh]}}
    %dx = graph.gelu_grad sigmoid %x, %x : tensor<4x8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @softmax_grad_shapes {
  graph.input @y : tensor<2x8xf32>
  graph.input @dy : tensor<2x4xf32>
  func.func @forward() {
    %y = graph.get_input @y : tensor<2x8xf32>
    %dy = graph.get_input @dy : tensor<2x4xf32>
    // expected-error @+1 {{'graph.softmax_grad' op requires the same type for all operands and results}}
    %dx = "graph.softmax_grad"(%y, %dy) : (tensor<2x8xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
    %l = graph.mse_loss %y, %y : tensor<2x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

//===----------------------------------------------------------------------===//
// graph.pad
//===----------------------------------------------------------------------===//

graph.model @pad_dynamic_input {
  graph.input @x : tensor<4xf32>
  func.func private @layer(%h: tensor<?x8xf32>) {
    // expected-error @+1 {{'graph.pad' expects statically shaped ranked tensors, got 'tensor<?x8xf32>'}}
    %y = graph.pad %h low [0, 0] high [0, 1] : tensor<?x8xf32>
    return
  }
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @pad_low_rank {
  graph.input @x : tensor<2x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x8xf32>
    // expected-error @+1 {{'graph.pad' needs one low and one high padding per dimension (rank 2)}}
    %y = graph.pad %x low [8] high [0, 0] : tensor<2x8xf32>
    %l = graph.mse_loss %x, %x : tensor<2x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @pad_high_rank {
  graph.input @x : tensor<2x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x8xf32>
    // expected-error @+1 {{'graph.pad' needs one low and one high padding per dimension (rank 2)}}
    %y = graph.pad %x low [0, 8] high [0, 0, 0] : tensor<2x8xf32>
    %l = graph.mse_loss %x, %x : tensor<2x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @pad_negative {
  graph.input @x : tensor<2x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x8xf32>
    // expected-error @+1 {{'graph.pad' paddings must not be negative}}
    %y = graph.pad %x low [0, 2] high [0, -1] : tensor<2x8xf32>
    %l = graph.mse_loss %x, %x : tensor<2x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// The generic form spells the result type, which must agree with the inferred one.
graph.model @pad_wrong_result_type {
  graph.input @x : tensor<2x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x8xf32>
    // expected-error @+2 {{'graph.pad' op inferred type(s) 'tensor<2x16xf32>' are incompatible with return type(s) of operation 'tensor<2x8xf32>'}}
    // expected-error @+1 {{'graph.pad' op failed to infer returned types}}
    %y = "graph.pad"(%x) {low = array<i64: 0, 8>, high = array<i64: 0, 0>} : (tensor<2x8xf32>) -> tensor<2x8xf32>
    %l = graph.mse_loss %x, %x : tensor<2x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

//===----------------------------------------------------------------------===//
// graph.max_grad
//===----------------------------------------------------------------------===//

graph.model @max_grad_dynamic_input {
  graph.input @x : tensor<4xf32>
  func.func private @layer(%h: tensor<?x8xf32>, %dy: tensor<4xf32>) {
    // expected-error @+1 {{'graph.max_grad' expects statically shaped ranked tensors, got 'tensor<?x8xf32>'}}
    %y = graph.max_grad %h, %dy axes [1] : tensor<?x8xf32>, tensor<4xf32>
    return
  }
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @max_grad_no_axes {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+1 {{'graph.max_grad' reduction needs at least one axis}}
    %dx = graph.max_grad %x, %x axes [] : tensor<4x8xf32>, tensor<4x8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @max_grad_axes_order {
  graph.input @x : tensor<4x8xf32>
  graph.input @dy : tensor<f32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %dy = graph.get_input @dy : tensor<f32>
    // expected-error @+1 {{'graph.max_grad' reduction axes [1, 0] must be distinct, increasing dimensions of a rank-2 tensor}}
    %dx = graph.max_grad %x, %dy axes [1, 0] : tensor<4x8xf32>, tensor<f32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @max_grad_dynamic_gradient {
  graph.input @x : tensor<4x8xf32>
  func.func private @layer(%h: tensor<4x8xf32>, %dy: tensor<?xf32>) {
    // expected-error @+1 {{'graph.max_grad' expects a statically shaped gradient, got 'tensor<?xf32>'}}
    %y = graph.max_grad %h, %dy axes [1] : tensor<4x8xf32>, tensor<?xf32>
    return
  }
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @max_grad_element_types {
  graph.input @x : tensor<4x8xf32>
  graph.input @dy : tensor<4xbf16>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %dy = graph.get_input @dy : tensor<4xbf16>
    // expected-error @+1 {{'graph.max_grad' operands have different element types 'f32' and 'bf16'; insert a graph.cast}}
    %dx = graph.max_grad %x, %dy axes [1] : tensor<4x8xf32>, tensor<4xbf16>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// A gradient shaped for keepdims given to a max without it.
graph.model @max_grad_gradient_shape {
  graph.input @x : tensor<4x8xf32>
  graph.input @dy : tensor<4x1xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %dy = graph.get_input @dy : tensor<4x1xf32>
    // expected-error @+1 {{'graph.max_grad' gradient has shape [4, 1] but the forward result has shape [4]}}
    %dx = graph.max_grad %x, %dy axes [1] : tensor<4x8xf32>, tensor<4x1xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @max_grad_keepdims_gradient_shape {
  graph.input @x : tensor<4x8xf32>
  graph.input @dy : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %dy = graph.get_input @dy : tensor<4xf32>
    // expected-error @+1 {{'graph.max_grad' gradient has shape [4] but the forward result has shape [4, 1]}}
    %dx = graph.max_grad %x, %dy axes [1] keepdims : tensor<4x8xf32>, tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

//===----------------------------------------------------------------------===//
// graph.embedding_grad
//===----------------------------------------------------------------------===//

graph.model @embedding_grad_element_types {
  graph.input @tokens : tensor<2x4xi32>
  graph.input @dy : tensor<2x4x8xf32>
  func.func @forward() {
    %tokens = graph.get_input @tokens : tensor<2x4xi32>
    %dy = graph.get_input @dy : tensor<2x4x8xf32>
    // expected-error @+1 {{'graph.embedding_grad' op result element type 'bf16' differs from the gradient's 'f32'}}
    %dw = graph.embedding_grad %tokens, %dy : tensor<2x4xi32>, tensor<2x4x8xf32> -> tensor<16x8xbf16>
    %l = graph.mse_loss %dy, %dy : tensor<2x4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @embedding_grad_table_rank {
  graph.input @tokens : tensor<2x4xi32>
  graph.input @dy : tensor<2x4x8xf32>
  func.func @forward() {
    %tokens = graph.get_input @tokens : tensor<2x4xi32>
    %dy = graph.get_input @dy : tensor<2x4x8xf32>
    // expected-error @+1 {{'graph.embedding_grad' op result 'tensor<16xf32>': embedding table must be [rows, width], got [16]}}
    %dw = graph.embedding_grad %tokens, %dy : tensor<2x4xi32>, tensor<2x4x8xf32> -> tensor<16xf32>
    %l = graph.mse_loss %dy, %dy : tensor<2x4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// The gradient's rows are 4 wide but the table's are 8.
graph.model @embedding_grad_gradient_width {
  graph.input @tokens : tensor<2x4xi32>
  graph.input @dy : tensor<2x4x4xf32>
  func.func @forward() {
    %tokens = graph.get_input @tokens : tensor<2x4xi32>
    %dy = graph.get_input @dy : tensor<2x4x4xf32>
    // expected-error @+1 {{'graph.embedding_grad' op gradient has shape [2, 4, 4] but embedding rows of 'tensor<16x8xf32>' at these indices have shape [2, 4, 8]}}
    %dw = graph.embedding_grad %tokens, %dy : tensor<2x4xi32>, tensor<2x4x4xf32> -> tensor<16x8xf32>
    %l = graph.mse_loss %dy, %dy : tensor<2x4x4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// The gradient is shaped for other indices ([4, 2] instead of [2, 4]).
graph.model @embedding_grad_gradient_batch {
  graph.input @tokens : tensor<2x4xi64>
  graph.input @dy : tensor<4x2x8xf32>
  func.func @forward() {
    %tokens = graph.get_input @tokens : tensor<2x4xi64>
    %dy = graph.get_input @dy : tensor<4x2x8xf32>
    // expected-error @+1 {{'graph.embedding_grad' op gradient has shape [4, 2, 8] but embedding rows of 'tensor<16x8xf32>' at these indices have shape [2, 4, 8]}}
    %dw = graph.embedding_grad %tokens, %dy : tensor<2x4xi64>, tensor<4x2x8xf32> -> tensor<16x8xf32>
    %l = graph.mse_loss %dy, %dy : tensor<4x2x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @embedding_grad_float_indices {
  graph.input @tokens : tensor<2x4xf32>
  graph.input @dy : tensor<2x4x8xf32>
  func.func @forward() {
    %tokens = graph.get_input @tokens : tensor<2x4xf32>
    %dy = graph.get_input @dy : tensor<2x4x8xf32>
    // expected-error @+1 {{'graph.embedding_grad' op operand #0 must be statically shaped tensor of 32-bit signless integer or 64-bit signless integer values, but got 'tensor<2x4xf32>'}}
    %dw = graph.embedding_grad %tokens, %dy : tensor<2x4xf32>, tensor<2x4x8xf32> -> tensor<16x8xf32>
    %l = graph.mse_loss %dy, %dy : tensor<2x4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

//===----------------------------------------------------------------------===//
// graph.layernorm_grad, graph.rmsnorm_grad
//===----------------------------------------------------------------------===//

graph.model @layernorm_grad_dynamic_gamma {
  graph.input @x : tensor<4x8xf32>
  func.func private @layer(%h: tensor<4x8xf32>, %g: tensor<?xf32>) {
    // expected-error @+1 {{'graph.layernorm_grad' expects statically shaped ranked tensors, got 'tensor<?xf32>'}}
    %dx:3 = graph.layernorm_grad %h, %g, %h : tensor<4x8xf32>, tensor<?xf32>
    return
  }
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @layernorm_grad_scalar_input {
  graph.input @x : tensor<f32>
  graph.input @g : tensor<1xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<f32>
    %g = graph.get_input @g : tensor<1xf32>
    // expected-error @+1 {{'graph.layernorm_grad' normalisation needs an input of rank >= 1}}
    %dx:3 = graph.layernorm_grad %x, %g, %x : tensor<f32>, tensor<1xf32>
    graph.loss %x : tensor<f32>
    return
  }
}

// -----

graph.model @layernorm_grad_gamma_shape {
  graph.input @x : tensor<4x8xf32>
  graph.input @g : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %g = graph.get_input @g : tensor<4xf32>
    // expected-error @+1 {{'graph.layernorm_grad' gamma must have the shape of the last axis, [8], got [4]}}
    %dx:3 = graph.layernorm_grad %x, %g, %x : tensor<4x8xf32>, tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// The custom form types the gradient like the input; the generic form can give it another
// shape, which AllTypesMatch rejects before the result types are inferred.
graph.model @layernorm_grad_gradient_type {
  graph.input @x : tensor<4x8xf32>
  graph.input @g : tensor<8xf32>
  graph.input @dy : tensor<2x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %g = graph.get_input @g : tensor<8xf32>
    %dy = graph.get_input @dy : tensor<2x8xf32>
    // expected-error @+1 {{'graph.layernorm_grad' op failed to verify that all of {input, grad} have same type}}
    %dx:3 = "graph.layernorm_grad"(%x, %g, %dy) {epsilon = 1.0e-05 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<2x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @rmsnorm_grad_scalar_input {
  graph.input @x : tensor<f32>
  graph.input @g : tensor<1xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<f32>
    %g = graph.get_input @g : tensor<1xf32>
    // expected-error @+1 {{'graph.rmsnorm_grad' normalisation needs an input of rank >= 1}}
    %dx:2 = graph.rmsnorm_grad %x, %g, %x : tensor<f32>, tensor<1xf32>
    graph.loss %x : tensor<f32>
    return
  }
}

// -----

graph.model @rmsnorm_grad_gamma_shape {
  graph.input @x : tensor<4x8xf32>
  graph.input @g : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %g = graph.get_input @g : tensor<4x8xf32>
    // expected-error @+1 {{'graph.rmsnorm_grad' gamma must have the shape of the last axis, [8], got [4, 8]}}
    %dx:2 = graph.rmsnorm_grad %x, %g, %x : tensor<4x8xf32>, tensor<4x8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @rmsnorm_grad_gradient_type {
  graph.input @x : tensor<4x8xf32>
  graph.input @g : tensor<8xf32>
  graph.input @dy : tensor<4x8xbf16>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %g = graph.get_input @g : tensor<8xf32>
    %dy = graph.get_input @dy : tensor<4x8xbf16>
    // expected-error @+1 {{'graph.rmsnorm_grad' op failed to verify that all of {input, grad} have same type}}
    %dx:2 = "graph.rmsnorm_grad"(%x, %g, %dy) {epsilon = 1.0e-05 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xbf16>) -> (tensor<4x8xf32>, tensor<8xf32>)
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

//===----------------------------------------------------------------------===//
// graph.attention_grad
//===----------------------------------------------------------------------===//

graph.model @attention_grad_zero_scale {
  graph.input @q : tensor<2x8x16xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x8x16xf32>
    // expected-error @+1 {{'graph.attention_grad' scale must be finite and positive, got 0.0}}
    %dq:3 = graph.attention_grad %q, %q, %q, %q scale 0.0 : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
    %l = graph.mse_loss %q, %q : tensor<2x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @attention_grad_infinite_scale {
  graph.input @q : tensor<2x8x16xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x8x16xf32>
    // expected-error @+1 {{'graph.attention_grad' scale must be finite and positive, got inf}}
    %dq:3 = graph.attention_grad %q, %q, %q, %q scale 0x7FF0000000000000 : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
    %l = graph.mse_loss %q, %q : tensor<2x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @attention_grad_rank {
  graph.input @q : tensor<16xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<16xf32>
    // expected-error @+1 {{'graph.attention_grad' attention needs q, k, v of one rank >= 2, got [16], [16], [16]}}
    %dq:3 = graph.attention_grad %q, %q, %q, %q : tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>
    %l = graph.mse_loss %q, %q : tensor<16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @attention_grad_saved_count {
  graph.input @q : tensor<2x8x16xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x8x16xf32>
    // expected-error @+1 {{'graph.attention_grad' op saves the forward's output and log-sum-exp: 'saved' takes 2 values, got 1}}
    %dq:3 = graph.attention_grad %q, %q, %q, %q saved(%q : tensor<2x8x16xf32>) : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
    %l = graph.mse_loss %q, %q : tensor<2x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @attention_grad_saved_output {
  graph.input @q : tensor<2x8x16xf32>
  graph.input @o : tensor<2x8x16xbf16>
  graph.input @lse : tensor<2x8xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x8x16xf32>
    %o = graph.get_input @o : tensor<2x8x16xbf16>
    %lse = graph.get_input @lse : tensor<2x8xf32>
    // expected-error @+1 {{'graph.attention_grad' op saved output has type 'tensor<2x8x16xbf16>' but the forward's result is 'tensor<2x8x16xf32>'}}
    %dq:3 = graph.attention_grad %q, %q, %q, %q saved(%o, %lse : tensor<2x8x16xbf16>, tensor<2x8xf32>) : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
    %l = graph.mse_loss %q, %q : tensor<2x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @attention_grad_saved_lse {
  graph.input @q : tensor<2x8x16xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x8x16xf32>
    // expected-error @+1 {{'graph.attention_grad' op saved log-sum-exp has type 'tensor<2x8x16xf32>', expected 'tensor<2x8xf32>'}}
    %dq:3 = graph.attention_grad %q, %q, %q, %q saved(%q, %q : tensor<2x8x16xf32>, tensor<2x8x16xf32>) : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
    %l = graph.mse_loss %q, %q : tensor<2x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

//===----------------------------------------------------------------------===//
// graph.qkv_attention_grad
//===----------------------------------------------------------------------===//

graph.model @qkv_attention_grad_shape {
  graph.input @x : tensor<2x8x96xf32>
  graph.input @dy : tensor<2x8x96xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x8x96xf32>
    %dy = graph.get_input @dy : tensor<2x8x96xf32>
    // expected-error @+1 {{'graph.qkv_attention_grad' gradient has shape [2, 8, 96] but the forward result has shape [2, 8, 32]}}
    %g = graph.qkv_attention_grad %x, %dy heads 2 : tensor<2x8x96xf32>, tensor<2x8x96xf32>
    %l = graph.mse_loss %x, %x : tensor<2x8x96xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @qkv_attention_grad_width {
  graph.input @x : tensor<2x8x100xf32>
  graph.input @dy : tensor<2x8x32xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x8x100xf32>
    %dy = graph.get_input @dy : tensor<2x8x32xf32>
    // expected-error @+1 {{'graph.qkv_attention_grad' qkv_attention's last dimension 100 is not 3 x 2 heads x a head dim}}
    %g = graph.qkv_attention_grad %x, %dy heads 2 : tensor<2x8x100xf32>, tensor<2x8x32xf32>
    %l = graph.mse_loss %x, %x : tensor<2x8x100xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @qkv_attention_grad_saved_count {
  graph.input @x : tensor<2x8x96xf32>
  graph.input @dy : tensor<2x8x32xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x8x96xf32>
    %dy = graph.get_input @dy : tensor<2x8x32xf32>
    // expected-error @+1 {{'graph.qkv_attention_grad' op saves the forward's output and log-sum-exp: 'saved' takes 2 values, got 1}}
    %g = graph.qkv_attention_grad %x, %dy heads 2 saved(%dy : tensor<2x8x32xf32>) : tensor<2x8x96xf32>, tensor<2x8x32xf32>
    %l = graph.mse_loss %x, %x : tensor<2x8x96xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @qkv_attention_grad_saved_output {
  graph.input @x : tensor<2x8x96xf32>
  graph.input @dy : tensor<2x8x32xf32>
  graph.input @o : tensor<2x8x32xbf16>
  graph.input @lse : tensor<2x2x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x8x96xf32>
    %dy = graph.get_input @dy : tensor<2x8x32xf32>
    %o = graph.get_input @o : tensor<2x8x32xbf16>
    %lse = graph.get_input @lse : tensor<2x2x8xf32>
    // expected-error @+1 {{'graph.qkv_attention_grad' op saved output has type 'tensor<2x8x32xbf16>' but the forward's result is 'tensor<2x8x32xf32>'}}
    %g = graph.qkv_attention_grad %x, %dy heads 2 saved(%o, %lse : tensor<2x8x32xbf16>, tensor<2x2x8xf32>) : tensor<2x8x96xf32>, tensor<2x8x32xf32>
    %l = graph.mse_loss %x, %x : tensor<2x8x96xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @qkv_attention_grad_saved_lse {
  graph.input @x : tensor<2x8x96xf32>
  graph.input @dy : tensor<2x8x32xf32>
  graph.input @lse : tensor<2x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x8x96xf32>
    %dy = graph.get_input @dy : tensor<2x8x32xf32>
    %lse = graph.get_input @lse : tensor<2x8xf32>
    // expected-error @+1 {{'graph.qkv_attention_grad' op saved log-sum-exp has type 'tensor<2x8xf32>', expected 'tensor<2x2x8xf32>'}}
    %g = graph.qkv_attention_grad %x, %dy heads 2 saved(%dy, %lse : tensor<2x8x32xf32>, tensor<2x8xf32>) : tensor<2x8x96xf32>, tensor<2x8x32xf32>
    %l = graph.mse_loss %x, %x : tensor<2x8x96xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @attention_grad_leading_dimensions {
  graph.input @q : tensor<2x8x16xf32>
  graph.input @k : tensor<3x8x16xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x8x16xf32>
    %k = graph.get_input @k : tensor<3x8x16xf32>
    // expected-error @+1 {{'graph.attention_grad' attention q, k, v must share their leading dimensions, got [2, 8, 16], [3, 8, 16], [3, 8, 16]}}
    %dq:3 = graph.attention_grad %q, %k, %k, %q : tensor<2x8x16xf32>, tensor<3x8x16xf32>, tensor<3x8x16xf32>, tensor<2x8x16xf32>
    %l = graph.mse_loss %q, %q : tensor<2x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @attention_grad_head_dimension {
  graph.input @q : tensor<2x8x16xf32>
  graph.input @k : tensor<2x8x8xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x8x16xf32>
    %k = graph.get_input @k : tensor<2x8x8xf32>
    // expected-error @+1 {{'graph.attention_grad' attention q and k must have the same head dimension, got 16 and 8}}
    %dq:3 = graph.attention_grad %q, %k, %k, %k : tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>, tensor<2x8x8xf32>
    %l = graph.mse_loss %q, %q : tensor<2x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @attention_grad_sequence_length {
  graph.input @q : tensor<2x8x16xf32>
  graph.input @k : tensor<2x12x16xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x8x16xf32>
    %k = graph.get_input @k : tensor<2x12x16xf32>
    // expected-error @+1 {{'graph.attention_grad' attention k and v must have the same sequence length, got 12 and 8}}
    %dq:3 = graph.attention_grad %q, %k, %q, %q : tensor<2x8x16xf32>, tensor<2x12x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
    %l = graph.mse_loss %q, %q : tensor<2x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// Causal attention needs at least as many keys as queries (S = 4 < T = 8).
graph.model @attention_grad_causal_short_keys {
  graph.input @q : tensor<2x8x16xf32>
  graph.input @k : tensor<2x4x16xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x8x16xf32>
    %k = graph.get_input @k : tensor<2x4x16xf32>
    // expected-error @+1 {{'graph.attention_grad' causal masking needs S >= T in [..., T, S], got T = 8 and S = 4}}
    %dq:3 = graph.attention_grad %q, %k, %k, %q causal : tensor<2x8x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x8x16xf32>
    %l = graph.mse_loss %q, %q : tensor<2x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @attention_grad_qkv_element_types {
  graph.input @q : tensor<2x8x16xf32>
  graph.input @k : tensor<2x8x16xbf16>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x8x16xf32>
    %k = graph.get_input @k : tensor<2x8x16xbf16>
    // expected-error @+1 {{'graph.attention_grad' operands have different element types 'f32' and 'bf16'; insert a graph.cast}}
    %dq:3 = graph.attention_grad %q, %k, %q, %q : tensor<2x8x16xf32>, tensor<2x8x16xbf16>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
    %l = graph.mse_loss %q, %q : tensor<2x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @attention_grad_dynamic_gradient {
  graph.input @q : tensor<2x8x16xf32>
  func.func private @layer(%h: tensor<2x8x16xf32>, %dy: tensor<?x8x16xf32>) {
    // expected-error @+1 {{'graph.attention_grad' expects a statically shaped gradient, got 'tensor<?x8x16xf32>'}}
    %dq:3 = graph.attention_grad %h, %h, %h, %dy : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<?x8x16xf32>
    return
  }
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x8x16xf32>
    %l = graph.mse_loss %q, %q : tensor<2x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// q, k and v agree; the incoming gradient has another element type.
graph.model @attention_grad_gradient_element_type {
  graph.input @q : tensor<2x8x16xf32>
  graph.input @dy : tensor<2x8x16xf16>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x8x16xf32>
    %dy = graph.get_input @dy : tensor<2x8x16xf16>
    // expected-error @+1 {{'graph.attention_grad' operands have different element types 'f32' and 'f16'; insert a graph.cast}}
    %dq:3 = graph.attention_grad %q, %q, %q, %dy : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf16>
    %l = graph.mse_loss %q, %q : tensor<2x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// The result has v's width (32), not q's (16).
graph.model @attention_grad_gradient_shape {
  graph.input @q : tensor<2x8x16xf32>
  graph.input @v : tensor<2x8x32xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x8x16xf32>
    %v = graph.get_input @v : tensor<2x8x32xf32>
    // expected-error @+1 {{'graph.attention_grad' gradient has shape [2, 8, 16] but the forward result has shape [2, 8, 32]}}
    %dq:3 = graph.attention_grad %q, %q, %v, %q : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x32xf32>, tensor<2x8x16xf32>
    %l = graph.mse_loss %q, %q : tensor<2x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

//===----------------------------------------------------------------------===//
// graph.cross_entropy_grad
//===----------------------------------------------------------------------===//

graph.model @cross_entropy_grad_dynamic_logits {
  graph.input @x : tensor<4xf32>
  func.func private @layer(%logits: tensor<?x10xf32>, %labels: tensor<4xi32>, %dl: tensor<f32>) {
    // expected-error @+1 {{'graph.cross_entropy_grad' expects statically shaped ranked tensors, got 'tensor<?x10xf32>'}}
    %d = graph.cross_entropy_grad %logits, %labels, %dl : tensor<?x10xf32>, tensor<4xi32>
    return
  }
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @cross_entropy_grad_label_shape {
  graph.input @logits : tensor<2x4x16xf32>
  graph.input @labels : tensor<2x3xi32>
  func.func @forward() {
    %logits = graph.get_input @logits : tensor<2x4x16xf32>
    %labels = graph.get_input @labels : tensor<2x3xi32>
    %one = graph.constant dense<1.0> : tensor<f32>
    // expected-error @+1 {{'graph.cross_entropy_grad' cross_entropy needs logits [..., C] and labels [...] with the same leading shape, got [2, 4, 16] and [2, 3]}}
    %d = graph.cross_entropy_grad %logits, %labels, %one : tensor<2x4x16xf32>, tensor<2x3xi32>
    %l = graph.mse_loss %logits, %logits : tensor<2x4x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// The incoming gradient is an f32 scalar; the generic form can pass another type.
graph.model @cross_entropy_grad_gradient_type {
  graph.input @logits : tensor<4x16xf32>
  graph.input @labels : tensor<4xi32>
  func.func @forward() {
    %logits = graph.get_input @logits : tensor<4x16xf32>
    %labels = graph.get_input @labels : tensor<4xi32>
    %one = graph.constant dense<1.0> : tensor<bf16>
    // expected-error @+1 {{'graph.cross_entropy_grad' op operand #2 must be 0D tensor of 32-bit float values, but got 'tensor<bf16>'}}
    %d = "graph.cross_entropy_grad"(%logits, %labels, %one) {ignore_index = -100 : i64, reduction = 0 : i32} : (tensor<4x16xf32>, tensor<4xi32>, tensor<bf16>) -> tensor<4x16xf32>
    %l = graph.mse_loss %logits, %logits : tensor<4x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

//===----------------------------------------------------------------------===//
// graph.dropout stream
//===----------------------------------------------------------------------===//

graph.model @dropout_float_stream {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+1 {{'graph.dropout' op attribute 'stream' failed to satisfy constraint: 64-bit signless integer attribute}}
    %d = graph.dropout %x {p = 0.1 : f64, stream = 1.0 : f64} : tensor<4x8xf32>
    %l = graph.mse_loss %d, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

//===----------------------------------------------------------------------===//
// graph.state, and graph.model's body with state
//===----------------------------------------------------------------------===//

// The model's body may hold graph.state now; anything else still is rejected.
graph.model @op_next_to_state {
  graph.input @x : tensor<4xf32>
  graph.state @x.grad : tensor<4xf32>
  // expected-error @+1 {{'graph.constant' op cannot appear directly in a graph.model, which holds only graph.param, graph.input, graph.state and func.func (and the graph.param_copy and graph.loss_scale of mixed precision)}}
  %c = graph.constant dense<1.0> : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// Training state is f32 whatever the parameter's type.
graph.model @state_bf16 {
  graph.param @w : tensor<4xbf16> init #graph.zeros
  // expected-error @+1 {{'graph.state' op attribute 'type' failed to satisfy constraint: type attribute of statically shaped tensor of 32-bit float values}}
  graph.state @w.grad : tensor<4xbf16>
  func.func @forward() {
    %w = graph.get_param @w : tensor<4xbf16>
    %l = graph.mse_loss %w, %w : tensor<4xbf16>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @state_dynamic {
  graph.input @x : tensor<4xf32>
  // expected-error @+1 {{'graph.state' op attribute 'type' failed to satisfy constraint: type attribute of statically shaped tensor of 32-bit float values}}
  graph.state @x.grad : tensor<?xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// expected-error @+1 {{'graph.state' op expects parent op 'graph.model'}}
graph.state @orphan : tensor<4xf32>

// -----

// A state is not a parameter: graph.get_param cannot read it.
graph.model @get_param_of_state {
  graph.input @x : tensor<4xf32>
  graph.state @s : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    // expected-error @+1 {{'graph.get_param' op @s is a 'graph.state', not a parameter}}
    %s = graph.get_param @s : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

//===----------------------------------------------------------------------===//
// graph.grad_seed
//===----------------------------------------------------------------------===//

graph.model @grad_seed_zero_steps {
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    // expected-error @+1 {{'graph.grad_seed' op accum_steps must be at least 1, got 0}}
    %seed = graph.grad_seed accum_steps 0
    return
  }
}

// -----

graph.model @grad_seed_negative_steps {
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    // expected-error @+1 {{'graph.grad_seed' op accum_steps must be at least 1, got -2}}
    %seed = graph.grad_seed accum_steps -2
    return
  }
}

// -----

// The loss scale is an f32 scalar (the custom form does not spell its type).
graph.model @grad_seed_bf16_scale {
  graph.input @x : tensor<4xf32>
  graph.input @scale : tensor<bf16>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    %scale = graph.get_input @scale : tensor<bf16>
    // expected-error @+1 {{'graph.grad_seed' op operand #0 must be 0D tensor of 32-bit float values, but got 'tensor<bf16>'}}
    %seed = "graph.grad_seed"(%scale) {accum_steps = 1 : i64} : (tensor<bf16>) -> tensor<f32>
    return
  }
}

// -----

//===----------------------------------------------------------------------===//
// graph.accumulate_grad
//===----------------------------------------------------------------------===//

graph.model @accumulate_grad_unknown_state {
  graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02>
  func.func @forward() {
    %w = graph.get_param @w : tensor<4x2xf32>
    %l = graph.mse_loss %w, %w : tensor<4x2xf32>
    graph.loss %l : tensor<f32>
    // expected-error @+1 {{'graph.accumulate_grad' op refers to an unknown state @w.grad (the gradient accumulator)}}
    graph.accumulate_grad %w into @w.grad : tensor<4x2xf32>
    return
  }
}

// -----

// The gradient goes into the parameter's accumulator, not into the parameter.
graph.model @accumulate_grad_into_param {
  graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02>
  graph.state @w.grad : tensor<4x2xf32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<4x2xf32>
    %l = graph.mse_loss %w, %w : tensor<4x2xf32>
    graph.loss %l : tensor<f32>
    // expected-error @+1 {{'graph.accumulate_grad' op @w is a 'graph.param', not a graph.state (the gradient accumulator)}}
    graph.accumulate_grad %w into @w : tensor<4x2xf32>
    return
  }
}

// -----

graph.model @accumulate_grad_state_shape {
  graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02>
  graph.state @w.grad : tensor<2x4xf32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<4x2xf32>
    %l = graph.mse_loss %w, %w : tensor<4x2xf32>
    graph.loss %l : tensor<f32>
    // expected-error @+1 {{'graph.accumulate_grad' op the gradient accumulator @w.grad has type 'tensor<2x4xf32>' but shape [4, 2] is needed}}
    graph.accumulate_grad %w into @w.grad : tensor<4x2xf32>
    return
  }
}

// -----

//===----------------------------------------------------------------------===//
// graph.global_norm
//===----------------------------------------------------------------------===//

graph.model @global_norm_empty {
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() -> tensor<f32> {
    // expected-error @+1 {{'graph.global_norm' op needs at least one state}}
    %norm = graph.global_norm []
    return %norm : tensor<f32>
  }
}

// -----

graph.model @global_norm_unknown_state {
  graph.input @x : tensor<4xf32>
  graph.state @w.grad : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() -> tensor<f32> {
    // expected-error @+1 {{'graph.global_norm' op refers to an unknown state @b.grad (the norm operand)}}
    %norm = graph.global_norm [@w.grad, @b.grad]
    return %norm : tensor<f32>
  }
}

// -----

graph.model @global_norm_of_input {
  graph.input @x : tensor<4xf32>
  graph.state @w.grad : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() -> tensor<f32> {
    // expected-error @+1 {{'graph.global_norm' op @x is a 'graph.input', not a graph.state (the norm operand)}}
    %norm = graph.global_norm [@w.grad, @x]
    return %norm : tensor<f32>
  }
}

// -----

graph.model @global_norm_of_function {
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() -> tensor<f32> {
    // expected-error @+1 {{'graph.global_norm' op @forward is a 'func.func', not a graph.state (the norm operand)}}
    %norm = graph.global_norm [@forward]
    return %norm : tensor<f32>
  }
}

// -----

//===----------------------------------------------------------------------===//
// graph.lr_schedule
//===----------------------------------------------------------------------===//

graph.model @lr_schedule_negative_warmup {
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() -> tensor<f32> {
    // expected-error @+1 {{'graph.lr_schedule' op warmup_steps and decay_steps must not be negative}}
    %lr = graph.lr_schedule cosine {lr = 1.0e-03 : f64, warmup_steps = -1 : i64, decay_steps = 100 : i64}
    return %lr : tensor<f32>
  }
}

// -----

graph.model @lr_schedule_zero_lr {
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() -> tensor<f32> {
    // expected-error @+1 {{'graph.lr_schedule' op learning rate must be finite and positive, got 0.0}}
    %lr = graph.lr_schedule constant {lr = 0.0 : f64}
    return %lr : tensor<f32>
  }
}

// -----

graph.model @lr_schedule_infinite_lr {
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() -> tensor<f32> {
    // expected-error @+1 {{'graph.lr_schedule' op learning rate must be finite and positive, got inf}}
    %lr = graph.lr_schedule cosine {lr = 0x7FF0000000000000 : f64}
    return %lr : tensor<f32>
  }
}

// -----

graph.model @lr_schedule_min_lr_above_lr {
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() -> tensor<f32> {
    // expected-error @+1 {{'graph.lr_schedule' op min_lr must be in [0, lr], got 0.01}}
    %lr = graph.lr_schedule cosine {lr = 1.0e-03 : f64, min_lr = 1.0e-02 : f64}
    return %lr : tensor<f32>
  }
}

// -----

graph.model @lr_schedule_negative_min_lr {
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() -> tensor<f32> {
    // expected-error @+1 {{'graph.lr_schedule' op min_lr must be in [0, lr], got -1.0e-05}}
    %lr = graph.lr_schedule cosine {lr = 1.0e-03 : f64, min_lr = -1.0e-05 : f64}
    return %lr : tensor<f32>
  }
}

// -----

// A cosine schedule must decay after its warmup: decay_steps = warmup_steps leaves no decay.
graph.model @lr_schedule_decay_within_warmup {
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() -> tensor<f32> {
    // expected-error @+1 {{'graph.lr_schedule' op decay_steps (100) must exceed warmup_steps (100), or be 0 for the run's number of steps}}
    %lr = graph.lr_schedule cosine {lr = 1.0e-03 : f64, warmup_steps = 100 : i64, decay_steps = 100 : i64}
    return %lr : tensor<f32>
  }
}

// -----

graph.model @lr_schedule_missing_lr {
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() -> tensor<f32> {
    // expected-error @+1 {{'graph.lr_schedule' op requires attribute 'lr'}}
    %lr = graph.lr_schedule constant {warmup_steps = 10 : i64}
    return %lr : tensor<f32>
  }
}

// -----

//===----------------------------------------------------------------------===//
// graph.adamw
//===----------------------------------------------------------------------===//

graph.model @adamw_beta1_one {
  graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02>
  graph.state @w.grad : tensor<4x2xf32>
  graph.state @w.adam_m : tensor<4x2xf32>
  graph.state @w.adam_v : tensor<4x2xf32>
  func.func @micro_step() {
    %w = graph.get_param @w : tensor<4x2xf32>
    %l = graph.mse_loss %w, %w : tensor<4x2xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() {
    %norm = graph.global_norm [@w.grad]
    %lr = graph.lr_schedule constant {lr = 3.0e-04 : f64}
    // expected-error @+1 {{'graph.adamw' op beta1 and beta2 must be in [0, 1), got 1.0 and 0.95}}
    graph.adamw @w grad @w.grad moments @w.adam_m, @w.adam_v lr %lr grad_norm %norm
        {beta1 = 1.0 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64,
         clip_norm = 1.0 : f64}
    return
  }
}

// -----

graph.model @adamw_negative_beta2 {
  graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02>
  graph.state @w.grad : tensor<4x2xf32>
  graph.state @w.adam_m : tensor<4x2xf32>
  graph.state @w.adam_v : tensor<4x2xf32>
  func.func @micro_step() {
    %w = graph.get_param @w : tensor<4x2xf32>
    %l = graph.mse_loss %w, %w : tensor<4x2xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() {
    %norm = graph.global_norm [@w.grad]
    %lr = graph.lr_schedule constant {lr = 3.0e-04 : f64}
    // expected-error @+1 {{'graph.adamw' op beta1 and beta2 must be in [0, 1), got 0.9 and -0.5}}
    graph.adamw @w grad @w.grad moments @w.adam_m, @w.adam_v lr %lr grad_norm %norm
        {beta1 = 0.9 : f64, beta2 = -0.5 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64,
         clip_norm = 1.0 : f64}
    return
  }
}

// -----

graph.model @adamw_zero_eps {
  graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02>
  graph.state @w.grad : tensor<4x2xf32>
  graph.state @w.adam_m : tensor<4x2xf32>
  graph.state @w.adam_v : tensor<4x2xf32>
  func.func @micro_step() {
    %w = graph.get_param @w : tensor<4x2xf32>
    %l = graph.mse_loss %w, %w : tensor<4x2xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() {
    %norm = graph.global_norm [@w.grad]
    %lr = graph.lr_schedule constant {lr = 3.0e-04 : f64}
    // expected-error @+1 {{'graph.adamw' op eps must be finite and positive, got 0.0}}
    graph.adamw @w grad @w.grad moments @w.adam_m, @w.adam_v lr %lr grad_norm %norm
        {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 0.0 : f64, weight_decay = 0.1 : f64,
         clip_norm = 1.0 : f64}
    return
  }
}

// -----

graph.model @adamw_negative_weight_decay {
  graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02>
  graph.state @w.grad : tensor<4x2xf32>
  graph.state @w.adam_m : tensor<4x2xf32>
  graph.state @w.adam_v : tensor<4x2xf32>
  func.func @micro_step() {
    %w = graph.get_param @w : tensor<4x2xf32>
    %l = graph.mse_loss %w, %w : tensor<4x2xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() {
    %norm = graph.global_norm [@w.grad]
    %lr = graph.lr_schedule constant {lr = 3.0e-04 : f64}
    // expected-error @+1 {{'graph.adamw' op weight_decay must be finite and >= 0, got -0.1}}
    graph.adamw @w grad @w.grad moments @w.adam_m, @w.adam_v lr %lr grad_norm %norm
        {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = -0.1 : f64,
         clip_norm = 1.0 : f64}
    return
  }
}

// -----

graph.model @adamw_negative_clip_norm {
  graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02>
  graph.state @w.grad : tensor<4x2xf32>
  graph.state @w.adam_m : tensor<4x2xf32>
  graph.state @w.adam_v : tensor<4x2xf32>
  func.func @micro_step() {
    %w = graph.get_param @w : tensor<4x2xf32>
    %l = graph.mse_loss %w, %w : tensor<4x2xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() {
    %norm = graph.global_norm [@w.grad]
    %lr = graph.lr_schedule constant {lr = 3.0e-04 : f64}
    // expected-error @+1 {{'graph.adamw' op clip_norm must be finite and >= 0 (0 disables clipping), got -1.0}}
    graph.adamw @w grad @w.grad moments @w.adam_m, @w.adam_v lr %lr grad_norm %norm
        {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64,
         clip_norm = -1.0 : f64}
    return
  }
}

// -----

graph.model @adamw_missing_eps {
  graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02>
  graph.state @w.grad : tensor<4x2xf32>
  graph.state @w.adam_m : tensor<4x2xf32>
  graph.state @w.adam_v : tensor<4x2xf32>
  func.func @micro_step() {
    %w = graph.get_param @w : tensor<4x2xf32>
    %l = graph.mse_loss %w, %w : tensor<4x2xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() {
    %norm = graph.global_norm [@w.grad]
    %lr = graph.lr_schedule constant {lr = 3.0e-04 : f64}
    // expected-error @+1 {{'graph.adamw' op requires attribute 'eps'}}
    graph.adamw @w grad @w.grad moments @w.adam_m, @w.adam_v lr %lr grad_norm %norm
        {beta1 = 0.9 : f64, beta2 = 0.95 : f64, weight_decay = 0.1 : f64, clip_norm = 1.0 : f64}
    return
  }
}

// -----

graph.model @adamw_unknown_param {
  graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02>
  graph.state @w.grad : tensor<4x2xf32>
  graph.state @w.adam_m : tensor<4x2xf32>
  graph.state @w.adam_v : tensor<4x2xf32>
  func.func @micro_step() {
    %w = graph.get_param @w : tensor<4x2xf32>
    %l = graph.mse_loss %w, %w : tensor<4x2xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() {
    %norm = graph.global_norm [@w.grad]
    %lr = graph.lr_schedule constant {lr = 3.0e-04 : f64}
    // expected-error @+1 {{'graph.adamw' op updates @v, which is not a graph.param}}
    graph.adamw @v grad @w.grad moments @w.adam_m, @w.adam_v lr %lr grad_norm %norm
        {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64,
         clip_norm = 1.0 : f64}
    return
  }
}

// -----

// The parameter and its accumulator swapped.
graph.model @adamw_updates_state {
  graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02>
  graph.state @w.grad : tensor<4x2xf32>
  graph.state @w.adam_m : tensor<4x2xf32>
  graph.state @w.adam_v : tensor<4x2xf32>
  func.func @micro_step() {
    %w = graph.get_param @w : tensor<4x2xf32>
    %l = graph.mse_loss %w, %w : tensor<4x2xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() {
    %norm = graph.global_norm [@w.grad]
    %lr = graph.lr_schedule constant {lr = 3.0e-04 : f64}
    // expected-error @+1 {{'graph.adamw' op updates @w.grad, which is not a graph.param}}
    graph.adamw @w.grad grad @w moments @w.adam_m, @w.adam_v lr %lr grad_norm %norm
        {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64,
         clip_norm = 1.0 : f64}
    return
  }
}

// -----

// The optimizer updates f32 master weights; a bf16 parameter needs an f32 copy.
graph.model @adamw_bf16_param {
  graph.param @w : tensor<4x2xbf16> init #graph.normal<std = 0.02>
  graph.state @w.grad : tensor<4x2xf32>
  graph.state @w.adam_m : tensor<4x2xf32>
  graph.state @w.adam_v : tensor<4x2xf32>
  func.func @micro_step() {
    %w = graph.get_param @w : tensor<4x2xbf16>
    %l = graph.mse_loss %w, %w : tensor<4x2xbf16>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() {
    %norm = graph.global_norm [@w.grad]
    %lr = graph.lr_schedule constant {lr = 3.0e-04 : f64}
    // expected-error @+1 {{'graph.adamw' op master weights must be f32; @w is 'tensor<4x2xbf16>'}}
    graph.adamw @w grad @w.grad moments @w.adam_m, @w.adam_v lr %lr grad_norm %norm
        {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64,
         clip_norm = 1.0 : f64}
    return
  }
}

// -----

graph.model @adamw_unknown_accumulator {
  graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02>
  graph.state @w.adam_m : tensor<4x2xf32>
  graph.state @w.adam_v : tensor<4x2xf32>
  func.func @micro_step() {
    %w = graph.get_param @w : tensor<4x2xf32>
    %l = graph.mse_loss %w, %w : tensor<4x2xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() {
    %norm = graph.global_norm [@w.adam_m]
    %lr = graph.lr_schedule constant {lr = 3.0e-04 : f64}
    // expected-error @+1 {{'graph.adamw' op refers to an unknown state @w.grad (the gradient accumulator)}}
    graph.adamw @w grad @w.grad moments @w.adam_m, @w.adam_v lr %lr grad_norm %norm
        {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64,
         clip_norm = 1.0 : f64}
    return
  }
}

// -----

graph.model @adamw_first_moment_not_state {
  graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02>
  graph.param @w2 : tensor<4x2xf32> init #graph.zeros
  graph.state @w.grad : tensor<4x2xf32>
  graph.state @w.adam_v : tensor<4x2xf32>
  func.func @micro_step() {
    %w = graph.get_param @w : tensor<4x2xf32>
    %w2 = graph.get_param @w2 : tensor<4x2xf32>
    %l = graph.mse_loss %w, %w2 : tensor<4x2xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() {
    %norm = graph.global_norm [@w.grad]
    %lr = graph.lr_schedule constant {lr = 3.0e-04 : f64}
    // expected-error @+1 {{'graph.adamw' op @w2 is a 'graph.param', not a graph.state (the first moment)}}
    graph.adamw @w grad @w.grad moments @w2, @w.adam_v lr %lr grad_norm %norm
        {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64,
         clip_norm = 1.0 : f64}
    return
  }
}

// -----

// The second moment of another parameter: the moments are shaped like the parameter updated.
graph.model @adamw_second_moment_shape {
  graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02>
  graph.param @b : tensor<2xf32> init #graph.zeros
  graph.state @w.grad : tensor<4x2xf32>
  graph.state @w.adam_m : tensor<4x2xf32>
  graph.state @b.adam_v : tensor<2xf32>
  func.func @micro_step() {
    %w = graph.get_param @w : tensor<4x2xf32>
    %b = graph.get_param @b : tensor<2xf32>
    %y = graph.add %w, %b : tensor<4x2xf32>, tensor<2xf32>
    %l = graph.mse_loss %y, %w : tensor<4x2xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() {
    %norm = graph.global_norm [@w.grad]
    %lr = graph.lr_schedule constant {lr = 3.0e-04 : f64}
    // expected-error @+1 {{'graph.adamw' op the second moment @b.adam_v has type 'tensor<2xf32>' but shape [4, 2] is needed}}
    graph.adamw @w grad @w.grad moments @w.adam_m, @b.adam_v lr %lr grad_norm %norm
        {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64,
         clip_norm = 1.0 : f64}
    return
  }
}

// -----

//===----------------------------------------------------------------------===//
// graph.sgd
//===----------------------------------------------------------------------===//

graph.model @sgd_momentum_one {
  graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02>
  graph.state @w.grad : tensor<4x2xf32>
  graph.state @w.momentum : tensor<4x2xf32>
  func.func @micro_step() {
    %w = graph.get_param @w : tensor<4x2xf32>
    %l = graph.mse_loss %w, %w : tensor<4x2xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() {
    %norm = graph.global_norm [@w.grad]
    %lr = graph.lr_schedule constant {lr = 0.1 : f64}
    // expected-error @+1 {{'graph.sgd' op momentum must be in [0, 1), got 1.0}}
    graph.sgd @w grad @w.grad momentum_buffer @w.momentum lr %lr grad_norm %norm
        {momentum = 1.0 : f64, weight_decay = 0.0 : f64, clip_norm = 0.0 : f64}
    return
  }
}

// -----

graph.model @sgd_nan_momentum {
  graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02>
  graph.state @w.grad : tensor<4x2xf32>
  graph.state @w.momentum : tensor<4x2xf32>
  func.func @micro_step() {
    %w = graph.get_param @w : tensor<4x2xf32>
    %l = graph.mse_loss %w, %w : tensor<4x2xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() {
    %norm = graph.global_norm [@w.grad]
    %lr = graph.lr_schedule constant {lr = 0.1 : f64}
    // expected-error @+1 {{'graph.sgd' op momentum must be in [0, 1), got nan}}
    graph.sgd @w grad @w.grad momentum_buffer @w.momentum lr %lr grad_norm %norm
        {momentum = 0x7FF8000000000000 : f64, weight_decay = 0.0 : f64, clip_norm = 0.0 : f64}
    return
  }
}

// -----

graph.model @sgd_infinite_weight_decay {
  graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02>
  graph.state @w.grad : tensor<4x2xf32>
  graph.state @w.momentum : tensor<4x2xf32>
  func.func @micro_step() {
    %w = graph.get_param @w : tensor<4x2xf32>
    %l = graph.mse_loss %w, %w : tensor<4x2xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() {
    %norm = graph.global_norm [@w.grad]
    %lr = graph.lr_schedule constant {lr = 0.1 : f64}
    // expected-error @+1 {{'graph.sgd' op weight_decay must be finite and >= 0, got inf}}
    graph.sgd @w grad @w.grad momentum_buffer @w.momentum lr %lr grad_norm %norm
        {momentum = 0.9 : f64, weight_decay = 0x7FF0000000000000 : f64, clip_norm = 0.0 : f64}
    return
  }
}

// -----

graph.model @sgd_negative_clip_norm {
  graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02>
  graph.state @w.grad : tensor<4x2xf32>
  graph.state @w.momentum : tensor<4x2xf32>
  func.func @micro_step() {
    %w = graph.get_param @w : tensor<4x2xf32>
    %l = graph.mse_loss %w, %w : tensor<4x2xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() {
    %norm = graph.global_norm [@w.grad]
    %lr = graph.lr_schedule constant {lr = 0.1 : f64}
    // expected-error @+1 {{'graph.sgd' op clip_norm must be finite and >= 0 (0 disables clipping), got -0.5}}
    graph.sgd @w grad @w.grad momentum_buffer @w.momentum lr %lr grad_norm %norm
        {momentum = 0.9 : f64, weight_decay = 0.0 : f64, clip_norm = -0.5 : f64}
    return
  }
}

// -----

graph.model @sgd_updates_input {
  graph.input @x : tensor<4x2xf32>
  graph.state @x.grad : tensor<4x2xf32>
  graph.state @x.momentum : tensor<4x2xf32>
  func.func @micro_step() {
    %x = graph.get_input @x : tensor<4x2xf32>
    %l = graph.mse_loss %x, %x : tensor<4x2xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() {
    %norm = graph.global_norm [@x.grad]
    %lr = graph.lr_schedule constant {lr = 0.1 : f64}
    // expected-error @+1 {{'graph.sgd' op updates @x, which is not a graph.param}}
    graph.sgd @x grad @x.grad momentum_buffer @x.momentum lr %lr grad_norm %norm
        {momentum = 0.9 : f64, weight_decay = 0.0 : f64, clip_norm = 0.0 : f64}
    return
  }
}

// -----

graph.model @sgd_f16_param {
  graph.param @w : tensor<4x2xf16> init #graph.normal<std = 0.02>
  graph.state @w.grad : tensor<4x2xf32>
  graph.state @w.momentum : tensor<4x2xf32>
  func.func @micro_step() {
    %w = graph.get_param @w : tensor<4x2xf16>
    %l = graph.mse_loss %w, %w : tensor<4x2xf16>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() {
    %norm = graph.global_norm [@w.grad]
    %lr = graph.lr_schedule constant {lr = 0.1 : f64}
    // expected-error @+1 {{'graph.sgd' op master weights must be f32; @w is 'tensor<4x2xf16>'}}
    graph.sgd @w grad @w.grad momentum_buffer @w.momentum lr %lr grad_norm %norm
        {momentum = 0.9 : f64, weight_decay = 0.0 : f64, clip_norm = 0.0 : f64}
    return
  }
}

// -----

graph.model @sgd_accumulator_shape {
  graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02>
  graph.state @w.grad : tensor<8xf32>
  graph.state @w.momentum : tensor<4x2xf32>
  func.func @micro_step() {
    %w = graph.get_param @w : tensor<4x2xf32>
    %l = graph.mse_loss %w, %w : tensor<4x2xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() {
    %norm = graph.global_norm [@w.grad]
    %lr = graph.lr_schedule constant {lr = 0.1 : f64}
    // expected-error @+1 {{'graph.sgd' op the gradient accumulator @w.grad has type 'tensor<8xf32>' but shape [4, 2] is needed}}
    graph.sgd @w grad @w.grad momentum_buffer @w.momentum lr %lr grad_norm %norm
        {momentum = 0.9 : f64, weight_decay = 0.0 : f64, clip_norm = 0.0 : f64}
    return
  }
}

// -----

graph.model @sgd_accumulator_not_state {
  graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02>
  graph.input @dw : tensor<4x2xf32>
  graph.state @w.momentum : tensor<4x2xf32>
  func.func @micro_step() {
    %w = graph.get_param @w : tensor<4x2xf32>
    %l = graph.mse_loss %w, %w : tensor<4x2xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() {
    %norm = graph.global_norm [@w.momentum]
    %lr = graph.lr_schedule constant {lr = 0.1 : f64}
    // expected-error @+1 {{'graph.sgd' op @dw is a 'graph.input', not a graph.state (the gradient accumulator)}}
    graph.sgd @w grad @dw momentum_buffer @w.momentum lr %lr grad_norm %norm
        {momentum = 0.9 : f64, weight_decay = 0.0 : f64, clip_norm = 0.0 : f64}
    return
  }
}

// -----

graph.model @sgd_unknown_momentum_buffer {
  graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02>
  graph.state @w.grad : tensor<4x2xf32>
  func.func @micro_step() {
    %w = graph.get_param @w : tensor<4x2xf32>
    %l = graph.mse_loss %w, %w : tensor<4x2xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() {
    %norm = graph.global_norm [@w.grad]
    %lr = graph.lr_schedule constant {lr = 0.1 : f64}
    // expected-error @+1 {{'graph.sgd' op refers to an unknown state @w.momentum (the momentum buffer)}}
    graph.sgd @w grad @w.grad momentum_buffer @w.momentum lr %lr grad_norm %norm
        {momentum = 0.9 : f64, weight_decay = 0.0 : f64, clip_norm = 0.0 : f64}
    return
  }
}

// -----

graph.model @sgd_momentum_buffer_shape {
  graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02>
  graph.state @w.grad : tensor<4x2xf32>
  graph.state @w.momentum : tensor<4x2x1xf32>
  func.func @micro_step() {
    %w = graph.get_param @w : tensor<4x2xf32>
    %l = graph.mse_loss %w, %w : tensor<4x2xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() {
    %norm = graph.global_norm [@w.grad]
    %lr = graph.lr_schedule constant {lr = 0.1 : f64}
    // expected-error @+1 {{'graph.sgd' op the momentum buffer @w.momentum has type 'tensor<4x2x1xf32>' but shape [4, 2] is needed}}
    graph.sgd @w grad @w.grad momentum_buffer @w.momentum lr %lr grad_norm %norm
        {momentum = 0.9 : f64, weight_decay = 0.0 : f64, clip_norm = 0.0 : f64}
    return
  }
}

// -----

graph.model @dropout_negative_stream {
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    // expected-error @+1 {{'graph.dropout' op dropout stream must not be negative, got -1}}
    %d = graph.dropout %x {p = 0.5 : f64, stream = -1 : i64} : tensor<4xf32>
    %l = graph.mse_loss %d, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @softmax_grad_scalar {
  graph.input @x : tensor<f32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<f32>
    // expected-error @+1 {{'graph.softmax_grad' op softmax_grad needs a tensor of rank >= 1}}
    %d = graph.softmax_grad %x, %x : tensor<f32>
    %l = graph.mse_loss %d, %x : tensor<f32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @state_empty_dimension {
  // expected-error @+1 {{'graph.state' op state @s has an empty dimension in 'tensor<0x4xf32>'}}
  graph.state @s : tensor<0x4xf32>
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @global_norm_repeated_state {
  graph.state @a : tensor<4xf32>
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func @optimizer_step() -> tensor<f32> {
    // expected-error @+1 {{'graph.global_norm' op names @a twice; each state counts once in the norm}}
    %norm = graph.global_norm [@a, @a]
    return %norm : tensor<f32>
  }
}

// -----

graph.model @pad_overflow {
  graph.input @x : tensor<1xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<1xf32>
    // expected-error @+1 {{'graph.pad' padded dimension 0 overflows int64}}
    %p = graph.pad %x low [9223372036854775807] high [0] : tensor<1xf32>
    %l = graph.sum %p axes [0] : tensor<9223372036854775808xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @matmul_f16_result {
  graph.input @x : tensor<8x4xbf16>
  func.func @forward() {
    %x = graph.get_input @x : tensor<8x4xbf16>
    // expected-error @+1 {{'graph.matmul' can write f32 from bf16 or f16 operands (-> f32), not 'f16' from 'bf16'}}
    %g = graph.matmul %x, %x transpose_lhs : tensor<8x4xbf16>, tensor<8x4xbf16> -> f16
    %l = graph.sum %g axes [0, 1] : tensor<4x4xf16>
    graph.loss %l : tensor<f16>
    return
  }
}

//===----------------------------------------------------------------------===//
// graph.conv2d_grad_input, graph.conv2d_grad_weight, graph.max_pool2d_grad,
// graph.avg_pool2d_grad, graph.clip_grad (GraphConvOps.cpp)
//===----------------------------------------------------------------------===//

// -----

graph.model @conv2d_grad_input_shape {
  graph.input @z : tensor<4xf32>
  graph.input @dy : tensor<2x6x4x4xf32>
  graph.input @w : tensor<6x4x3x3xf32>
  func.func @forward() {
    %dy = graph.get_input @dy : tensor<2x6x4x4xf32>
    %w = graph.get_input @w : tensor<6x4x3x3xf32>
    // expected-error @+1 {{'graph.conv2d_grad_input' op gradient [2, 6, 4, 4] does not match the forward result [2, 6, 5, 5] that the result type implies}}
    %dx = graph.conv2d_grad_input %dy, %w strides [2, 2] padding [1, 1, 1, 1] : tensor<2x6x4x4xf32>, tensor<6x4x3x3xf32> -> tensor<2x4x9x9xf32>
    %z = graph.get_input @z : tensor<4xf32>
    %l = graph.mse_loss %z, %z : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @conv2d_grad_input_element {
  graph.input @z : tensor<4xf32>
  graph.input @dy : tensor<2x6x7x7xf32>
  graph.input @w : tensor<6x4x3x3xf32>
  func.func @forward() {
    %dy = graph.get_input @dy : tensor<2x6x7x7xf32>
    %w = graph.get_input @w : tensor<6x4x3x3xf32>
    // expected-error @+1 {{'graph.conv2d_grad_input' operands have different element types 'f32' and 'bf16'; insert a graph.cast}}
    %dx = graph.conv2d_grad_input %dy, %w : tensor<2x6x7x7xf32>, tensor<6x4x3x3xf32> -> tensor<2x4x9x9xbf16>
    %z = graph.get_input @z : tensor<4xf32>
    %l = graph.mse_loss %z, %z : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @conv2d_grad_input_groups {
  graph.input @z : tensor<4xf32>
  graph.input @dy : tensor<2x6x7x7xf32>
  graph.input @w : tensor<6x4x3x3xf32>
  func.func @forward() {
    %dy = graph.get_input @dy : tensor<2x6x7x7xf32>
    %w = graph.get_input @w : tensor<6x4x3x3xf32>
    // expected-error @+1 {{'graph.conv2d_grad_input' groups (4) must divide the input channels (4) and the output channels (6)}}
    %dx = graph.conv2d_grad_input %dy, %w groups 4 : tensor<2x6x7x7xf32>, tensor<6x4x3x3xf32> -> tensor<2x4x9x9xf32>
    %z = graph.get_input @z : tensor<4xf32>
    %l = graph.mse_loss %z, %z : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @conv2d_grad_weight_element {
  graph.input @z : tensor<4xf32>
  graph.input @x : tensor<2x4x9x9xbf16>
  graph.input @dy : tensor<2x6x7x7xbf16>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x9x9xbf16>
    %dy = graph.get_input @dy : tensor<2x6x7x7xbf16>
    // expected-error @+1 {{'graph.conv2d_grad_weight' op result element type must be the operands' ('bf16') or f32, got 'f16'}}
    %dw = graph.conv2d_grad_weight %x, %dy : tensor<2x4x9x9xbf16>, tensor<2x6x7x7xbf16> -> tensor<6x4x3x3xf16>
    %z = graph.get_input @z : tensor<4xf32>
    %l = graph.mse_loss %z, %z : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @conv2d_grad_weight_shape {
  graph.input @z : tensor<4xf32>
  graph.input @x : tensor<2x4x9x9xf32>
  graph.input @dy : tensor<2x6x7x7xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x9x9xf32>
    %dy = graph.get_input @dy : tensor<2x6x7x7xf32>
    // expected-error @+1 {{'graph.conv2d_grad_weight' op gradient [2, 6, 7, 7] does not match the forward result [2, 6, 8, 8] that the result type implies}}
    %dw = graph.conv2d_grad_weight %x, %dy : tensor<2x4x9x9xf32>, tensor<2x6x7x7xf32> -> tensor<6x4x2x2xf32>
    %z = graph.get_input @z : tensor<4xf32>
    %l = graph.mse_loss %z, %z : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @max_pool2d_grad_shape {
  graph.input @z : tensor<4xf32>
  graph.input @x : tensor<2x4x9x9xf32>
  graph.input @dy : tensor<2x4x4x4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x9x9xf32>
    %dy = graph.get_input @dy : tensor<2x4x4x4xf32>
    // expected-error @+1 {{'graph.max_pool2d_grad' gradient has shape [2, 4, 4, 4] but the forward result has shape [2, 4, 5, 5]}}
    %dx = graph.max_pool2d_grad %x, %dy kernel_size [3, 3] strides [2, 2] padding [1, 1, 1, 1] : tensor<2x4x9x9xf32>, tensor<2x4x4x4xf32>
    %z = graph.get_input @z : tensor<4xf32>
    %l = graph.mse_loss %z, %z : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @max_pool2d_grad_padding {
  graph.input @z : tensor<4xf32>
  graph.input @x : tensor<2x4x9x9xf32>
  graph.input @dy : tensor<2x4x4x4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x9x9xf32>
    %dy = graph.get_input @dy : tensor<2x4x4x4xf32>
    // expected-error @+1 {{'graph.max_pool2d_grad' padding [3, 3, 3, 3] must be at most half the window (3 along height)}}
    %dx = graph.max_pool2d_grad %x, %dy kernel_size [3, 3] strides [2, 2] padding [3, 3, 3, 3] : tensor<2x4x9x9xf32>, tensor<2x4x4x4xf32>
    %z = graph.get_input @z : tensor<4xf32>
    %l = graph.mse_loss %z, %z : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @avg_pool2d_grad_shape {
  graph.input @z : tensor<4xf32>
  graph.input @dy : tensor<2x4x4x4xf32>
  func.func @forward() {
    %dy = graph.get_input @dy : tensor<2x4x4x4xf32>
    // expected-error @+1 {{'graph.avg_pool2d_grad' op gradient [2, 4, 4, 4] does not match the forward result [2, 4, 5, 5] that the result type implies}}
    %dx = graph.avg_pool2d_grad %dy kernel_size [3, 3] strides [2, 2] padding [1, 1, 1, 1] : tensor<2x4x4x4xf32> -> tensor<2x4x9x9xf32>
    %z = graph.get_input @z : tensor<4xf32>
    %l = graph.mse_loss %z, %z : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @avg_pool2d_grad_element {
  graph.input @z : tensor<4xf32>
  graph.input @dy : tensor<2x4x5x5xf32>
  func.func @forward() {
    %dy = graph.get_input @dy : tensor<2x4x5x5xf32>
    // expected-error @+1 {{'graph.avg_pool2d_grad' operands have different element types 'f32' and 'f16'; insert a graph.cast}}
    %dx = graph.avg_pool2d_grad %dy kernel_size [3, 3] strides [2, 2] padding [1, 1, 1, 1] : tensor<2x4x5x5xf32> -> tensor<2x4x9x9xf16>
    %z = graph.get_input @z : tensor<4xf32>
    %l = graph.mse_loss %z, %z : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @clip_grad_bounds_order {
  graph.input @z : tensor<4xf32>
  graph.input @x : tensor<2x4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4xf32>
    // expected-error @+1 {{'graph.clip_grad' op min (1) must not exceed max (-1)}}
    %dx = graph.clip_grad %x, %x {min = 1.0 : f64, max = -1.0 : f64} : tensor<2x4xf32>
    %z = graph.get_input @z : tensor<4xf32>
    %l = graph.mse_loss %z, %z : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
