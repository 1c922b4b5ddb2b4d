graph.model @m {
  graph.input @x : tensor<2x4xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2x4xf32>
    %a = graph.sum %x axes [0] : tensor<2x4xf32>
    graph.loss %a : tensor<4xf32>
    return
  }
}
