// A 3e9-element splat constant: the plan holds its one value, so verify and plan take no time
// and no memory; eval of a small one (3000 elements) is exact.
graph.model @splat {
  graph.param @w : tensor<4xf32> init #graph.zeros
  func.func @forward() {
    %w = graph.get_param @w : tensor<4xf32>
    %c = graph.constant dense<0.5> : tensor<3000000000xf32>
    %s = graph.sum %c axes [0] : tensor<3000000000xf32>
    %t = graph.sum %w axes [0] : tensor<4xf32>
    %l = graph.add %s, %t : tensor<f32>, tensor<f32>
    graph.loss %l : tensor<f32>
    return
  }
}
