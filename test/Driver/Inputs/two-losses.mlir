graph.model @m {
  graph.input @x : tensor<2x4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4xf32>
    %a = graph.sum %x axes [0, 1] : tensor<2x4xf32>
    %b = graph.mean %x axes [0, 1] : tensor<2x4xf32>
    graph.loss %a : tensor<f32>
    graph.loss %b : tensor<f32>
    return
  }
}
