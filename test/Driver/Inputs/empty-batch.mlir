// A batch of 0 rows: refused where the input is declared (it once evaluated to "loss nan",
// status 0).
graph.model @zero {
  graph.param @w : tensor<4x3xf32> init #graph.ones
  graph.input @x : tensor<0x4xf32>
  graph.input @t : tensor<0x3xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<0x4xf32>
    %t = graph.get_input @t : tensor<0x3xf32>
    %w = graph.get_param @w : tensor<4x3xf32>
    %y = graph.matmul %x, %w : tensor<0x4xf32>, tensor<4x3xf32>
    %l = graph.mse_loss %y, %t : tensor<0x3xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
