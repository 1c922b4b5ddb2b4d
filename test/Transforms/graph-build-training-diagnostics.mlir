// RUN: ampc-opt %s -split-input-file --graph-build-training -verify-diagnostics
// RUN: not ampc-opt %s -split-input-file --graph-build-training="accum-steps=0" 2>&1 | FileCheck %s --check-prefix=ACCUM
// RUN: not ampc-opt %s -split-input-file --graph-build-training="optimizer=adam" 2>&1 | FileCheck %s --check-prefix=OPTIMIZER
// RUN: not ampc-opt %s -split-input-file --graph-build-training="schedule=linear" 2>&1 | FileCheck %s --check-prefix=SCHEDULE
// RUN: not ampc-opt %s -split-input-file --graph-build-training="lr=-1" 2>&1 | FileCheck %s --check-prefix=LR
// RUN: not ampc-opt %s -split-input-file --graph-build-training="beta2=1" 2>&1 | FileCheck %s --check-prefix=BETA
// RUN: not ampc-opt %s -split-input-file --graph-build-training="eps=0" 2>&1 | FileCheck %s --check-prefix=EPS
// RUN: not ampc-opt %s -split-input-file --graph-build-training="weight-decay=-0.1" 2>&1 | FileCheck %s --check-prefix=DECAY
// RUN: not ampc-opt %s -split-input-file --graph-build-training="optimizer=sgd momentum=1" 2>&1 | FileCheck %s --check-prefix=MOMENTUM
// RUN: not ampc-opt %s -split-input-file --graph-build-training="clip-norm=-1" 2>&1 | FileCheck %s --check-prefix=CLIP
// RUN: not ampc-opt %s -split-input-file --graph-build-training="warmup-steps=-5" 2>&1 | FileCheck %s --check-prefix=WARMUP
// RUN: not ampc-opt %s -split-input-file --graph-build-training="schedule=cosine warmup-steps=100 decay-steps=50" 2>&1 | FileCheck %s --check-prefix=COSINE
// RUN: not ampc-opt %s -split-input-file --graph-build-training="lr=0.001 min-lr=0.01" 2>&1 | FileCheck %s --check-prefix=MINLR

// graph-build-training-diagnostics.mlir: the pass's warnings and errors, one case each, and
// one RUN line per invalid option value (each names the option and the valid range).

// ACCUM: error: graph-build-training: invalid accum-steps: must be at least 1, got 0
// OPTIMIZER: error: graph-build-training: invalid optimizer: 'adam' is not one of adamw, sgd
// SCHEDULE: error: graph-build-training: invalid schedule: 'linear' is not one of constant, cosine
// LR: error: graph-build-training: invalid lr: must be finite and positive, got -1.0
// BETA: error: graph-build-training: invalid beta1/beta2: must be in [0, 1)
// EPS: error: graph-build-training: invalid eps: must be finite and positive, got 0.0
// DECAY: error: graph-build-training: invalid weight-decay: must be finite and >= 0, got -0.1
// MOMENTUM: error: graph-build-training: invalid momentum: must be in [0, 1), got 1.0
// CLIP: error: graph-build-training: invalid clip-norm: must be finite and >= 0 (0 disables clipping), got -1.0
// WARMUP: error: graph-build-training: invalid warmup-steps/decay-steps: must not be negative
// COSINE: error: graph-build-training: invalid decay-steps: must exceed warmup-steps (100), or be 0 for the run's number of steps
// MINLR: error: graph-build-training: invalid min-lr: must be in [0, lr], got 0.01

graph.model @unused_parameter {
  graph.param @w : tensor<4xf32> init #graph.ones
  // expected-warning @+1 {{parameter @frozen does not affect the loss: its gradient is zero and the optimizer leaves it unchanged}}
  graph.param @frozen : tensor<4xf32> init #graph.ones
  func.func @forward() {
    %w = graph.get_param @w : tensor<4xf32>
    %f = graph.get_param @frozen : tensor<4xf32>
    %l = graph.sum %w axes [0] : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// No parameter and no input at all: refused before anything is built.
// expected-error @+1 {{model @constants_only declares no graph.param, so there is nothing to train (`ampc eval` evaluates a model without parameters)}}
graph.model @constants_only {
  func.func @forward() {
    %c = graph.constant dense<1.5> : tensor<4xf32>
    %d = graph.constant dense<0.5> : tensor<4xf32>
    %l = graph.mse_loss %c, %d : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// The loss depends only on data.
// expected-error @+1 {{no parameter affects the loss, so there is nothing to train}}
graph.model @nothing_to_train {
  // expected-warning @+1 {{parameter @w does not affect the loss}}
  graph.param @w : tensor<4xf32> init #graph.ones
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.sum %x axes [0] : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @not_inlined {
  graph.param @w : tensor<4xf32> init #graph.ones
  func.func private @square(%x: tensor<4xf32>) -> tensor<4xf32> {
    %y = graph.mul %x, %x : tensor<4xf32>, tensor<4xf32>
    return %y : tensor<4xf32>
  }
  // expected-error @+1 {{calls other functions; run --graph-inline-calls before --graph-build-training}}
  func.func @forward() {
    %w = graph.get_param @w : tensor<4xf32>
    %s = func.call @square(%w) : (tensor<4xf32>) -> tensor<4xf32>
    %l = graph.sum %s axes [0] : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// expected-error @+1 {{already has training state; graph-build-training runs once per model}}
graph.model @already_trained {
  graph.param @w : tensor<4xf32> init #graph.ones
  graph.state @w.grad : tensor<4xf32>
  func.func @micro_step() {
    %w = graph.get_param @w : tensor<4xf32>
    %l = graph.sum %w axes [0] : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @reserved_step_name {
  graph.param @w : tensor<4xf32> init #graph.ones
  // expected-error @+1 {{the symbol @micro_step is reserved for the training step}}
  func.func private @micro_step(%x: tensor<4xf32>) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
  func.func @forward() {
    %w = graph.get_param @w : tensor<4xf32>
    %l = graph.sum %w axes [0] : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @reserved_state_name {
  graph.param @w : tensor<4xf32> init #graph.ones
  // expected-error @+1 {{the symbol @w.grad is reserved for the training state of @w}}
  graph.param @w.grad : tensor<4xf32> init #graph.ones
  func.func @forward() {
    %w = graph.get_param @w : tensor<4xf32>
    %g = graph.get_param @w.grad : tensor<4xf32>
    %p = graph.mul %w, %g : tensor<4xf32>, tensor<4xf32>
    %l = graph.sum %p axes [0] : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
