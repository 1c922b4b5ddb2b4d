// A parameter of 1e13 f32 elements: 40 TB, a step no machine holds.
graph.model @big {
  graph.param @w : tensor<100000x100000x1000xf32> init #graph.zeros
  func.func @forward() {
    %w = graph.get_param @w : tensor<100000x100000x1000xf32>
    %s = graph.sum %w axes [0, 1, 2] : tensor<100000x100000x1000xf32>
    graph.loss %s : tensor<f32>
    return
  }
}
