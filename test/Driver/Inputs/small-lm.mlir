graph.model @small_lm {
  graph.param @emb : tensor<8x4xf32> init #graph.normal<std = 0.5>
  graph.input @tokens : tensor<2x3xi32>
  graph.input @targets : tensor<2x3xi32>
  func.func @forward() {
    %emb = graph.get_param @emb : tensor<8x4xf32>
    %t = graph.get_input @tokens : tensor<2x3xi32>
    %y = graph.get_input @targets : tensor<2x3xi32>
    %x = graph.embedding %emb[%t] : tensor<8x4xf32>, tensor<2x3xi32>
    %logits = graph.matmul %x, %emb transpose_rhs : tensor<2x3x4xf32>, tensor<8x4xf32>
    %l = graph.cross_entropy %logits, %y : tensor<2x3x8xf32>, tensor<2x3xi32>
    graph.loss %l : tensor<f32>
    return
  }
}
