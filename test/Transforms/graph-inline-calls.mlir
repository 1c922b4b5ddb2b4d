// RUN: ampc-opt %s -split-input-file --graph-inline-calls | FileCheck %s
// RUN: ampc-opt %s -split-input-file --graph-inline-calls -mlir-print-debuginfo -mlir-print-local-scope | FileCheck %s --check-prefix=LOC

// graph-inline-calls.mlir: the pass flattens every call into the entry function and erases the
// functions nothing calls any more. Each case checks that the callee's body appears once per
// call, wired to that call's operands, and that no call or private function is left.

// A layer written once and called for two layers with different parameters.
// CHECK-LABEL: graph.model @two_layers {
// CHECK-NOT: func.func private
// CHECK: func.func @forward() {
// CHECK-NOT: call
// CHECK-DAG: %[[W1:.+]] = graph.get_param @w1 : tensor<4x4xf32>
// CHECK-DAG: %[[B1:.+]] = graph.get_param @b1 : tensor<4xf32>
// CHECK-DAG: %[[W2:.+]] = graph.get_param @w2 : tensor<4x4xf32>
// CHECK-DAG: %[[B2:.+]] = graph.get_param @b2 : tensor<4xf32>
// CHECK-DAG: %[[X:.+]] = graph.get_input @x : tensor<2x4xf32>
// CHECK: %[[Y1:.+]] = graph.matmul %[[X]], %[[W1]] : tensor<2x4xf32>, tensor<4x4xf32>
// CHECK: %[[Z1:.+]] = graph.add %[[Y1]], %[[B1]] : tensor<2x4xf32>, tensor<4xf32>
// CHECK: %[[R1:.+]] = graph.relu %[[Z1]] : tensor<2x4xf32>
// CHECK: %[[Y2:.+]] = graph.matmul %[[R1]], %[[W2]] : tensor<2x4xf32>, tensor<4x4xf32>
// CHECK: %[[Z2:.+]] = graph.add %[[Y2]], %[[B2]] : tensor<2x4xf32>, tensor<4xf32>
// CHECK: %[[R2:.+]] = graph.relu %[[Z2]] : tensor<2x4xf32>
// CHECK: %[[L:.+]] = graph.mse_loss %[[R2]], %[[X]] : tensor<2x4xf32>
// CHECK: graph.loss %[[L]] : tensor<f32>
// CHECK: return
// CHECK-NOT: func.func
graph.model @two_layers {
  graph.param @w1 : tensor<4x4xf32> init #graph.normal<std = 0.02>
  graph.param @b1 : tensor<4xf32> init #graph.zeros
  graph.param @w2 : tensor<4x4xf32> init #graph.normal<std = 0.02>
  graph.param @b2 : tensor<4xf32> init #graph.zeros
  graph.input @x : tensor<2x4xf32>
  func.func private @layer(%x: tensor<2x4xf32>, %w: tensor<4x4xf32>, %b: tensor<4xf32>) -> tensor<2x4xf32> {
    %y = graph.matmul %x, %w : tensor<2x4xf32>, tensor<4x4xf32>
    %z = graph.add %y, %b : tensor<2x4xf32>, tensor<4xf32>
    %r = graph.relu %z : tensor<2x4xf32>
    return %r : tensor<2x4xf32>
  }
  func.func @forward() {
    %w1 = graph.get_param @w1 : tensor<4x4xf32>
    %b1 = graph.get_param @b1 : tensor<4xf32>
    %w2 = graph.get_param @w2 : tensor<4x4xf32>
    %b2 = graph.get_param @b2 : tensor<4xf32>
    %x = graph.get_input @x : tensor<2x4xf32>
    %h1 = func.call @layer(%x, %w1, %b1) : (tensor<2x4xf32>, tensor<4x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
    %h2 = func.call @layer(%h1, %w2, %b2) : (tensor<2x4xf32>, tensor<4x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
    %l = graph.mse_loss %h2, %x : tensor<2x4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// @block calls @linear twice and reads a parameter itself; @forward calls @block. Functions
// that appear after the entry function are erased too.
// CHECK-LABEL: graph.model @nested {
// CHECK: func.func @forward() {
// CHECK-NOT: call
// CHECK: %[[W:.+]] = graph.get_param @w : tensor<4x4xf32>
// CHECK: %[[X:.+]] = graph.get_input @x : tensor<2x4xf32>
// CHECK: %[[G:.+]] = graph.get_param @g : tensor<4xf32>
// CHECK: %[[Y1:.+]] = graph.matmul %[[X]], %[[W]] : tensor<2x4xf32>, tensor<4x4xf32>
// CHECK: %[[A:.+]] = graph.gelu tanh %[[Y1]] : tensor<2x4xf32>
// CHECK: %[[Y2:.+]] = graph.matmul %[[A]], %[[W]] : tensor<2x4xf32>, tensor<4x4xf32>
// CHECK: %[[N:.+]] = graph.rmsnorm %[[Y2]], %[[G]] : tensor<2x4xf32>, tensor<4xf32>
// CHECK: %[[L:.+]] = graph.mse_loss %[[N]], %[[X]] : tensor<2x4xf32>
// CHECK: graph.loss %[[L]] : tensor<f32>
// CHECK: return
// CHECK-NOT: func.func
graph.model @nested {
  graph.param @w : tensor<4x4xf32> init #graph.normal<std = 0.02>
  graph.param @g : tensor<4xf32> init #graph.ones
  graph.input @x : tensor<2x4xf32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<4x4xf32>
    %x = graph.get_input @x : tensor<2x4xf32>
    %h = func.call @block(%x, %w) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %l = graph.mse_loss %h, %x : tensor<2x4xf32>
    graph.loss %l : tensor<f32>
    return
  }
  func.func private @block(%x: tensor<2x4xf32>, %w: tensor<4x4xf32>) -> tensor<2x4xf32> {
    %g = graph.get_param @g : tensor<4xf32>
    %y1 = func.call @linear(%x, %w) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %a = graph.gelu tanh %y1 : tensor<2x4xf32>
    %y2 = func.call @linear(%a, %w) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %n = graph.rmsnorm %y2, %g : tensor<2x4xf32>, tensor<4xf32>
    return %n : tensor<2x4xf32>
  }
  func.func private @linear(%x: tensor<2x4xf32>, %w: tensor<4x4xf32>) -> tensor<2x4xf32> {
    %y = graph.matmul %x, %w : tensor<2x4xf32>, tensor<4x4xf32>
    return %y : tensor<2x4xf32>
  }
}

// -----

// A function with three results, one of which is its own argument: uses of that result are
// rewired to the call's operand.
// CHECK-LABEL: graph.model @multiple_results {
// CHECK-NOT: func.func private
// CHECK: func.func @forward() {
// CHECK-NOT: call
// CHECK: %[[X:.+]] = graph.get_input @x : tensor<2x12xf32>
// CHECK: %[[P:.+]]:3 = graph.split %[[X]] axis 1 sizes [4, 4, 4] : tensor<2x12xf32>
// CHECK: %[[S:.+]] = graph.add %[[P]]#0, %[[P]]#2 : tensor<2x4xf32>, tensor<2x4xf32>
// CHECK: %[[C:.+]] = graph.concat %[[S]], %[[P]]#1, %[[X]] axis 1 : tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x12xf32>
// CHECK: %[[L:.+]] = graph.sum %[[C]] axes [0, 1] : tensor<2x20xf32>
// CHECK: graph.loss %[[L]] : tensor<f32>
// CHECK-NOT: func.func
graph.model @multiple_results {
  graph.input @x : tensor<2x12xf32>
  func.func private @heads(%x: tensor<2x12xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x12xf32>) {
    %p:3 = graph.split %x axis 1 sizes [4, 4, 4] : tensor<2x12xf32>
    %s = graph.add %p#0, %p#2 : tensor<2x4xf32>, tensor<2x4xf32>
    return %s, %p#1, %x : tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x12xf32>
  }
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x12xf32>
    %a, %b, %c = func.call @heads(%x) : (tensor<2x12xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x12xf32>)
    %cat = graph.concat %a, %b, %c axis 1 : tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x12xf32>
    %l = graph.sum %cat axes [0, 1] : tensor<2x20xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// Inlined ops keep their own location wrapped in a callsite location naming the call; ops
// inlined through two calls name both. Ops of the entry function keep their location.
// LOC-LABEL: graph.model @locations {
// LOC: graph.get_input @x : tensor<2x4xf32> loc("read_x")
// LOC: graph.neg %{{.+}} : tensor<2x4xf32> loc(callsite("negate" at "call_outer"))
// LOC: graph.exp %{{.+}} : tensor<2x4xf32> loc(callsite(callsite("exponent" at "call_inner") at "call_outer"))
// LOC: graph.mse_loss %{{.+}}, %{{.+}} : tensor<2x4xf32> loc("loss")

// CHECK-LABEL: graph.model @locations {
// CHECK: %[[X:.+]] = graph.get_input @x : tensor<2x4xf32>
// CHECK: %[[N:.+]] = graph.neg %[[X]] : tensor<2x4xf32>
// CHECK: %[[E:.+]] = graph.exp %[[N]] : tensor<2x4xf32>
// CHECK: %[[L:.+]] = graph.mse_loss %[[E]], %[[X]] : tensor<2x4xf32>
graph.model @locations {
  graph.input @x : tensor<2x4xf32>
  func.func private @inner(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
    %y = graph.exp %x : tensor<2x4xf32> loc("exponent")
    return %y : tensor<2x4xf32>
  }
  func.func private @outer(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
    %n = graph.neg %x : tensor<2x4xf32> loc("negate")
    %y = func.call @inner(%n) : (tensor<2x4xf32>) -> tensor<2x4xf32> loc("call_inner")
    return %y : tensor<2x4xf32>
  }
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4xf32> loc("read_x")
    %h = func.call @outer(%x) : (tensor<2x4xf32>) -> tensor<2x4xf32> loc("call_outer")
    %l = graph.mse_loss %h, %x : tensor<2x4xf32> loc("loss")
    graph.loss %l : tensor<f32>
    return
  }
}
