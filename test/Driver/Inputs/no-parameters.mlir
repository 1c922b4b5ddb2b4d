// A model that verifies and evaluates but declares nothing to train: no graph.param, no
// graph.input (the training commands once crashed on it, with a segmentation fault).
graph.model @constant_only {
  func.func @forward() {
    %c = graph.constant dense<1.5> : tensor<4xf32>
    %d = graph.constant dense<0.5> : tensor<4xf32>
    %l = graph.mse_loss %c, %d : tensor<4xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
