// RUN: ampc-opt %s -split-input-file -verify-diagnostics

// stage-attributes-invalid.mlir: every error of the graph.-prefixed stage attributes.

graph.model @not_a_remat {
  graph.input @x : tensor<4xf32>
  // expected-error @+1 {{'graph.remat' must be a #graph.remat, got 5 : i64}}
  func.func @forward() attributes {graph.remat = 5} {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.sum %x axes [0] : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// expected-error @+1 {{'graph.remat' belongs on a function of a graph.model (its micro_step)}}
func.func @outside() attributes {graph.remat = #graph.remat<budget_bytes = 10, peak_bytes = 10, no_remat_peak_bytes = 10, live_bytes = 0, extra_flops = 0, step_flops = 0>} {
  return
}

// -----

graph.model @over_budget {
  graph.input @x : tensor<4xf32>
  // expected-error @+1 {{#graph.remat peak_bytes 11 exceeds budget_bytes 10}}
  func.func @forward() attributes {graph.remat = #graph.remat<budget_bytes = 10, peak_bytes = 11, no_remat_peak_bytes = 12, live_bytes = 0, extra_flops = 0, step_flops = 0>} {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.sum %x axes [0] : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @negative {
  graph.input @x : tensor<4xf32>
  // expected-error @+1 {{#graph.remat sizes cannot be negative}}
  func.func @forward() attributes {graph.remat = #graph.remat<budget_bytes = 10, peak_bytes = 1, no_remat_peak_bytes = 12, live_bytes = -1, extra_flops = 0, step_flops = 0>} {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.sum %x axes [0] : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @negative_flops {
  graph.input @x : tensor<4xf32>
  // expected-error @+1 {{#graph.remat FLOP counts cannot be negative}}
  func.func @forward() attributes {graph.remat = #graph.remat<budget_bytes = 10, peak_bytes = 1, no_remat_peak_bytes = 12, live_bytes = 1, extra_flops = -5, step_flops = 0>} {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.sum %x axes [0] : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @unknown {
  graph.input @x : tensor<4xf32>
  // expected-error @+1 {{unknown graph dialect attribute 'graph.arena'}}
  func.func @forward() attributes {graph.arena = 5} {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.sum %x axes [0] : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
