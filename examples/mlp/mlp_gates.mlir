// mlp_gates.mlir - an MLP with the activations of MobileNetV3's blocks, as MNIST-sized classifier.
//
// a = images @ fc1.w + fc1.b; h = hardswish(a) gated by sigmoid(h @ gate.w) (a squeeze-excite
// style gate), plus hardsigmoid(a) * softplus(a); logits = that @ fc2.w + fc2.b; loss = mean
// cross-entropy against the labels. Batch 64, 784 -> 128 -> 10; 784 * 128 + 128 + 128 * 128 +
// 128 * 10 + 10 = 118,154 parameters. It exercises every activation opcode with its gradient
// (hardswish, sigmoid, hardsigmoid, softplus) on the CPU backend, in the generated kernels and
// in the dry run. Initialisation as PyTorch's nn.Linear: uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)).

graph.model @mlp_gates {
  graph.param @fc1.w : tensor<784x128xf32>
      init #graph.uniform<low = -0.03571428571428571, high = 0.03571428571428571>
  graph.param @fc1.b : tensor<128xf32>
      init #graph.uniform<low = -0.03571428571428571, high = 0.03571428571428571>
  graph.param @gate.w : tensor<128x128xf32>
      init #graph.uniform<low = -0.08838834764831845, high = 0.08838834764831845>
  graph.param @fc2.w : tensor<128x10xf32>
      init #graph.uniform<low = -0.08838834764831845, high = 0.08838834764831845>
  graph.param @fc2.b : tensor<10xf32>
      init #graph.uniform<low = -0.08838834764831845, high = 0.08838834764831845>

  graph.input @images : tensor<64x784xf32>
  graph.input @labels : tensor<64xi32>

  func.func @forward() {
    %images = graph.get_input @images : tensor<64x784xf32>
    %labels = graph.get_input @labels : tensor<64xi32>
    %fc1.w = graph.get_param @fc1.w : tensor<784x128xf32>
    %fc1.b = graph.get_param @fc1.b : tensor<128xf32>
    %gate.w = graph.get_param @gate.w : tensor<128x128xf32>
    %fc2.w = graph.get_param @fc2.w : tensor<128x10xf32>
    %fc2.b = graph.get_param @fc2.b : tensor<10xf32>

    %a0 = graph.matmul %images, %fc1.w : tensor<64x784xf32>, tensor<784x128xf32>
    %a = graph.add %a0, %fc1.b : tensor<64x128xf32>, tensor<128xf32>
    %h = graph.hardswish %a : tensor<64x128xf32>
    // The gate: sigmoid of a projection of h, multiplying h.
    %g0 = graph.matmul %h, %gate.w : tensor<64x128xf32>, tensor<128x128xf32>
    %g = graph.sigmoid %g0 : tensor<64x128xf32>
    %hg = graph.mul %h, %g : tensor<64x128xf32>, tensor<64x128xf32>
    // A second path through the other two activations.
    %s = graph.hardsigmoid %a : tensor<64x128xf32>
    %p = graph.softplus %a : tensor<64x128xf32>
    %sp = graph.mul %s, %p : tensor<64x128xf32>, tensor<64x128xf32>
    %z = graph.add %hg, %sp : tensor<64x128xf32>, tensor<64x128xf32>

    %logits0 = graph.matmul %z, %fc2.w : tensor<64x128xf32>, tensor<128x10xf32>
    %logits = graph.add %logits0, %fc2.b : tensor<64x10xf32>, tensor<10xf32>
    %loss = graph.cross_entropy %logits, %labels : tensor<64x10xf32>, tensor<64xi32>
    graph.loss %loss : tensor<f32>
    return
  }
}
