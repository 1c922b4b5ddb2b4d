graph.model @wide_heads {
  graph.param @k : tensor<2x8x48xf32> init #graph.normal<std = 1.0>
  graph.input @q : tensor<2x8x48xf32>
  graph.input @v : tensor<2x8x48xf32>
  func.func @forward() {
    %k = graph.get_param @k : tensor<2x8x48xf32>
    %q = graph.get_input @q : tensor<2x8x48xf32>
    %v = graph.get_input @v : tensor<2x8x48xf32>
    %o = graph.attention %q, %k, %v causal : tensor<2x8x48xf32>, tensor<2x8x48xf32>, tensor<2x8x48xf32>
    %l = graph.mse_loss %o, %v : tensor<2x8x48xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
