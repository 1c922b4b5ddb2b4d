// A parameter whose element count wraps 64 bits (2^62 x 256).
graph.model @wrap {
  graph.param @w : tensor<4611686018427387904x256xf32> init #graph.zeros
  func.func @forward() {
    %w = graph.get_param @w : tensor<4611686018427387904x256xf32>
    %s = graph.sum %w axes [0, 1] : tensor<4611686018427387904x256xf32>
    graph.loss %s : tensor<f32>
    return
  }
}
