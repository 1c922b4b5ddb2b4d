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
func.func @outside() attributes {graph.remat = #graph.remat<budget_bytes = 10, peak_bytes = 10, no_remat_peak_bytes = 10, live_bytes = 0, extra_flops = 0, step_flops = 0, persistent_bytes = 0>} {
  return
}

// -----

graph.model @over_budget {
  graph.input @x : tensor<4xf32>
  // expected-error @+1 {{#graph.remat peak_bytes 11 exceeds budget_bytes 10}}
  func.func @forward() attributes {graph.remat = #graph.remat<budget_bytes = 10, peak_bytes = 11, no_remat_peak_bytes = 12, live_bytes = 0, extra_flops = 0, step_flops = 0, persistent_bytes = 0>} {
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
  func.func @forward() attributes {graph.remat = #graph.remat<budget_bytes = 10, peak_bytes = 1, no_remat_peak_bytes = 12, live_bytes = -1, extra_flops = 0, step_flops = 0, persistent_bytes = 0>} {
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
  func.func @forward() attributes {graph.remat = #graph.remat<budget_bytes = 10, peak_bytes = 1, no_remat_peak_bytes = 12, live_bytes = 1, extra_flops = -5, step_flops = 0, persistent_bytes = 0>} {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.sum %x axes [0] : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @unknown {
  graph.input @x : tensor<4xf32>
  // expected-error @+1 {{unknown graph dialect attribute 'graph.arenas'}}
  func.func @forward() attributes {graph.arenas = 5} {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.sum %x axes [0] : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @persistent_over_peak {
  graph.input @x : tensor<4xf32>
  // expected-error @+1 {{#graph.remat persistent_bytes 6 exceeds peak_bytes 5}}
  func.func @forward() attributes {graph.remat = #graph.remat<budget_bytes = 10, peak_bytes = 5, no_remat_peak_bytes = 12, live_bytes = 1, extra_flops = 0, step_flops = 0, persistent_bytes = 6>} {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.sum %x axes [0] {} : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @not_a_fusion {
  graph.input @x : tensor<4xf32>
  func.func @forward() attributes {} {
    %x = graph.get_input @x : tensor<4xf32>
    // expected-error @+1 {{'graph.fusion' must be a #graph.fusion, got 3 : i64}}
    %l = graph.sum %x axes [0] {graph.fusion = 3} : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @negative_group {
  graph.input @x : tensor<4xf32>
  func.func @forward() attributes {} {
    %x = graph.get_input @x : tensor<4xf32>
    // expected-error @+1 {{#graph.fusion group numbers are not negative, got -1}}
    %l = graph.sum %x axes [0] {graph.fusion = #graph.fusion<group = -1, kind = reduction>} : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @repeated_group {
  graph.input @x : tensor<4xf32>
  // expected-error @+1 {{'graph.fusion_schedule' must list each group 0..1 once; group 0 is out of range or repeated}}
  func.func @forward() attributes {graph.fusion_schedule = array<i64: 0, 0>} {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.sum %x axes [0] {graph.fusion = #graph.fusion<group = 0, kind = reduction>} : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @unscheduled_group {
  graph.input @x : tensor<4xf32>
  // expected-error @+1 {{'graph.fusion_schedule' has 1 groups, but an op is in group 2}}
  func.func @forward() attributes {graph.fusion_schedule = array<i64: 0>} {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.sum %x axes [0] {graph.fusion = #graph.fusion<group = 2, kind = reduction>} : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @schedule_on_op {
  graph.input @x : tensor<4xf32>
  func.func @forward() attributes {} {
    %x = graph.get_input @x : tensor<4xf32>
    // expected-error @+1 {{'graph.fusion_schedule' is an array<i64> of group numbers on a function}}
    %l = graph.sum %x axes [0] {graph.fusion_schedule = array<i64: 0>} : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @offsets_count {
  graph.input @x : tensor<4xf32>
  func.func @forward() attributes {} {
    %x = graph.get_input @x : tensor<4xf32>
    // expected-error @+1 {{'graph.arena_offsets' needs one offset per result (1)}}
    %l = graph.sum %x axes [0] {graph.arena_offsets = array<i64: 0, 256>} : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @offsets_negative {
  graph.input @x : tensor<4xf32>
  func.func @forward() attributes {} {
    %x = graph.get_input @x : tensor<4xf32>
    // expected-error @+1 {{'graph.arena_offsets' offsets are bytes, or -1 for a result never stored}}
    %l = graph.sum %x axes [0] {graph.arena_offsets = array<i64: -2>} : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @not_an_arena {
  graph.input @x : tensor<4xf32>
  // expected-error @+1 {{'graph.arena' must be a #graph.arena, got 5 : i64}}
  func.func @forward() attributes {graph.arena = 5} {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.sum %x axes [0] {} : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @arena_peak {
  graph.input @x : tensor<4xf32>
  // expected-error @+1 {{#graph.arena peak_live_bytes 512 exceeds the arena's 256 bytes}}
  func.func @forward() attributes {graph.arena = #graph.arena<bytes = 256, peak_live_bytes = 512, alignment = 256>} {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.sum %x axes [0] {} : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @arena_alignment {
  graph.input @x : tensor<4xf32>
  // expected-error @+1 {{#graph.arena alignment must be a power of two, got 100}}
  func.func @forward() attributes {graph.arena = #graph.arena<bytes = 256, peak_live_bytes = 4, alignment = 100>} {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.sum %x axes [0] {} : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @misaligned_offset {
  graph.input @x : tensor<4xf32>
  func.func @forward() attributes {graph.arena = #graph.arena<bytes = 1024, peak_live_bytes = 4, alignment = 256>} {
    %x = graph.get_input @x : tensor<4xf32>
    // expected-error @+1 {{arena offset 100 (4 bytes) is not 256-byte aligned inside the function's arena of 1024 bytes}}
    %l = graph.sum %x axes [0] {graph.arena_offsets = array<i64: 100>} : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @offset_past_arena {
  graph.input @x : tensor<4xf32>
  func.func @forward() attributes {graph.arena = #graph.arena<bytes = 256, peak_live_bytes = 4, alignment = 256>} {
    %x = graph.get_input @x : tensor<4xf32>
    // expected-error @+1 {{arena offset 256 (4 bytes) is not 256-byte aligned inside the function's arena of 256 bytes}}
    %l = graph.sum %x axes [0] {graph.arena_offsets = array<i64: 256>} : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @bad_precision {
  graph.input @x : tensor<4xf32>
  func.func @forward() attributes {} {
    %x = graph.get_input @x : tensor<4xf32>
    // expected-error @+1 {{'graph.precision' must be a #graph.precision, got 1 : i64}}
    %l = graph.sum %x axes [0] {graph.precision = 1} : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

graph.model @bad_recomputed {
  graph.input @x : tensor<4xf32>
  func.func @forward() attributes {} {
    %x = graph.get_input @x : tensor<4xf32>
    // expected-error @+1 {{'graph.recomputed' is a unit attribute}}
    %l = graph.sum %x axes [0] {graph.recomputed = 1} : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// expected-error @+1 {{'graph.precision_mode' is "bf16", "fp16" or "fp32", got "int8"}}
graph.model @bad_mode attributes {graph.precision_mode = "int8"} {
  graph.input @x : tensor<4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<4xf32>
    %l = graph.sum %x axes [0] : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}

// -----

// expected-error @+1 {{'graph.debug_nonfinite' is a unit attribute of a graph.model}}
func.func @outside() attributes {graph.debug_nonfinite} {
  return
}

// -----

// expected-error @+1 {{'graph.fusion' belongs inside a graph.model}}
func.func @outside_model() attributes {graph.fusion = #graph.fusion<group = 0, kind = none>} {
  return
}
