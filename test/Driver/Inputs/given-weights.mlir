graph.model @given attributes {weights = "given.safetensors"} {
  graph.param @w : tensor<2x3xf32> init #graph.given
  graph.param @b : tensor<3xf32> init #graph.zeros
  graph.input @x : tensor<4x2xf32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<2x3xf32>
    %b = graph.get_param @b : tensor<3xf32>
    %x = graph.get_input @x : tensor<4x2xf32>
    %h = graph.matmul %x, %w : tensor<4x2xf32>, tensor<2x3xf32>
    %y = graph.add %h, %b : tensor<4x3xf32>, tensor<3xf32>
    %l = graph.sum %y axes [0, 1] : tensor<4x3xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
