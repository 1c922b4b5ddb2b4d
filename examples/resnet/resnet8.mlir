// resnet8.mlir - a CIFAR-style ResNet-8 (He et al. 2016, 4.2) on 32x32 RGB images,
// batch 32, 10 classes; written by make_resnet.py --blocks 1 --batch 32.
// Convolutions without bias, each followed by a batch norm whose running statistics
// are untrained parameters, updated while training; PyTorch's default initialisation.

graph.model @resnet8 {
  graph.param @conv1.weight : tensor<16x3x3x3xf32> init #graph.uniform<low = -0.19245008972987526, high = 0.19245008972987526>
  graph.param @bn1.weight : tensor<16xf32> init #graph.ones
  graph.param @bn1.bias : tensor<16xf32> init #graph.zeros
  graph.param @bn1.running_mean : tensor<16xf32> init #graph.zeros untrained
  graph.param @bn1.running_var : tensor<16xf32> init #graph.ones untrained
  graph.param @bn1.num_batches_tracked : tensor<f32> init #graph.zeros untrained
  graph.param @layer1.0.conv1.weight : tensor<16x16x3x3xf32> init #graph.uniform<low = -0.08333333333333333, high = 0.08333333333333333>
  graph.param @layer1.0.bn1.weight : tensor<16xf32> init #graph.ones
  graph.param @layer1.0.bn1.bias : tensor<16xf32> init #graph.zeros
  graph.param @layer1.0.bn1.running_mean : tensor<16xf32> init #graph.zeros untrained
  graph.param @layer1.0.bn1.running_var : tensor<16xf32> init #graph.ones untrained
  graph.param @layer1.0.bn1.num_batches_tracked : tensor<f32> init #graph.zeros untrained
  graph.param @layer1.0.conv2.weight : tensor<16x16x3x3xf32> init #graph.uniform<low = -0.08333333333333333, high = 0.08333333333333333>
  graph.param @layer1.0.bn2.weight : tensor<16xf32> init #graph.ones
  graph.param @layer1.0.bn2.bias : tensor<16xf32> init #graph.zeros
  graph.param @layer1.0.bn2.running_mean : tensor<16xf32> init #graph.zeros untrained
  graph.param @layer1.0.bn2.running_var : tensor<16xf32> init #graph.ones untrained
  graph.param @layer1.0.bn2.num_batches_tracked : tensor<f32> init #graph.zeros untrained
  graph.param @layer2.0.conv1.weight : tensor<32x16x3x3xf32> init #graph.uniform<low = -0.08333333333333333, high = 0.08333333333333333>
  graph.param @layer2.0.bn1.weight : tensor<32xf32> init #graph.ones
  graph.param @layer2.0.bn1.bias : tensor<32xf32> init #graph.zeros
  graph.param @layer2.0.bn1.running_mean : tensor<32xf32> init #graph.zeros untrained
  graph.param @layer2.0.bn1.running_var : tensor<32xf32> init #graph.ones untrained
  graph.param @layer2.0.bn1.num_batches_tracked : tensor<f32> init #graph.zeros untrained
  graph.param @layer2.0.conv2.weight : tensor<32x32x3x3xf32> init #graph.uniform<low = -0.05892556509887897, high = 0.05892556509887897>
  graph.param @layer2.0.bn2.weight : tensor<32xf32> init #graph.ones
  graph.param @layer2.0.bn2.bias : tensor<32xf32> init #graph.zeros
  graph.param @layer2.0.bn2.running_mean : tensor<32xf32> init #graph.zeros untrained
  graph.param @layer2.0.bn2.running_var : tensor<32xf32> init #graph.ones untrained
  graph.param @layer2.0.bn2.num_batches_tracked : tensor<f32> init #graph.zeros untrained
  graph.param @layer2.0.downsample.0.weight : tensor<32x16x1x1xf32> init #graph.uniform<low = -0.25, high = 0.25>
  graph.param @layer2.0.downsample.1.weight : tensor<32xf32> init #graph.ones
  graph.param @layer2.0.downsample.1.bias : tensor<32xf32> init #graph.zeros
  graph.param @layer2.0.downsample.1.running_mean : tensor<32xf32> init #graph.zeros untrained
  graph.param @layer2.0.downsample.1.running_var : tensor<32xf32> init #graph.ones untrained
  graph.param @layer2.0.downsample.1.num_batches_tracked : tensor<f32> init #graph.zeros untrained
  graph.param @layer3.0.conv1.weight : tensor<64x32x3x3xf32> init #graph.uniform<low = -0.05892556509887897, high = 0.05892556509887897>
  graph.param @layer3.0.bn1.weight : tensor<64xf32> init #graph.ones
  graph.param @layer3.0.bn1.bias : tensor<64xf32> init #graph.zeros
  graph.param @layer3.0.bn1.running_mean : tensor<64xf32> init #graph.zeros untrained
  graph.param @layer3.0.bn1.running_var : tensor<64xf32> init #graph.ones untrained
  graph.param @layer3.0.bn1.num_batches_tracked : tensor<f32> init #graph.zeros untrained
  graph.param @layer3.0.conv2.weight : tensor<64x64x3x3xf32> init #graph.uniform<low = -0.041666666666666664, high = 0.041666666666666664>
  graph.param @layer3.0.bn2.weight : tensor<64xf32> init #graph.ones
  graph.param @layer3.0.bn2.bias : tensor<64xf32> init #graph.zeros
  graph.param @layer3.0.bn2.running_mean : tensor<64xf32> init #graph.zeros untrained
  graph.param @layer3.0.bn2.running_var : tensor<64xf32> init #graph.ones untrained
  graph.param @layer3.0.bn2.num_batches_tracked : tensor<f32> init #graph.zeros untrained
  graph.param @layer3.0.downsample.0.weight : tensor<64x32x1x1xf32> init #graph.uniform<low = -0.17677669529663687, high = 0.17677669529663687>
  graph.param @layer3.0.downsample.1.weight : tensor<64xf32> init #graph.ones
  graph.param @layer3.0.downsample.1.bias : tensor<64xf32> init #graph.zeros
  graph.param @layer3.0.downsample.1.running_mean : tensor<64xf32> init #graph.zeros untrained
  graph.param @layer3.0.downsample.1.running_var : tensor<64xf32> init #graph.ones untrained
  graph.param @layer3.0.downsample.1.num_batches_tracked : tensor<f32> init #graph.zeros untrained
  graph.param @fc.weight : tensor<64x10xf32> init #graph.uniform<low = -0.125, high = 0.125>
  graph.param @fc.bias : tensor<10xf32> init #graph.uniform<low = -0.125, high = 0.125>

  graph.input @images : tensor<32x3x32x32xf32>
  graph.input @labels : tensor<32xi32>

  func.func @forward() {
    %images = graph.get_input @images : tensor<32x3x32x32xf32>
    %labels = graph.get_input @labels : tensor<32xi32>
    %conv1.weight = graph.get_param @conv1.weight : tensor<16x3x3x3xf32>
    %v1 = graph.conv2d %images, %conv1.weight padding [1, 1, 1, 1] : tensor<32x3x32x32xf32>, tensor<16x3x3x3xf32>
    %bn1.weight = graph.get_param @bn1.weight : tensor<16xf32>
    %bn1.bias = graph.get_param @bn1.bias : tensor<16xf32>
    %bn1.running_mean = graph.get_param @bn1.running_mean : tensor<16xf32>
    %bn1.running_var = graph.get_param @bn1.running_var : tensor<16xf32>
    %v2 = graph.batch_norm %v1, %bn1.weight, %bn1.bias, %bn1.running_mean, %bn1.running_var : tensor<32x16x32x32xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>
    graph.update_running_stats %v1 {momentum = 0.1 : f64, mean = @bn1.running_mean, var = @bn1.running_var, count = @bn1.num_batches_tracked} : tensor<32x16x32x32xf32>
    %v3 = graph.relu %v2 : tensor<32x16x32x32xf32>
    %layer1.0.conv1.weight = graph.get_param @layer1.0.conv1.weight : tensor<16x16x3x3xf32>
    %v4 = graph.conv2d %v3, %layer1.0.conv1.weight padding [1, 1, 1, 1] : tensor<32x16x32x32xf32>, tensor<16x16x3x3xf32>
    %layer1.0.bn1.weight = graph.get_param @layer1.0.bn1.weight : tensor<16xf32>
    %layer1.0.bn1.bias = graph.get_param @layer1.0.bn1.bias : tensor<16xf32>
    %layer1.0.bn1.running_mean = graph.get_param @layer1.0.bn1.running_mean : tensor<16xf32>
    %layer1.0.bn1.running_var = graph.get_param @layer1.0.bn1.running_var : tensor<16xf32>
    %v5 = graph.batch_norm %v4, %layer1.0.bn1.weight, %layer1.0.bn1.bias, %layer1.0.bn1.running_mean, %layer1.0.bn1.running_var : tensor<32x16x32x32xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>
    graph.update_running_stats %v4 {momentum = 0.1 : f64, mean = @layer1.0.bn1.running_mean, var = @layer1.0.bn1.running_var, count = @layer1.0.bn1.num_batches_tracked} : tensor<32x16x32x32xf32>
    %v6 = graph.relu %v5 : tensor<32x16x32x32xf32>
    %layer1.0.conv2.weight = graph.get_param @layer1.0.conv2.weight : tensor<16x16x3x3xf32>
    %v7 = graph.conv2d %v6, %layer1.0.conv2.weight padding [1, 1, 1, 1] : tensor<32x16x32x32xf32>, tensor<16x16x3x3xf32>
    %layer1.0.bn2.weight = graph.get_param @layer1.0.bn2.weight : tensor<16xf32>
    %layer1.0.bn2.bias = graph.get_param @layer1.0.bn2.bias : tensor<16xf32>
    %layer1.0.bn2.running_mean = graph.get_param @layer1.0.bn2.running_mean : tensor<16xf32>
    %layer1.0.bn2.running_var = graph.get_param @layer1.0.bn2.running_var : tensor<16xf32>
    %v8 = graph.batch_norm %v7, %layer1.0.bn2.weight, %layer1.0.bn2.bias, %layer1.0.bn2.running_mean, %layer1.0.bn2.running_var : tensor<32x16x32x32xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>
    graph.update_running_stats %v7 {momentum = 0.1 : f64, mean = @layer1.0.bn2.running_mean, var = @layer1.0.bn2.running_var, count = @layer1.0.bn2.num_batches_tracked} : tensor<32x16x32x32xf32>
    %v9 = graph.add %v8, %v3 : tensor<32x16x32x32xf32>, tensor<32x16x32x32xf32>
    %v10 = graph.relu %v9 : tensor<32x16x32x32xf32>
    %layer2.0.conv1.weight = graph.get_param @layer2.0.conv1.weight : tensor<32x16x3x3xf32>
    %v11 = graph.conv2d %v10, %layer2.0.conv1.weight strides [2, 2] padding [1, 1, 1, 1] : tensor<32x16x32x32xf32>, tensor<32x16x3x3xf32>
    %layer2.0.bn1.weight = graph.get_param @layer2.0.bn1.weight : tensor<32xf32>
    %layer2.0.bn1.bias = graph.get_param @layer2.0.bn1.bias : tensor<32xf32>
    %layer2.0.bn1.running_mean = graph.get_param @layer2.0.bn1.running_mean : tensor<32xf32>
    %layer2.0.bn1.running_var = graph.get_param @layer2.0.bn1.running_var : tensor<32xf32>
    %v12 = graph.batch_norm %v11, %layer2.0.bn1.weight, %layer2.0.bn1.bias, %layer2.0.bn1.running_mean, %layer2.0.bn1.running_var : tensor<32x32x16x16xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>
    graph.update_running_stats %v11 {momentum = 0.1 : f64, mean = @layer2.0.bn1.running_mean, var = @layer2.0.bn1.running_var, count = @layer2.0.bn1.num_batches_tracked} : tensor<32x32x16x16xf32>
    %v13 = graph.relu %v12 : tensor<32x32x16x16xf32>
    %layer2.0.conv2.weight = graph.get_param @layer2.0.conv2.weight : tensor<32x32x3x3xf32>
    %v14 = graph.conv2d %v13, %layer2.0.conv2.weight padding [1, 1, 1, 1] : tensor<32x32x16x16xf32>, tensor<32x32x3x3xf32>
    %layer2.0.bn2.weight = graph.get_param @layer2.0.bn2.weight : tensor<32xf32>
    %layer2.0.bn2.bias = graph.get_param @layer2.0.bn2.bias : tensor<32xf32>
    %layer2.0.bn2.running_mean = graph.get_param @layer2.0.bn2.running_mean : tensor<32xf32>
    %layer2.0.bn2.running_var = graph.get_param @layer2.0.bn2.running_var : tensor<32xf32>
    %v15 = graph.batch_norm %v14, %layer2.0.bn2.weight, %layer2.0.bn2.bias, %layer2.0.bn2.running_mean, %layer2.0.bn2.running_var : tensor<32x32x16x16xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>
    graph.update_running_stats %v14 {momentum = 0.1 : f64, mean = @layer2.0.bn2.running_mean, var = @layer2.0.bn2.running_var, count = @layer2.0.bn2.num_batches_tracked} : tensor<32x32x16x16xf32>
    %layer2.0.downsample.0.weight = graph.get_param @layer2.0.downsample.0.weight : tensor<32x16x1x1xf32>
    %v16 = graph.conv2d %v10, %layer2.0.downsample.0.weight strides [2, 2] : tensor<32x16x32x32xf32>, tensor<32x16x1x1xf32>
    %layer2.0.downsample.1.weight = graph.get_param @layer2.0.downsample.1.weight : tensor<32xf32>
    %layer2.0.downsample.1.bias = graph.get_param @layer2.0.downsample.1.bias : tensor<32xf32>
    %layer2.0.downsample.1.running_mean = graph.get_param @layer2.0.downsample.1.running_mean : tensor<32xf32>
    %layer2.0.downsample.1.running_var = graph.get_param @layer2.0.downsample.1.running_var : tensor<32xf32>
    %v17 = graph.batch_norm %v16, %layer2.0.downsample.1.weight, %layer2.0.downsample.1.bias, %layer2.0.downsample.1.running_mean, %layer2.0.downsample.1.running_var : tensor<32x32x16x16xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>
    graph.update_running_stats %v16 {momentum = 0.1 : f64, mean = @layer2.0.downsample.1.running_mean, var = @layer2.0.downsample.1.running_var, count = @layer2.0.downsample.1.num_batches_tracked} : tensor<32x32x16x16xf32>
    %v18 = graph.add %v15, %v17 : tensor<32x32x16x16xf32>, tensor<32x32x16x16xf32>
    %v19 = graph.relu %v18 : tensor<32x32x16x16xf32>
    %layer3.0.conv1.weight = graph.get_param @layer3.0.conv1.weight : tensor<64x32x3x3xf32>
    %v20 = graph.conv2d %v19, %layer3.0.conv1.weight strides [2, 2] padding [1, 1, 1, 1] : tensor<32x32x16x16xf32>, tensor<64x32x3x3xf32>
    %layer3.0.bn1.weight = graph.get_param @layer3.0.bn1.weight : tensor<64xf32>
    %layer3.0.bn1.bias = graph.get_param @layer3.0.bn1.bias : tensor<64xf32>
    %layer3.0.bn1.running_mean = graph.get_param @layer3.0.bn1.running_mean : tensor<64xf32>
    %layer3.0.bn1.running_var = graph.get_param @layer3.0.bn1.running_var : tensor<64xf32>
    %v21 = graph.batch_norm %v20, %layer3.0.bn1.weight, %layer3.0.bn1.bias, %layer3.0.bn1.running_mean, %layer3.0.bn1.running_var : tensor<32x64x8x8xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>
    graph.update_running_stats %v20 {momentum = 0.1 : f64, mean = @layer3.0.bn1.running_mean, var = @layer3.0.bn1.running_var, count = @layer3.0.bn1.num_batches_tracked} : tensor<32x64x8x8xf32>
    %v22 = graph.relu %v21 : tensor<32x64x8x8xf32>
    %layer3.0.conv2.weight = graph.get_param @layer3.0.conv2.weight : tensor<64x64x3x3xf32>
    %v23 = graph.conv2d %v22, %layer3.0.conv2.weight padding [1, 1, 1, 1] : tensor<32x64x8x8xf32>, tensor<64x64x3x3xf32>
    %layer3.0.bn2.weight = graph.get_param @layer3.0.bn2.weight : tensor<64xf32>
    %layer3.0.bn2.bias = graph.get_param @layer3.0.bn2.bias : tensor<64xf32>
    %layer3.0.bn2.running_mean = graph.get_param @layer3.0.bn2.running_mean : tensor<64xf32>
    %layer3.0.bn2.running_var = graph.get_param @layer3.0.bn2.running_var : tensor<64xf32>
    %v24 = graph.batch_norm %v23, %layer3.0.bn2.weight, %layer3.0.bn2.bias, %layer3.0.bn2.running_mean, %layer3.0.bn2.running_var : tensor<32x64x8x8xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>
    graph.update_running_stats %v23 {momentum = 0.1 : f64, mean = @layer3.0.bn2.running_mean, var = @layer3.0.bn2.running_var, count = @layer3.0.bn2.num_batches_tracked} : tensor<32x64x8x8xf32>
    %layer3.0.downsample.0.weight = graph.get_param @layer3.0.downsample.0.weight : tensor<64x32x1x1xf32>
    %v25 = graph.conv2d %v19, %layer3.0.downsample.0.weight strides [2, 2] : tensor<32x32x16x16xf32>, tensor<64x32x1x1xf32>
    %layer3.0.downsample.1.weight = graph.get_param @layer3.0.downsample.1.weight : tensor<64xf32>
    %layer3.0.downsample.1.bias = graph.get_param @layer3.0.downsample.1.bias : tensor<64xf32>
    %layer3.0.downsample.1.running_mean = graph.get_param @layer3.0.downsample.1.running_mean : tensor<64xf32>
    %layer3.0.downsample.1.running_var = graph.get_param @layer3.0.downsample.1.running_var : tensor<64xf32>
    %v26 = graph.batch_norm %v25, %layer3.0.downsample.1.weight, %layer3.0.downsample.1.bias, %layer3.0.downsample.1.running_mean, %layer3.0.downsample.1.running_var : tensor<32x64x8x8xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>
    graph.update_running_stats %v25 {momentum = 0.1 : f64, mean = @layer3.0.downsample.1.running_mean, var = @layer3.0.downsample.1.running_var, count = @layer3.0.downsample.1.num_batches_tracked} : tensor<32x64x8x8xf32>
    %v27 = graph.add %v24, %v26 : tensor<32x64x8x8xf32>, tensor<32x64x8x8xf32>
    %v28 = graph.relu %v27 : tensor<32x64x8x8xf32>
    %v29 = graph.mean %v28 axes [2, 3] : tensor<32x64x8x8xf32>
    %fc.weight = graph.get_param @fc.weight : tensor<64x10xf32>
    %fc.bias = graph.get_param @fc.bias : tensor<10xf32>
    %v30 = graph.matmul %v29, %fc.weight : tensor<32x64xf32>, tensor<64x10xf32>
    %v31 = graph.add %v30, %fc.bias : tensor<32x10xf32>, tensor<10xf32>
    %loss = graph.cross_entropy %v31, %labels : tensor<32x10xf32>, tensor<32xi32>
    graph.loss %loss : tensor<f32>
    return
  }
}
