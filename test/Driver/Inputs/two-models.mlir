graph.model @a {
  func.func @forward() {
    %c = graph.constant dense<1.0> : tensor<f32>
    graph.loss %c : tensor<f32>
    return
  }
}
graph.model @b {
  func.func @forward() {
    %c = graph.constant dense<1.0> : tensor<f32>
    graph.loss %c : tensor<f32>
    return
  }
}
