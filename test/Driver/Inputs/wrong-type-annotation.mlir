graph.model @m {
  graph.param @w : tensor<4x3xf32> init #graph.normal<std = 0.02>
  func.func @forward() {
    %w = graph.get_param @w : tensor<4x3xbf16>
    %f = graph.cast %w : tensor<4x3xbf16> -> tensor<4x3xf32>
    %l = graph.sum %f axes [0, 1] : tensor<4x3xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
