// RUN: ampc-opt %s -split-input-file -verify-diagnostics

// invalid.mlir: one case per diagnostic of the graph dialect, grouped by op: model structure and
// symbol references (GraphOps.cpp), the initializer attributes (GraphDialect.cpp), the op
// verifiers, the shape rules behind result-type inference (ShapeRules.cpp), and representative
// ODS-generated constraint errors (dynamic shapes, f64 and integer element types, attribute
// kinds, SameOperandsAndResultType, AllTypesMatch). Every case is a well-formed model except for
// the op under test, so each diagnostic comes from the check it names and not from an earlier
// one. Shape-rule errors of ops that infer their result type are reported while the custom form
// is parsed; verifier errors after parsing.

//===----------------------------------------------------------------------===//
// graph.model
//===----------------------------------------------------------------------===//

// expected-error @+1 {{'graph.model' op has no graph.loss: mark the model's scalar loss with graph.loss in its entry function}}
graph.model @no_loss {
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    return
  }
}

// -----

graph.model @two_losses {
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    // expected-note @+1 {{the first graph.loss is here}}
    graph.loss %l : tensor<f32>
    // expected-error @+1 {{'graph.loss' op is a second loss; a model has exactly one graph.loss}}
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// The second loss may also sit in another function: still one loss per model.
graph.model @losses_in_two_functions {
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    // expected-note @+1 {{the first graph.loss is here}}
    graph.loss %l : tensor<f32>
    return
  }
  func.func @eval() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    // expected-error @+1 {{'graph.loss' op is a second loss; a model has exactly one graph.loss}}
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @op_in_model_body {
  graph.input @x : tensor<4xf32>
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

graph.model @nested_model {
  graph.input @x : tensor<4xf32>
  // expected-error @+1 {{'graph.model' op cannot appear directly in a graph.model, which holds only graph.param, graph.input, graph.state and func.func (and the graph.param_copy and graph.loss_scale of mixed precision)}}
  graph.model @inner {
    func.func @forward() {
      %c = graph.constant dense<1.0> : tensor<f32>
      graph.loss %c : tensor<f32>
      return
    }
  }
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @calls_entry {
  graph.input @x : tensor<4xf32>
  func.func private @again() {
    // expected-error @+1 {{'func.call' op calls the entry function @forward, which holds the graph.loss and may not be called}}
    func.call @forward() : () -> ()
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

graph.model @self_recursion {
  graph.input @x : tensor<4xf32>
  func.func private @layer(%h: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error @+1 {{'func.call' op makes a recursive call to @layer; a model's functions may not recurse}}
    %y = func.call @layer(%h) : (tensor<4xf32>) -> tensor<4xf32>
    return %y : tensor<4xf32>
  }
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %h = func.call @layer(%x) : (tensor<4xf32>) -> tensor<4xf32>
    %l = graph.mse_loss %h, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// @forward -> @even -> @odd -> @even: the call that closes the cycle is reported.
graph.model @mutual_recursion {
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %h = func.call @even(%x) : (tensor<4xf32>) -> tensor<4xf32>
    %l = graph.mse_loss %h, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func private @even(%h: tensor<4xf32>) -> tensor<4xf32> {
    %y = func.call @odd(%h) : (tensor<4xf32>) -> tensor<4xf32>
    return %y : tensor<4xf32>
  }
  func.func private @odd(%h: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error @+1 {{'func.call' op makes a recursive call to @even; a model's functions may not recurse}}
    %y = func.call @even(%h) : (tensor<4xf32>) -> tensor<4xf32>
    return %y : tensor<4xf32>
  }
}

// -----

//===----------------------------------------------------------------------===//
// graph.param, graph.input and the initializer attributes
//===----------------------------------------------------------------------===//

graph.model @given_without_weights {
  // expected-error @+1 {{'graph.param' op parameter @w is initialised #graph.given, but the model names no weights file: add attributes {weights = "FILE.safetensors"} to graph.model}}
  graph.param @w : tensor<4xf32> init #graph.given
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @empty_input_dimension {
  // expected-error @+1 {{'graph.input' op input @x has an empty dimension in 'tensor<0x4xf32>': a batch needs at least one element along every dimension}}
  graph.input @x : tensor<0x4xf32>
  graph.input @y : tensor<4xf32>
  func.func @forward() {
    %y = graph.get_input @y : tensor<4xf32>
    %l = graph.mse_loss %y, %y : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @empty_constant {
  graph.input @y : tensor<4xf32>
  func.func @forward() {
    // expected-error @+1 {{'graph.constant' op constant 'tensor<0xf32>' has no elements}}
    %c = graph.constant dense<> : tensor<0xf32>
    %y = graph.get_input @y : tensor<4xf32>
    %l = graph.mse_loss %y, %y : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @empty_param_dimension {
  // expected-error @+1 {{'graph.param' op parameter @w has an empty dimension in 'tensor<4x0xf32>'}}
  graph.param @w : tensor<4x0xf32> init #graph.zeros
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @integer_param {
  // expected-error @+1 {{'graph.param' op attribute 'type' failed to satisfy constraint: type attribute of statically shaped tensor of 32-bit float or bfloat16 type or 16-bit float values}}
  graph.param @w : tensor<4xi32> init #graph.zeros
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @init_not_an_initializer {
  // expected-error @+1 {{'graph.param' op attribute 'init' failed to satisfy constraint: initialise every element to 0 or initialise every element to 1 or initialise from a normal distribution or initialise from a uniform distribution on [low, high)}}
  graph.param @w : tensor<4xf32> init 0.0 : f32
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @weight_decay_not_bool {
  // expected-error @+1 {{'graph.param' op attribute 'weight_decay' failed to satisfy constraint: bool attribute}}
  graph.param @w : tensor<4xf32> init #graph.zeros {weight_decay = 1 : i32}
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// expected-error @+1 {{'graph.param' op expects parent op 'graph.model'}}
graph.param @outside : tensor<4xf32> init #graph.zeros

// -----

graph.model @f64_input {
  // expected-error @+1 {{'graph.input' op attribute 'type' failed to satisfy constraint: type attribute of statically shaped tensor of 32-bit float or bfloat16 type or 16-bit float or 32-bit signless integer or 64-bit signless integer values}}
  graph.input @x : tensor<4xf64>
  func.func @forward() {
    %c = graph.constant dense<1.0> : tensor<f32>
    graph.loss %c : tensor<f32>
    return
  }
}

// -----

graph.model @dynamic_input {
  // expected-error @+1 {{'graph.input' op attribute 'type' failed to satisfy constraint: type attribute of statically shaped tensor}}
  graph.input @x : tensor<?x4xf32>
  func.func @forward() {
    %c = graph.constant dense<1.0> : tensor<f32>
    graph.loss %c : tensor<f32>
    return
  }
}

// -----

graph.model @normal_zero_std {
  // expected-error @+1 {{normal initializer needs a finite mean and std > 0, got mean = 0.0, std = 0.0}}
  graph.param @w : tensor<4xf32> init #graph.normal<std = 0.0>
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @normal_negative_std {
  // expected-error @+1 {{normal initializer needs a finite mean and std > 0, got mean = 1.0, std = -0.02}}
  graph.param @w : tensor<4xf32> init #graph.normal<mean = 1.0, std = -0.02>
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @uniform_empty_range {
  // expected-error @+1 {{uniform initializer needs finite bounds with low < high, got low = 0.1, high = 0.1}}
  graph.param @w : tensor<4xf32> init #graph.uniform<low = 0.1, high = 0.1>
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @uniform_reversed_range {
  // expected-error @+1 {{uniform initializer needs finite bounds with low < high, got low = 0.1, high = -0.1}}
  graph.param @w : tensor<4xf32> init #graph.uniform<low = 0.1, high = -0.1>
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @normal_unknown_field {
  // expected-error @+1 {{unknown initializer field 'stddev'; expected 'mean', 'std'}}
  graph.param @w : tensor<4xf32> init #graph.normal<stddev = 0.02>
}

// -----

graph.model @uniform_unknown_field {
  // expected-error @+1 {{unknown initializer field 'std'; expected 'low', 'high'}}
  graph.param @w : tensor<4xf32> init #graph.uniform<low = 0.0, std = 0.02>
}

// -----

graph.model @normal_duplicate_field {
  // expected-error @+1 {{initializer field 'std' given twice}}
  graph.param @w : tensor<4xf32> init #graph.normal<std = 0.02, std = 0.01>
}

// -----

// The attribute dictionary follows on the same line: the missing-field error is reported where
// the field list ends.
graph.model @normal_missing_std {
  // expected-error @+1 {{initializer needs the field 'std'}}
  graph.param @w : tensor<4xf32> init #graph.normal<mean = 0.0> {weight_decay = false}
}

// -----

graph.model @uniform_missing_high {
  // expected-error @+1 {{initializer needs the field 'high'}}
  graph.param @w : tensor<4xf32> init #graph.uniform<low = 0.0> {weight_decay = false}
}

// -----

//===----------------------------------------------------------------------===//
// graph.get_param, graph.get_input
//===----------------------------------------------------------------------===//

graph.model @unknown_param {
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    // expected-error @+1 {{'graph.get_param' op refers to an unknown parameter @w}}
    %w = graph.get_param @w : tensor<4xf32>
    %l = graph.mse_loss %w, %w : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @param_is_an_input {
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    // expected-error @+1 {{'graph.get_param' op @x is a 'graph.input', not a parameter}}
    %w = graph.get_param @x : tensor<4xf32>
    %l = graph.mse_loss %w, %w : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @param_is_a_function {
  func.func @forward() {
    // expected-error @+1 {{'graph.get_param' op @forward is a 'func.func', not a parameter}}
    %w = graph.get_param @forward : tensor<4xf32>
    %l = graph.mse_loss %w, %w : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @param_read_with_other_type {
  graph.param @w : tensor<4xf32> init #graph.ones
  func.func @forward() {
    // expected-error @+1 {{'graph.get_param' op parameter @w is declared as 'tensor<4xf32>' but read as 'tensor<4xbf16>'}}
    %w = graph.get_param @w : tensor<4xbf16>
    %l = graph.mse_loss %w, %w : tensor<4xbf16>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @integer_param_read {
  graph.input @t : tensor<4xi32>
  func.func @forward() {
    // expected-error @+1 {{'graph.get_param' op result #0 must be statically shaped tensor of 32-bit float or bfloat16 type or 16-bit float values, but got 'tensor<4xi32>'}}
    %w = graph.get_param @t : tensor<4xi32>
    %c = graph.constant dense<1.0> : tensor<f32>
    graph.loss %c : tensor<f32>
    return
  }
}

// -----

graph.model @unknown_input {
  graph.param @w : tensor<4xf32> init #graph.ones
  func.func @forward() {
    // expected-error @+1 {{'graph.get_input' op refers to an unknown input @x}}
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @input_is_a_param {
  graph.param @w : tensor<4xf32> init #graph.ones
  func.func @forward() {
    // expected-error @+1 {{'graph.get_input' op @w is a 'graph.param', not an input}}
    %x = graph.get_input @w : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @input_read_with_other_type {
  graph.input @x : tensor<2x4xf32>
  func.func @forward() {
    // expected-error @+1 {{'graph.get_input' op input @x is declared as 'tensor<2x4xf32>' but read as 'tensor<8xf32>'}}
    %x = graph.get_input @x : tensor<8xf32>
    %l = graph.mse_loss %x, %x : tensor<8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

//===----------------------------------------------------------------------===//
// graph.loss
//===----------------------------------------------------------------------===//

graph.model @non_scalar_loss {
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    // expected-error @+1 {{'graph.loss' op the loss must be a scalar float tensor such as tensor<f32>, got 'tensor<4xf32>'}}
    graph.loss %x : tensor<4xf32>
    return
  }
}

// -----

graph.model @integer_loss {
  graph.input @t : tensor<i32>
  func.func @forward() {
    %t = graph.get_input @t : tensor<i32>
    // expected-error @+1 {{'graph.loss' op the loss must be a scalar float tensor such as tensor<f32>, got 'tensor<i32>'}}
    graph.loss %t : tensor<i32>
    return
  }
}

// -----

func.func @loss_outside_a_model() {
  %c = graph.constant dense<1.0> : tensor<f32>
  // expected-error @+1 {{'graph.loss' op must be inside a graph.model}}
  graph.loss %c : tensor<f32>
  return
}

// -----

graph.model @entry_with_arguments {
  func.func @forward(%x: tensor<4xf32>) {
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    // expected-error @+1 {{'graph.loss' op must be in the model's entry function, which takes no arguments and returns nothing (read parameters and inputs with graph.get_param and graph.get_input)}}
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// The loss computed in a called block rather than in the entry function.
graph.model @loss_in_called_function {
  graph.input @x : tensor<4xf32>
  func.func private @head(%h: tensor<4xf32>) {
    %l = graph.mse_loss %h, %h : tensor<4xf32>
    // expected-error @+1 {{'graph.loss' op must be in the model's entry function}}
    graph.loss %l : tensor<f32>
    return
  }
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    func.call @head(%x) : (tensor<4xf32>) -> ()
    return
  }
}

// -----

graph.model @entry_with_results {
  graph.input @x : tensor<4xf32>
  func.func @forward() -> tensor<f32> {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    // expected-error @+1 {{'graph.loss' op must be in the model's entry function, which takes no arguments and returns nothing}}
    graph.loss %l : tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

graph.model @loss_in_model_body {
  %c = graph.constant dense<1.0> : tensor<f32>
  // expected-error @+1 {{'graph.loss' op must be in the model's entry function}}
  graph.loss %c : tensor<f32>
}

// -----

//===----------------------------------------------------------------------===//
// graph.constant, graph.cast
//===----------------------------------------------------------------------===//

graph.model @f64_constant {
  func.func @forward() {
    // expected-error @+1 {{'graph.constant' op result #0 must be statically shaped tensor of 32-bit float or bfloat16 type or 16-bit float or 32-bit signless integer or 64-bit signless integer values, but got 'tensor<f64>'}}
    %c = graph.constant dense<1.0> : tensor<f64>
    %d = graph.constant dense<1.0> : tensor<f32>
    graph.loss %d : tensor<f32>
    return
  }
}

// -----

graph.model @constant_type_mismatch {
  func.func @forward() {
    // expected-error @+1 {{'graph.constant' op failed to verify that all of {value, result} have same type}}
    %c = "graph.constant"() <{value = dense<1.0> : tensor<2xf32>}> : () -> tensor<3xf32>
    %d = graph.constant dense<1.0> : tensor<f32>
    graph.loss %d : tensor<f32>
    return
  }
}

// -----

graph.model @cast_changes_shape {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+1 {{'graph.cast' op requires the same shape for all operands and results}}
    %h = graph.cast %x : tensor<4x8xf32> -> tensor<8x4xbf16>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

//===----------------------------------------------------------------------===//
// Elementwise ops
//===----------------------------------------------------------------------===//

graph.model @add_no_broadcast {
  graph.input @x : tensor<4x8xf32>
  graph.input @b : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %b = graph.get_input @b : tensor<4xf32>
    // expected-error @+1 {{'graph.add' shapes [4, 8] and [4] do not broadcast: the dimensions 1 from the end are 8 and 4}}
    %y = graph.add %x, %b : tensor<4x8xf32>, tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @sub_no_broadcast {
  graph.input @x : tensor<2x4x8xf32>
  graph.input @b : tensor<3x1x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x8xf32>
    %b = graph.get_input @b : tensor<3x1x8xf32>
    // expected-error @+1 {{'graph.sub' shapes [2, 4, 8] and [3, 1, 8] do not broadcast: the dimensions 3 from the end are 2 and 3}}
    %y = graph.sub %x, %b : tensor<2x4x8xf32>, tensor<3x1x8xf32>
    %l = graph.mse_loss %x, %x : tensor<2x4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @mul_no_broadcast {
  graph.input @x : tensor<4x8xf32>
  graph.input @b : tensor<4x2xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %b = graph.get_input @b : tensor<4x2xf32>
    // expected-error @+1 {{'graph.mul' shapes [4, 8] and [4, 2] do not broadcast}}
    %y = graph.mul %x, %b : tensor<4x8xf32>, tensor<4x2xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @div_no_broadcast {
  graph.input @x : tensor<4x8xf32>
  graph.input @b : tensor<3xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %b = graph.get_input @b : tensor<3xf32>
    // expected-error @+1 {{'graph.div' shapes [4, 8] and [3] do not broadcast}}
    %y = graph.div %x, %b : tensor<4x8xf32>, tensor<3xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @add_mixed_element_types {
  graph.input @x : tensor<4x8xf32>
  graph.input @h : tensor<4x8xbf16>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %h = graph.get_input @h : tensor<4x8xbf16>
    // expected-error @+1 {{'graph.add' operands have different element types 'f32' and 'bf16'; insert a graph.cast}}
    %y = graph.add %x, %h : tensor<4x8xf32>, tensor<4x8xbf16>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @add_dynamic_operand {
  graph.input @x : tensor<4x8xf32>
  func.func private @layer(%h: tensor<?x8xf32>) {
    // expected-error @+1 {{expects statically shaped ranked tensors, got 'tensor<?x8xf32>'}}
    %y = graph.add %h, %h : tensor<?x8xf32>, tensor<?x8xf32>
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

graph.model @add_integer_operands {
  graph.input @x : tensor<4x8xf32>
  graph.input @t : tensor<4x8xi32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %t = graph.get_input @t : tensor<4x8xi32>
    // expected-error @+1 {{'graph.add' op operand #0 must be statically shaped tensor of 32-bit float or bfloat16 type or 16-bit float values, but got 'tensor<4x8xi32>'}}
    %y = graph.add %t, %t : tensor<4x8xi32>, tensor<4x8xi32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// The generic form spells the result type, which must agree with the inferred one.
graph.model @add_wrong_result_type {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+2 {{'graph.add' op inferred type(s) 'tensor<4x8xf32>' are incompatible with return type(s) of operation 'tensor<8x4xf32>'}}
    // expected-error @+1 {{'graph.add' op failed to infer returned types}}
    %y = "graph.add"(%x, %x) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x4xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @generic_dynamic_operand {
  graph.input @x : tensor<4x8xf32>
  func.func private @layer(%h: tensor<?x8xf32>) {
    // expected-error @+1 {{'graph.neg' op operand #0 must be statically shaped tensor of 32-bit float or bfloat16 type or 16-bit float values, but got 'tensor<?x8xf32>'}}
    %y = graph.neg %h : tensor<?x8xf32>
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

graph.model @f64_operand {
  graph.input @x : tensor<4x8xf32>
  func.func private @layer(%h: tensor<4x8xf64>) {
    // expected-error @+1 {{'graph.relu' op operand #0 must be statically shaped tensor of 32-bit float or bfloat16 type or 16-bit float values, but got 'tensor<4x8xf64>'}}
    %y = graph.relu %h : tensor<4x8xf64>
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

graph.model @activation_integer_operand {
  graph.input @ids : tensor<4x8xi32>
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %ids = graph.get_input @ids : tensor<4x8xi32>
    // expected-error @+1 {{'graph.hardswish' op operand #0 must be statically shaped tensor of 32-bit float or bfloat16 type or 16-bit float values, but got 'tensor<4x8xi32>'}}
    %y = graph.hardswish %ids : tensor<4x8xi32>
    %x = graph.get_input @x : tensor<4x8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @unary_result_type_differs {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+1 {{'graph.exp' op requires the same type for all operands and results}}
    %y = "graph.exp"(%x) : (tensor<4x8xf32>) -> tensor<4x8xbf16>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @gelu_unknown_approximation {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+1 {{expected string or keyword containing one of the following enum values for attribute 'approximation' [erf, tanh]}}
    %y = graph.gelu sigmoid %x : tensor<4x8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @dropout_p_one {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+1 {{'graph.dropout' op dropout probability must be in [0, 1), got 1.0}}
    %y = graph.dropout %x {p = 1.0 : f64} : tensor<4x8xf32>
    %l = graph.mse_loss %y, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @dropout_p_negative {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+1 {{'graph.dropout' op dropout probability must be in [0, 1), got -0.1}}
    %y = graph.dropout %x {p = -0.1 : f64} : tensor<4x8xf32>
    %l = graph.mse_loss %y, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @dropout_p_missing {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+1 {{'graph.dropout' op requires attribute 'p'}}
    %y = graph.dropout %x : tensor<4x8xf32>
    %l = graph.mse_loss %y, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

//===----------------------------------------------------------------------===//
// graph.matmul
//===----------------------------------------------------------------------===//

graph.model @matmul_rank_one {
  graph.input @x : tensor<4x8xf32>
  graph.input @v : tensor<8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %v = graph.get_input @v : tensor<8xf32>
    // expected-error @+1 {{'graph.matmul' matmul operands need rank >= 2, got [4, 8] and [8]}}
    %y = graph.matmul %x, %v : tensor<4x8xf32>, tensor<8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @matmul_contraction_mismatch {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+1 {{'graph.matmul' matmul contraction dimensions differ: lhs is [4, 8] and rhs is [4, 8] (after transposes), so K is 8 vs 4}}
    %y = graph.matmul %x, %x : tensor<4x8xf32>, tensor<4x8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// Both flags set: lhs [8, 4] becomes [4, 8] and rhs [8, 4] becomes [4, 8], so K is 8 vs 4.
graph.model @matmul_contraction_mismatch_after_transposes {
  graph.input @x : tensor<8x4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<8x4xf32>
    // expected-error @+1 {{'graph.matmul' matmul contraction dimensions differ: lhs is [4, 8] and rhs is [4, 8] (after transposes), so K is 8 vs 4}}
    %y = graph.matmul %x, %x transpose_lhs transpose_rhs : tensor<8x4xf32>, tensor<8x4xf32>
    %l = graph.mse_loss %x, %x : tensor<8x4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @matmul_batch_mismatch {
  graph.input @a : tensor<2x4x8xf32>
  graph.input @b : tensor<3x8x4xf32>
  func.func @forward() {
    %a = graph.get_input @a : tensor<2x4x8xf32>
    %b = graph.get_input @b : tensor<3x8x4xf32>
    // expected-error @+1 {{'graph.matmul' matmul batch dimensions do not broadcast: shapes [2] and [3] do not broadcast: the dimensions 1 from the end are 2 and 3}}
    %y = graph.matmul %a, %b : tensor<2x4x8xf32>, tensor<3x8x4xf32>
    %l = graph.mse_loss %a, %a : tensor<2x4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @matmul_mixed_element_types {
  graph.input @x : tensor<4x8xf32>
  graph.input @w : tensor<8x4xbf16>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %w = graph.get_input @w : tensor<8x4xbf16>
    // expected-error @+1 {{'graph.matmul' operands have different element types 'f32' and 'bf16'; insert a graph.cast}}
    %y = graph.matmul %x, %w : tensor<4x8xf32>, tensor<8x4xbf16>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

//===----------------------------------------------------------------------===//
// graph.transpose, graph.reshape, graph.broadcast
//===----------------------------------------------------------------------===//

graph.model @transpose_short_permutation {
  graph.input @x : tensor<2x4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x8xf32>
    // expected-error @+1 {{'graph.transpose' permutation [1, 0] has 2 entries for a rank-3 tensor}}
    %y = graph.transpose %x [1, 0] : tensor<2x4x8xf32>
    %l = graph.mse_loss %x, %x : tensor<2x4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @transpose_repeated_dimension {
  graph.input @x : tensor<2x4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x8xf32>
    // expected-error @+1 {{'graph.transpose' permutation [0, 2, 0] is not a permutation of 0..2}}
    %y = graph.transpose %x [0, 2, 0] : tensor<2x4x8xf32>
    %l = graph.mse_loss %x, %x : tensor<2x4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @transpose_dimension_out_of_range {
  graph.input @x : tensor<2x4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x8xf32>
    // expected-error @+1 {{'graph.transpose' permutation [0, 1, 3] is not a permutation of 0..2}}
    %y = graph.transpose %x [0, 1, 3] : tensor<2x4x8xf32>
    %l = graph.mse_loss %x, %x : tensor<2x4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @reshape_changes_element_type {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+1 {{'graph.reshape' op cannot change the element type ('f32' to 'bf16'); use graph.cast}}
    %y = graph.reshape %x : tensor<4x8xf32> -> tensor<32xbf16>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @reshape_count_mismatch {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+1 {{'graph.reshape' op cannot reshape 'tensor<4x8xf32>' (32 elements) to 'tensor<4x4x4xf32>' (64 elements)}}
    %y = graph.reshape %x : tensor<4x8xf32> -> tensor<4x4x4xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @broadcast_changes_element_type {
  graph.input @x : tensor<8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<8xf32>
    // expected-error @+1 {{'graph.broadcast' op cannot change the element type ('f32' to 'f16'); use graph.cast}}
    %y = graph.broadcast %x : tensor<8xf32> -> tensor<4x8xf16>
    %l = graph.mse_loss %x, %x : tensor<8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @broadcast_to_lower_rank {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+1 {{'graph.broadcast' op cannot broadcast [4, 8] to the lower-rank shape [8]}}
    %y = graph.broadcast %x : tensor<4x8xf32> -> tensor<8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @broadcast_dimension_mismatch {
  graph.input @x : tensor<4x1xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x1xf32>
    // expected-error @+1 {{'graph.broadcast' op cannot broadcast [4, 1] to [2, 3, 8]: dimension 0 is 4, which is neither 1 nor 3}}
    %y = graph.broadcast %x : tensor<4x1xf32> -> tensor<2x3x8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x1xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

//===----------------------------------------------------------------------===//
// graph.slice, graph.split, graph.concat
//===----------------------------------------------------------------------===//

graph.model @slice_wrong_count {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+1 {{'graph.slice' slice of a rank-2 tensor needs one start and one size per dimension, got starts [0] and sizes [2, 2]}}
    %y = graph.slice %x starts [0] sizes [2, 2] : tensor<4x8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @slice_past_the_end {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+1 {{'graph.slice' slice of 4 elements from 6 along dimension 1 is outside its extent 8}}
    %y = graph.slice %x starts [0, 6] sizes [4, 4] : tensor<4x8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @slice_negative_start {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+1 {{'graph.slice' slice of 2 elements from -1 along dimension 0 is outside its extent 4}}
    %y = graph.slice %x starts [-1, 0] sizes [2, 8] : tensor<4x8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @slice_negative_size {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+1 {{'graph.slice' slice of -1 elements from 2 along dimension 0 is outside its extent 4}}
    %y = graph.slice %x starts [2, 0] sizes [-1, 8] : tensor<4x8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @split_axis_out_of_range {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+1 {{'graph.split' split axis 2 is out of range for a rank-2 tensor}}
    %y:2 = graph.split %x axis 2 sizes [4, 4] : tensor<4x8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @split_zero_size {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+1 {{'graph.split' split sizes must be positive, got [8, 0]}}
    %y:2 = graph.split %x axis 1 sizes [8, 0] : tensor<4x8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @split_sizes_do_not_add_up {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+1 {{'graph.split' split sizes [4, 2] add up to 6 but dimension 1 is 8}}
    %y:2 = graph.split %x axis 1 sizes [4, 2] : tensor<4x8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @concat_no_operands {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+2 {{'graph.concat' needs at least one operand}}
    // expected-error @+1 {{'graph.concat' op failed to infer returned types}}
    %y = "graph.concat"() <{axis = 0 : i64}> : () -> tensor<4x8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @concat_axis_out_of_range {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+1 {{'graph.concat' concat axis -1 is out of range for a rank-2 tensor}}
    %y = graph.concat %x, %x axis -1 : tensor<4x8xf32>, tensor<4x8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @concat_shapes_differ {
  graph.input @x : tensor<4x8xf32>
  graph.input @y : tensor<3x2xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %y = graph.get_input @y : tensor<3x2xf32>
    // expected-error @+1 {{'graph.concat' concat operand 1 has shape [3, 2], which differs from [4, 8] outside axis 1}}
    %c = graph.concat %x, %y axis 1 : tensor<4x8xf32>, tensor<3x2xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @concat_ranks_differ {
  graph.input @x : tensor<4x8xf32>
  graph.input @y : tensor<4x8x1xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %y = graph.get_input @y : tensor<4x8x1xf32>
    // expected-error @+1 {{'graph.concat' concat operand 1 has shape [4, 8, 1], which differs from [4, 8] outside axis 0}}
    %c = graph.concat %x, %y axis 0 : tensor<4x8xf32>, tensor<4x8x1xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @concat_mixed_element_types {
  graph.input @x : tensor<4x8xf32>
  graph.input @y : tensor<4x8xf16>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %y = graph.get_input @y : tensor<4x8xf16>
    // expected-error @+1 {{'graph.concat' operands have different element types 'f32' and 'f16'; insert a graph.cast}}
    %c = graph.concat %x, %y axis 0 : tensor<4x8xf32>, tensor<4x8xf16>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

//===----------------------------------------------------------------------===//
// graph.sum, graph.mean, graph.max
//===----------------------------------------------------------------------===//

graph.model @sum_no_axes {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+1 {{'graph.sum' reduction needs at least one axis}}
    %y = graph.sum %x axes [] : tensor<4x8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @sum_axis_out_of_range {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+1 {{'graph.sum' reduction axes [2] must be distinct, increasing dimensions of a rank-2 tensor}}
    %y = graph.sum %x axes [2] : tensor<4x8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @mean_axes_decreasing {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+1 {{'graph.mean' reduction axes [1, 0] must be distinct, increasing dimensions of a rank-2 tensor}}
    %y = graph.mean %x axes [1, 0] keepdims : tensor<4x8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @max_axes_repeated {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+1 {{'graph.max' reduction axes [0, 0] must be distinct, increasing dimensions of a rank-2 tensor}}
    %y = graph.max %x axes [0, 0] : tensor<4x8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @max_negative_axis {
  graph.input @x : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    // expected-error @+1 {{'graph.max' reduction axes [-1] must be distinct, increasing dimensions of a rank-2 tensor}}
    %y = graph.max %x axes [-1] : tensor<4x8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

//===----------------------------------------------------------------------===//
// graph.embedding, graph.layernorm, graph.rmsnorm
//===----------------------------------------------------------------------===//

graph.model @embedding_table_rank {
  graph.param @wte : tensor<16xf32> init #graph.normal<std = 0.02>
  graph.input @tokens : tensor<2x4xi32>
  func.func @forward() {
    %wte = graph.get_param @wte : tensor<16xf32>
    %tokens = graph.get_input @tokens : tensor<2x4xi32>
    // expected-error @+1 {{'graph.embedding' embedding table must be [rows, width], got [16]}}
    %e = graph.embedding %wte[%tokens] : tensor<16xf32>, tensor<2x4xi32>
    %l = graph.mse_loss %wte, %wte : tensor<16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @embedding_float_indices {
  graph.param @wte : tensor<16x8xf32> init #graph.normal<std = 0.02>
  graph.input @tokens : tensor<2x4xf32>
  func.func @forward() {
    %wte = graph.get_param @wte : tensor<16x8xf32>
    %tokens = graph.get_input @tokens : tensor<2x4xf32>
    // expected-error @+1 {{'graph.embedding' op operand #1 must be statically shaped tensor of 32-bit signless integer or 64-bit signless integer values, but got 'tensor<2x4xf32>'}}
    %e = graph.embedding %wte[%tokens] : tensor<16x8xf32>, tensor<2x4xf32>
    %l = graph.mse_loss %wte, %wte : tensor<16x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @layernorm_scalar_input {
  graph.input @x : tensor<f32>
  graph.input @g : tensor<1xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<f32>
    %g = graph.get_input @g : tensor<1xf32>
    // expected-error @+1 {{'graph.layernorm' normalisation needs an input of rank >= 1}}
    %y = graph.layernorm %x, %g, %g : tensor<f32>, tensor<1xf32>, tensor<1xf32>
    %l = graph.mse_loss %x, %x : tensor<f32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @layernorm_gamma_shape {
  graph.input @x : tensor<4x8xf32>
  graph.input @g : tensor<4xf32>
  graph.input @b : tensor<8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %g = graph.get_input @g : tensor<4xf32>
    %b = graph.get_input @b : tensor<8xf32>
    // expected-error @+1 {{'graph.layernorm' gamma must have the shape of the last axis, [8], got [4]}}
    %y = graph.layernorm %x, %g, %b : tensor<4x8xf32>, tensor<4xf32>, tensor<8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @layernorm_beta_shape {
  graph.input @x : tensor<4x8xf32>
  graph.input @g : tensor<8xf32>
  graph.input @b : tensor<1x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %g = graph.get_input @g : tensor<8xf32>
    %b = graph.get_input @b : tensor<1x8xf32>
    // expected-error @+1 {{'graph.layernorm' beta must have the shape of the last axis, [8], got [1, 8]}}
    %y = graph.layernorm %x, %g, %b : tensor<4x8xf32>, tensor<8xf32>, tensor<1x8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @rmsnorm_gamma_shape {
  graph.input @x : tensor<4x8xf32>
  graph.input @g : tensor<4x8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x8xf32>
    %g = graph.get_input @g : tensor<4x8xf32>
    // expected-error @+1 {{'graph.rmsnorm' gamma must have the shape of the last axis, [8], got [4, 8]}}
    %y = graph.rmsnorm %x, %g : tensor<4x8xf32>, tensor<4x8xf32>
    %l = graph.mse_loss %x, %x : tensor<4x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @rmsnorm_scalar_input {
  graph.input @x : tensor<f32>
  graph.input @g : tensor<1xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<f32>
    %g = graph.get_input @g : tensor<1xf32>
    // expected-error @+1 {{'graph.rmsnorm' normalisation needs an input of rank >= 1}}
    %y = graph.rmsnorm %x, %g : tensor<f32>, tensor<1xf32>
    %l = graph.mse_loss %x, %x : tensor<f32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

//===----------------------------------------------------------------------===//
// graph.softmax
//===----------------------------------------------------------------------===//

graph.model @softmax_scalar {
  graph.input @x : tensor<f32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<f32>
    // expected-error @+1 {{'graph.softmax' op softmax needs a tensor of rank >= 1}}
    %y = graph.softmax %x : tensor<f32>
    %l = graph.mse_loss %x, %x : tensor<f32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @softmax_causal_rank_one {
  graph.input @x : tensor<8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<8xf32>
    // expected-error @+1 {{'graph.softmax' op causal masking needs [..., T, S] scores, got [8]}}
    %y = graph.softmax %x causal : tensor<8xf32>
    %l = graph.mse_loss %x, %x : tensor<8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @softmax_causal_fewer_keys_than_queries {
  graph.input @x : tensor<2x8x4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x8x4xf32>
    // expected-error @+1 {{'graph.softmax' op causal masking needs S >= T in [..., T, S], got T = 8 and S = 4}}
    %y = graph.softmax %x causal : tensor<2x8x4xf32>
    %l = graph.mse_loss %x, %x : tensor<2x8x4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

//===----------------------------------------------------------------------===//
// graph.attention
//===----------------------------------------------------------------------===//

graph.model @attention_zero_scale {
  graph.input @q : tensor<2x8x16xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x8x16xf32>
    // expected-error @+1 {{'graph.attention' scale must be finite and positive, got 0.0}}
    %o = graph.attention %q, %q, %q scale 0.0 : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
    %l = graph.mse_loss %q, %q : tensor<2x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// with_lse: the second result is the f32 row log-sum-exp [.., T].
graph.model @attention_lse_shape {
  graph.input @q : tensor<2x8x16xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x8x16xf32>
    // expected-error @+2 {{'graph.attention' op inferred type(s) 'tensor<2x8x16xf32>', 'tensor<2x8xf32>' are incompatible with return type(s) of operation 'tensor<2x8x16xf32>', 'tensor<2x8x16xf32>'}}
    // expected-error @+1 {{'graph.attention' op failed to infer returned types}}
    %o:2 = "graph.attention"(%q, %q, %q) <{with_lse}> : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>)
    %l = graph.mse_loss %q, %q : tensor<2x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @attention_lse_element_type {
  graph.input @q : tensor<2x8x16xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x8x16xf32>
    // expected-error @+1 {{'graph.attention' op result #1 must be statically shaped tensor of 32-bit float values, but got 'tensor<2x8xbf16>'}}
    %o:2 = "graph.attention"(%q, %q, %q) <{with_lse}> : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8xbf16>)
    %l = graph.mse_loss %q, %q : tensor<2x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

//===----------------------------------------------------------------------===//
// graph.qkv_attention
//===----------------------------------------------------------------------===//

graph.model @qkv_attention_width {
  graph.input @x : tensor<2x8x100xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x8x100xf32>
    // expected-error @+1 {{'graph.qkv_attention' qkv_attention's last dimension 100 is not 3 x 4 heads x a head dim}}
    %o = graph.qkv_attention %x heads 4 : tensor<2x8x100xf32>
    %l = graph.mse_loss %x, %x : tensor<2x8x100xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @qkv_attention_rank {
  graph.input @x : tensor<96xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<96xf32>
    // expected-error @+1 {{'graph.qkv_attention' qkv_attention needs qkv [..., T, 3 x heads x head dim], got [96]}}
    %o = graph.qkv_attention %x heads 2 : tensor<96xf32>
    %l = graph.mse_loss %x, %x : tensor<96xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @qkv_attention_heads {
  graph.input @x : tensor<2x8x96xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x8x96xf32>
    // expected-error @+1 {{'graph.qkv_attention' qkv_attention needs at least one head, got 0}}
    %o = graph.qkv_attention %x heads 0 : tensor<2x8x96xf32>
    %l = graph.mse_loss %x, %x : tensor<2x8x96xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @qkv_attention_scale {
  graph.input @x : tensor<2x8x96xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x8x96xf32>
    // expected-error @+1 {{'graph.qkv_attention' scale must be finite and positive, got -1.0}}
    %o = graph.qkv_attention %x heads 2 scale -1.0 : tensor<2x8x96xf32>
    %l = graph.mse_loss %x, %x : tensor<2x8x96xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// with_lse: the second result is the f32 [.., H, T].
graph.model @qkv_attention_lse_shape {
  graph.input @x : tensor<2x8x96xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x8x96xf32>
    // expected-error @+2 {{'graph.qkv_attention' op inferred type(s) 'tensor<2x8x32xf32>', 'tensor<2x2x8xf32>' are incompatible with return type(s) of operation 'tensor<2x8x32xf32>', 'tensor<2x8xf32>'}}
    // expected-error @+1 {{'graph.qkv_attention' op failed to infer returned types}}
    %o:2 = "graph.qkv_attention"(%x) <{heads = 2 : i64, with_lse}> : (tensor<2x8x96xf32>) -> (tensor<2x8x32xf32>, tensor<2x8xf32>)
    %l = graph.mse_loss %x, %x : tensor<2x8x96xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @attention_negative_scale {
  graph.input @q : tensor<2x8x16xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x8x16xf32>
    // expected-error @+1 {{'graph.attention' scale must be finite and positive, got -0.25}}
    %o = graph.attention %q, %q, %q scale -0.25 : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
    %l = graph.mse_loss %q, %q : tensor<2x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @attention_infinite_scale {
  graph.input @q : tensor<2x8x16xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x8x16xf32>
    // expected-error @+1 {{'graph.attention' scale must be finite and positive, got inf}}
    %o = graph.attention %q, %q, %q scale 0x7FF0000000000000 : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
    %l = graph.mse_loss %q, %q : tensor<2x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @attention_rank_one {
  graph.input @q : tensor<16xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<16xf32>
    // expected-error @+1 {{'graph.attention' attention needs q, k, v of one rank >= 2, got [16], [16], [16]}}
    %o = graph.attention %q, %q, %q : tensor<16xf32>, tensor<16xf32>, tensor<16xf32>
    %l = graph.mse_loss %q, %q : tensor<16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @attention_ranks_differ {
  graph.input @q : tensor<2x8x16xf32>
  graph.input @k : tensor<8x16xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x8x16xf32>
    %k = graph.get_input @k : tensor<8x16xf32>
    // expected-error @+1 {{'graph.attention' attention needs q, k, v of one rank >= 2, got [2, 8, 16], [8, 16], [2, 8, 16]}}
    %o = graph.attention %q, %k, %q : tensor<2x8x16xf32>, tensor<8x16xf32>, tensor<2x8x16xf32>
    %l = graph.mse_loss %q, %q : tensor<2x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @attention_leading_dimensions_differ {
  graph.input @q : tensor<2x8x16xf32>
  graph.input @v : tensor<3x8x16xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x8x16xf32>
    %v = graph.get_input @v : tensor<3x8x16xf32>
    // expected-error @+1 {{'graph.attention' attention q, k, v must share their leading dimensions, got [2, 8, 16], [2, 8, 16], [3, 8, 16]}}
    %o = graph.attention %q, %q, %v : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<3x8x16xf32>
    %l = graph.mse_loss %q, %q : tensor<2x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @attention_head_dimensions_differ {
  graph.input @q : tensor<2x8x16xf32>
  graph.input @k : tensor<2x8x32xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x8x16xf32>
    %k = graph.get_input @k : tensor<2x8x32xf32>
    // expected-error @+1 {{'graph.attention' attention q and k must have the same head dimension, got 16 and 32}}
    %o = graph.attention %q, %k, %k : tensor<2x8x16xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>
    %l = graph.mse_loss %q, %q : tensor<2x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @attention_sequence_lengths_differ {
  graph.input @q : tensor<2x8x16xf32>
  graph.input @v : tensor<2x12x16xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x8x16xf32>
    %v = graph.get_input @v : tensor<2x12x16xf32>
    // expected-error @+1 {{'graph.attention' attention k and v must have the same sequence length, got 8 and 12}}
    %o = graph.attention %q, %q, %v : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x12x16xf32>
    %l = graph.mse_loss %q, %q : tensor<2x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @attention_causal_fewer_keys_than_queries {
  graph.input @q : tensor<2x8x16xf32>
  graph.input @k : tensor<2x4x16xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x8x16xf32>
    %k = graph.get_input @k : tensor<2x4x16xf32>
    // expected-error @+1 {{'graph.attention' causal masking needs S >= T in [..., T, S], got T = 8 and S = 4}}
    %o = graph.attention %q, %k, %k causal : tensor<2x8x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>
    %l = graph.mse_loss %q, %q : tensor<2x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @attention_mixed_element_types {
  graph.input @q : tensor<2x8x16xf32>
  graph.input @k : tensor<2x8x16xbf16>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x8x16xf32>
    %k = graph.get_input @k : tensor<2x8x16xbf16>
    // expected-error @+1 {{'graph.attention' operands have different element types 'f32' and 'bf16'; insert a graph.cast}}
    %o = graph.attention %q, %k, %q : tensor<2x8x16xf32>, tensor<2x8x16xbf16>, tensor<2x8x16xf32>
    %l = graph.mse_loss %q, %q : tensor<2x8x16xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

//===----------------------------------------------------------------------===//
// graph.cross_entropy, graph.mse_loss
//===----------------------------------------------------------------------===//

graph.model @cross_entropy_leading_shapes_differ {
  graph.input @logits : tensor<2x4x16xf32>
  graph.input @labels : tensor<2x8xi32>
  func.func @forward() {
    %logits = graph.get_input @logits : tensor<2x4x16xf32>
    %labels = graph.get_input @labels : tensor<2x8xi32>
    // expected-error @+1 {{'graph.cross_entropy' cross_entropy needs logits [..., C] and labels [...] with the same leading shape, got [2, 4, 16] and [2, 8]}}
    %l = graph.cross_entropy %logits, %labels : tensor<2x4x16xf32>, tensor<2x8xi32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @cross_entropy_labels_same_rank {
  graph.input @logits : tensor<4x16xf32>
  graph.input @labels : tensor<4x16xi64>
  func.func @forward() {
    %logits = graph.get_input @logits : tensor<4x16xf32>
    %labels = graph.get_input @labels : tensor<4x16xi64>
    // expected-error @+1 {{'graph.cross_entropy' cross_entropy needs logits [..., C] and labels [...] with the same leading shape, got [4, 16] and [4, 16]}}
    %l = graph.cross_entropy %logits, %labels : tensor<4x16xf32>, tensor<4x16xi64>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @cross_entropy_float_labels {
  graph.input @logits : tensor<4x16xf32>
  graph.input @labels : tensor<4xf32>
  func.func @forward() {
    %logits = graph.get_input @logits : tensor<4x16xf32>
    %labels = graph.get_input @labels : tensor<4xf32>
    // expected-error @+1 {{'graph.cross_entropy' op operand #1 must be statically shaped tensor of 32-bit signless integer or 64-bit signless integer values, but got 'tensor<4xf32>'}}
    %l = graph.cross_entropy %logits, %labels : tensor<4x16xf32>, tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @cross_entropy_unknown_reduction {
  graph.input @logits : tensor<4x16xf32>
  graph.input @labels : tensor<4xi32>
  func.func @forward() {
    %logits = graph.get_input @logits : tensor<4x16xf32>
    %labels = graph.get_input @labels : tensor<4xi32>
    // expected-error @+1 {{'graph.cross_entropy' op attribute 'reduction' failed to satisfy constraint: how a per-example loss is reduced to a scalar}}
    %l = graph.cross_entropy %logits, %labels {reduction = 2 : i32} : tensor<4x16xf32>, tensor<4xi32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @mse_loss_types_differ {
  graph.input @p : tensor<4x8xf32>
  graph.input @t : tensor<4x8xbf16>
  func.func @forward() {
    %p = graph.get_input @p : tensor<4x8xf32>
    %t = graph.get_input @t : tensor<4x8xbf16>
    // expected-error @+1 {{'graph.mse_loss' op failed to verify that all of {prediction, target} have same type}}
    %l = "graph.mse_loss"(%p, %t) : (tensor<4x8xf32>, tensor<4x8xbf16>) -> tensor<f32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @mse_loss_result_not_f32 {
  graph.input @p : tensor<4x8xbf16>
  func.func @forward() {
    %p = graph.get_input @p : tensor<4x8xbf16>
    // expected-error @+1 {{'graph.mse_loss' op result #0 must be 0D tensor of 32-bit float values, but got 'tensor<bf16>'}}
    %l = "graph.mse_loss"(%p, %p) : (tensor<4x8xbf16>, tensor<4x8xbf16>) -> tensor<bf16>
    graph.loss %l : tensor<bf16>
    return
  }
}

// -----

// A slice whose end would overflow int64 is rejected, not wrapped around.
graph.model @slice_overflow {
  graph.input @x : tensor<8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<8xf32>
    // expected-error @+1 {{'graph.slice' slice of 9223372036854775807 elements from 1 along dimension 0 is outside its extent 8}}
    %y = graph.slice %x starts [1] sizes [9223372036854775807] : tensor<8xf32>
    %l = graph.sum %y axes [0] : tensor<9223372036854775807xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// Split sizes whose sum would overflow int64 are rejected.
graph.model @split_overflow {
  graph.input @x : tensor<8xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<8xf32>
    // expected-error @+1 {{'graph.split' split sizes [4611686018427387904, 4611686018427387904, 4611686018427387904, 4611686018427387904, 8] add up to more than dimension 0, which is 8}}
    %y:5 = graph.split %x axis 0 sizes [4611686018427387904, 4611686018427387904, 4611686018427387904, 4611686018427387904, 8] : tensor<8xf32>
    %l = graph.sum %x axes [0] : tensor<8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// The loss is f32, bf16 or f16, like every other float value of the dialect.
graph.model @f64_loss {
  func.func private @external() -> tensor<f64>
  func.func @forward() {
    %l = func.call @external() : () -> tensor<f64>
    // expected-error @+1 {{'graph.loss' op the loss must be a scalar float tensor such as tensor<f32>, got 'tensor<f64>'}}
    graph.loss %l : tensor<f64>
    return
  }
}

//===----------------------------------------------------------------------===//
// graph.conv2d, graph.max_pool2d, graph.avg_pool2d, graph.clip (GraphConvOps.cpp, ShapeRules.cpp)
//===----------------------------------------------------------------------===//

// -----

graph.model @conv2d_input_rank {
  graph.input @z : tensor<4xf32>
  graph.input @x : tensor<2x4x9xf32>
  graph.input @w : tensor<6x4x3x3xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x9xf32>
    %w = graph.get_input @w : tensor<6x4x3x3xf32>
    // expected-error @+1 {{'graph.conv2d' convolution input must be [N, C, H, W], got [2, 4, 9]}}
    %y = graph.conv2d %x, %w : tensor<2x4x9xf32>, tensor<6x4x3x3xf32>
    %z = graph.get_input @z : tensor<4xf32>
    %l = graph.mse_loss %z, %z : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @conv2d_weight_rank {
  graph.input @z : tensor<4xf32>
  graph.input @x : tensor<2x4x9x9xf32>
  graph.input @w : tensor<6x4x3xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x9x9xf32>
    %w = graph.get_input @w : tensor<6x4x3xf32>
    // expected-error @+1 {{'graph.conv2d' convolution weight must be [O, C / groups, KH, KW], got [6, 4, 3]}}
    %y = graph.conv2d %x, %w : tensor<2x4x9x9xf32>, tensor<6x4x3xf32>
    %z = graph.get_input @z : tensor<4xf32>
    %l = graph.mse_loss %z, %z : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @conv2d_groups_zero {
  graph.input @z : tensor<4xf32>
  graph.input @x : tensor<2x4x9x9xf32>
  graph.input @w : tensor<6x4x3x3xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x9x9xf32>
    %w = graph.get_input @w : tensor<6x4x3x3xf32>
    // expected-error @+1 {{'graph.conv2d' groups must be >= 1, got 0}}
    %y = graph.conv2d %x, %w groups 0 : tensor<2x4x9x9xf32>, tensor<6x4x3x3xf32>
    %z = graph.get_input @z : tensor<4xf32>
    %l = graph.mse_loss %z, %z : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @conv2d_groups_divide {
  graph.input @z : tensor<4xf32>
  graph.input @x : tensor<2x4x9x9xf32>
  graph.input @w : tensor<6x1x3x3xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x9x9xf32>
    %w = graph.get_input @w : tensor<6x1x3x3xf32>
    // expected-error @+1 {{'graph.conv2d' groups (4) must divide the input channels (4) and the output channels (6)}}
    %y = graph.conv2d %x, %w groups 4 : tensor<2x4x9x9xf32>, tensor<6x1x3x3xf32>
    %z = graph.get_input @z : tensor<4xf32>
    %l = graph.mse_loss %z, %z : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @conv2d_weight_channels {
  graph.input @z : tensor<4xf32>
  graph.input @x : tensor<2x4x9x9xf32>
  graph.input @w : tensor<6x4x3x3xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x9x9xf32>
    %w = graph.get_input @w : tensor<6x4x3x3xf32>
    // expected-error @+1 {{'graph.conv2d' convolution weight [6, 4, 3, 3] must have 2 input channels per group for an input [2, 4, 9, 9] in 2 group(s)}}
    %y = graph.conv2d %x, %w groups 2 : tensor<2x4x9x9xf32>, tensor<6x4x3x3xf32>
    %z = graph.get_input @z : tensor<4xf32>
    %l = graph.mse_loss %z, %z : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @conv2d_window_too_large {
  graph.input @z : tensor<4xf32>
  graph.input @x : tensor<2x4x5x5xf32>
  graph.input @w : tensor<6x4x3x3xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x5x5xf32>
    %w = graph.get_input @w : tensor<6x4x3x3xf32>
    // expected-error @+1 {{'graph.conv2d' the window's height (7 with dilation) exceeds the padded input's (5)}}
    %y = graph.conv2d %x, %w dilations [3, 3] : tensor<2x4x5x5xf32>, tensor<6x4x3x3xf32>
    %z = graph.get_input @z : tensor<4xf32>
    %l = graph.mse_loss %z, %z : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @conv2d_strides_count {
  graph.input @z : tensor<4xf32>
  graph.input @x : tensor<2x4x9x9xf32>
  graph.input @w : tensor<6x4x3x3xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x9x9xf32>
    %w = graph.get_input @w : tensor<6x4x3x3xf32>
    // expected-error @+1 {{'graph.conv2d' strides must have 2 entries, got [2, 2, 2]}}
    %y = graph.conv2d %x, %w strides [2, 2, 2] : tensor<2x4x9x9xf32>, tensor<6x4x3x3xf32>
    %z = graph.get_input @z : tensor<4xf32>
    %l = graph.mse_loss %z, %z : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @conv2d_negative_padding {
  graph.input @z : tensor<4xf32>
  graph.input @x : tensor<2x4x9x9xf32>
  graph.input @w : tensor<6x4x3x3xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x9x9xf32>
    %w = graph.get_input @w : tensor<6x4x3x3xf32>
    // expected-error @+1 {{'graph.conv2d' padding must be >= 0, got [0, -1, 0, 0]}}
    %y = graph.conv2d %x, %w padding [0, -1, 0, 0] : tensor<2x4x9x9xf32>, tensor<6x4x3x3xf32>
    %z = graph.get_input @z : tensor<4xf32>
    %l = graph.mse_loss %z, %z : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @conv2d_element_types {
  graph.input @z : tensor<4xf32>
  graph.input @x : tensor<2x4x9x9xf32>
  graph.input @w : tensor<6x4x3x3xbf16>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x9x9xf32>
    %w = graph.get_input @w : tensor<6x4x3x3xbf16>
    // expected-error @+1 {{'graph.conv2d' operands have different element types 'f32' and 'bf16'; insert a graph.cast}}
    %y = graph.conv2d %x, %w : tensor<2x4x9x9xf32>, tensor<6x4x3x3xbf16>
    %z = graph.get_input @z : tensor<4xf32>
    %l = graph.mse_loss %z, %z : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @max_pool2d_padding_half {
  graph.input @z : tensor<4xf32>
  graph.input @x : tensor<2x4x9x9xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x9x9xf32>
    // expected-error @+1 {{'graph.max_pool2d' padding [2, 2, 2, 2] must be at most half the window (3 along height)}}
    %y = graph.max_pool2d %x kernel_size [3, 3] strides [1, 1] padding [2, 2, 2, 2] : tensor<2x4x9x9xf32>
    %z = graph.get_input @z : tensor<4xf32>
    %l = graph.mse_loss %z, %z : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @max_pool2d_kernel_size {
  graph.input @z : tensor<4xf32>
  graph.input @x : tensor<2x4x9x9xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x9x9xf32>
    // expected-error @+1 {{'graph.max_pool2d' kernel size must have 2 entries, got [3]}}
    %y = graph.max_pool2d %x kernel_size [3] strides [1, 1] : tensor<2x4x9x9xf32>
    %z = graph.get_input @z : tensor<4xf32>
    %l = graph.mse_loss %z, %z : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @max_pool2d_stride_zero {
  graph.input @z : tensor<4xf32>
  graph.input @x : tensor<2x4x9x9xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x9x9xf32>
    // expected-error @+1 {{'graph.max_pool2d' strides must be >= 1, got [0, 1]}}
    %y = graph.max_pool2d %x kernel_size [3, 3] strides [0, 1] : tensor<2x4x9x9xf32>
    %z = graph.get_input @z : tensor<4xf32>
    %l = graph.mse_loss %z, %z : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @avg_pool2d_input_rank {
  graph.input @z : tensor<4xf32>
  graph.input @x : tensor<4x9x9xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4x9x9xf32>
    // expected-error @+1 {{'graph.avg_pool2d' pooling input must be [N, C, H, W], got [4, 9, 9]}}
    %y = graph.avg_pool2d %x kernel_size [3, 3] strides [1, 1] : tensor<4x9x9xf32>
    %z = graph.get_input @z : tensor<4xf32>
    %l = graph.mse_loss %z, %z : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @avg_pool2d_window_too_large {
  graph.input @z : tensor<4xf32>
  graph.input @x : tensor<2x4x2x9xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x2x9xf32>
    // expected-error @+1 {{'graph.avg_pool2d' the window's height (3 with dilation) exceeds the padded input's (2)}}
    %y = graph.avg_pool2d %x kernel_size [3, 3] strides [1, 1] : tensor<2x4x2x9xf32>
    %z = graph.get_input @z : tensor<4xf32>
    %l = graph.mse_loss %z, %z : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @clip_bounds_order {
  graph.input @z : tensor<4xf32>
  graph.input @x : tensor<2x4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4xf32>
    // expected-error @+1 {{'graph.clip' op min (6) must not exceed max (0)}}
    %y = graph.clip %x {min = 6.0 : f64, max = 0.0 : f64} : tensor<2x4xf32>
    %z = graph.get_input @z : tensor<4xf32>
    %l = graph.mse_loss %z, %z : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @clip_nan_bound {
  graph.input @z : tensor<4xf32>
  graph.input @x : tensor<2x4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4xf32>
    // expected-error @+1 {{'graph.clip' op bounds must not be NaN}}
    %y = graph.clip %x {min = 0x7FF8000000000000 : f64, max = 6.0 : f64} : tensor<2x4xf32>
    %z = graph.get_input @z : tensor<4xf32>
    %l = graph.mse_loss %z, %z : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

//===----------------------------------------------------------------------===//
// graph.batch_norm, graph.update_running_stats, untrained parameters (GraphConvOps.cpp)
//===----------------------------------------------------------------------===//

// -----

graph.model @batch_norm_channels {
  graph.input @x : tensor<2x4x3x3xf32>
  graph.input @c : tensor<4xf32>
  graph.input @d : tensor<3xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x3x3xf32>
    %c = graph.get_input @c : tensor<4xf32>
    %d = graph.get_input @d : tensor<3xf32>
    // expected-error @+1 {{'graph.batch_norm' running_var must be [4] (the input's channels), got [3]}}
    %y = graph.batch_norm %x, %c, %c, %c, %d : tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<3xf32>
    %l = graph.mse_loss %x, %x : tensor<2x4x3x3xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @batch_norm_rank {
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    // expected-error @+1 {{'graph.batch_norm' input must be [N, C, ...], got [4]}}
    %y = graph.batch_norm %x, %x, %x, %x, %x : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @update_running_stats_trained {
  graph.param @mean : tensor<4xf32> init #graph.zeros
  graph.param @var : tensor<4xf32> init #graph.ones untrained
  graph.input @x : tensor<2x4x3x3xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x3x3xf32>
    // expected-error @+1 {{'graph.update_running_stats' op mean @mean must name an untrained graph.param (model state)}}
    graph.update_running_stats %x {momentum = 0.1 : f64, mean = @mean, var = @var} : tensor<2x4x3x3xf32>
    %l = graph.mse_loss %x, %x : tensor<2x4x3x3xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @update_running_stats_shape {
  graph.param @mean : tensor<4xf32> init #graph.zeros untrained
  graph.param @var : tensor<4xf32> init #graph.ones untrained
  graph.param @count : tensor<1xf32> init #graph.zeros untrained
  graph.input @x : tensor<2x4x3x3xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x3x3xf32>
    // expected-error @+1 {{'graph.update_running_stats' op count @count must be 'tensor<f32>', is 'tensor<1xf32>'}}
    graph.update_running_stats %x {momentum = 0.1 : f64, mean = @mean, var = @var, count = @count} : tensor<2x4x3x3xf32>
    %l = graph.mse_loss %x, %x : tensor<2x4x3x3xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @update_running_stats_momentum {
  graph.param @mean : tensor<4xf32> init #graph.zeros untrained
  graph.param @var : tensor<4xf32> init #graph.ones untrained
  graph.input @x : tensor<2x4x3x3xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x3x3xf32>
    // expected-error @+1 {{'graph.update_running_stats' op momentum must be in [0, 1], got 1.500000e+00}}
    graph.update_running_stats %x {momentum = 1.5 : f64, mean = @mean, var = @var} : tensor<2x4x3x3xf32>
    %l = graph.mse_loss %x, %x : tensor<2x4x3x3xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @untrained_decays {
  // expected-error @+1 {{'graph.param' op parameter @mean is untrained, so the optimizer cannot decay it}}
  graph.param @mean : tensor<4xf32> init #graph.zeros untrained {weight_decay = true}
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @batch_norm_epsilon {
  graph.input @x : tensor<2x4x3x3xf32>
  graph.input @c : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4x3x3xf32>
    %c = graph.get_input @c : tensor<4xf32>
    // expected-error @+1 {{'graph.batch_norm' op epsilon must be finite and >= 0}}
    %y = graph.batch_norm %x, %c, %c, %c, %c {epsilon = -1.0 : f64} : tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
    %l = graph.mse_loss %x, %x : tensor<2x4x3x3xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
