graph.model @m {
  graph.param @w : tensor<4x3xf32> init #graph.normal<std = -0.02>
  graph.input @x : tensor<2x4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4xf32>
    %a = graph.sum %x axes [0, 1] : tensor<2x4xf32>
    graph.loss %a : tensor<f32>
    return
  }
}
