graph.model @m {
  graph.param @w : tensor<5x3xf32> init #graph.normal<std = 0.02>
  graph.input @x : tensor<2x4xf32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<5x3xf32>
    %x = graph.get_input @x : tensor<2x4xf32>
    %y = graph.matmul %x, %w : tensor<2x4xf32>, tensor<5x3xf32>
    %l = graph.sum %y axes [0, 1] : tensor<2x3xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
