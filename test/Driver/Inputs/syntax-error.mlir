graph.model @broken {
  graph.input @x : tensor<2x4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4xf32>
    %l = graph.sum %x axes [0, 1] : tensor<2x4xf32>
    graph.loss %l : tensor<f32
    return
  }
}
