// mlp.mlir - a 784-256-10 multilayer perceptron classifying MNIST-sized images.
//
// logits = relu(images @ fc1.w + fc1.b) @ fc2.w + fc2.b; loss = mean cross-entropy against the
// labels. Batch 64; 784 * 256 + 256 + 256 * 10 + 10 = 203,530 parameters. Weights are stored
// [in, out] (x @ W).
//
// Initialisation follows PyTorch's nn.Linear default: weights and biases are both drawn from
// uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in being the layer's input width: 1/sqrt(784) =
// 1/28 for fc1 and 1/sqrt(256) = 1/16 for fc2.

graph.model @mlp {
  // Hidden layer: 784 -> 256.
  graph.param @fc1.w : tensor<784x256xf32>
      init #graph.uniform<low = -0.03571428571428571, high = 0.03571428571428571>
  graph.param @fc1.b : tensor<256xf32>
      init #graph.uniform<low = -0.03571428571428571, high = 0.03571428571428571>
  // Output layer: 256 -> 10 classes.
  graph.param @fc2.w : tensor<256x10xf32>
      init #graph.uniform<low = -0.0625, high = 0.0625>
  graph.param @fc2.b : tensor<10xf32>
      init #graph.uniform<low = -0.0625, high = 0.0625>

  // A batch: flattened 28x28 images and their class labels in [0, 10).
  graph.input @images : tensor<64x784xf32>
  graph.input @labels : tensor<64xi32>

  func.func @forward() {
    %images = graph.get_input @images : tensor<64x784xf32>
    %labels = graph.get_input @labels : tensor<64xi32>
    %fc1.w = graph.get_param @fc1.w : tensor<784x256xf32>
    %fc1.b = graph.get_param @fc1.b : tensor<256xf32>
    %fc2.w = graph.get_param @fc2.w : tensor<256x10xf32>
    %fc2.b = graph.get_param @fc2.b : tensor<10xf32>

    // Hidden layer; the bias broadcasts over the batch.
    %h0 = graph.matmul %images, %fc1.w : tensor<64x784xf32>, tensor<784x256xf32>
    %h1 = graph.add %h0, %fc1.b : tensor<64x256xf32>, tensor<256xf32>
    %h = graph.relu %h1 : tensor<64x256xf32>

    // Output layer and loss.
    %logits0 = graph.matmul %h, %fc2.w : tensor<64x256xf32>, tensor<256x10xf32>
    %logits = graph.add %logits0, %fc2.b : tensor<64x10xf32>, tensor<10xf32>
    %loss = graph.cross_entropy %logits, %labels : tensor<64x10xf32>, tensor<64xi32>
    graph.loss %loss : tensor<f32>
    return
  }
}
