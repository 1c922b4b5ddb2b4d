graph.model @m {
  graph.param @w : tensor<4x3xf32> init #graph.xavier
  func.func @forward() {
    %w = graph.get_param @w : tensor<4x3xf32>
    %a = graph.sum %w axes [0, 1] : tensor<4x3xf32>
    graph.loss %a : tensor<f32>
    return
  }
}
