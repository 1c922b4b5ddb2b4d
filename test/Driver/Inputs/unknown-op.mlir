graph.model @m {
  graph.input @x : tensor<2x4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4xf32>
    %y = graph.frobnicate %x : tensor<2x4xf32>
    %l = graph.sum %y axes [0, 1] : tensor<2x4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
