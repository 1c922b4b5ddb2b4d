"""make_resnet.py [--blocks N] [--batch B] [--out FILE]: writes a CIFAR-style ResNet (He et al.
2016, section 4.2) as a graph-dialect model: a 3x3 convolution to 16 channels, three stages of N
basic blocks (16, 32 and 64 channels; the first block of stages 2 and 3 halves the image with a
stride-2 convolution and a 1x1 strided projection shortcut), global average pooling and a
10-way linear head, on 32x32 RGB images. Each convolution is followed by a batch norm (training
statistics, running mean and variance updated with momentum 0.1, as torch.nn.BatchNorm2d) and,
except before a residual add, a ReLU. Convolutions have no bias. Initialisation as PyTorch's
defaults: convolutions and the head uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)), batch-norm gains
1 and biases 0, running means 0 and variances 1. N = 1 gives ResNet-8 (the example's), N = 3
ResNet-20.
"""

import argparse
import math


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=1)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--out", default="resnet8.mlir")
    a = ap.parse_args()
    depth = 6 * a.blocks + 2
    B = a.batch
    params, body, counter = [], [], [0]

    def value(prefix="v"):
        counter[0] += 1
        return "%%%s%d" % (prefix, counter[0])

    def tensor(shape):
        return "tensor<" + "x".join(str(d) for d in shape) + "xf32>"

    def param(name, shape, init, untrained=False):
        params.append("  graph.param @%s : %s init %s%s"
                      % (name, tensor(shape), init, " untrained" if untrained else ""))
        read = "%" + name
        body.append("    %s = graph.get_param @%s : %s" % (read, name, tensor(shape)))
        return read

    def uniform(fan_in):
        bound = 1 / math.sqrt(fan_in)
        return "#graph.uniform<low = %r, high = %r>" % (-bound, bound)

    def conv(x, shape, name, out_channels, kernel, stride):
        n, c, h, w = shape
        weight = param(name + ".weight", [out_channels, c, kernel, kernel],
                       uniform(c * kernel * kernel))
        pad = kernel // 2
        size = (h + 2 * pad - kernel) // stride + 1
        y = value()
        attrs = (" strides [%d, %d]" % (stride, stride) if stride != 1 else "") + \
                (" padding [%d, %d, %d, %d]" % (pad, pad, pad, pad) if pad else "")
        body.append("    %s = graph.conv2d %s, %s%s : %s, %s"
                    % (y, x, weight, attrs, tensor(shape),
                       tensor([out_channels, c, kernel, kernel])))
        return y, [n, out_channels, size, size]

    def batch_norm(x, shape, name):
        c = shape[1]
        gain = param(name + ".weight", [c], "#graph.ones")
        bias = param(name + ".bias", [c], "#graph.zeros")
        mean = param(name + ".running_mean", [c], "#graph.zeros", True)
        var = param(name + ".running_var", [c], "#graph.ones", True)
        params.append("  graph.param @%s.num_batches_tracked : tensor<f32> init #graph.zeros "
                      "untrained" % name)
        y = value()
        body.append("    %s = graph.batch_norm %s, %s, %s, %s, %s : %s, %s, %s, %s, %s"
                    % (y, x, gain, bias, mean, var, tensor(shape), *[tensor([c])] * 4))
        body.append("    graph.update_running_stats %s {momentum = 0.1 : f64, mean = @%s, "
                    "var = @%s, count = @%s} : %s"
                    % (x, name + ".running_mean", name + ".running_var",
                       name + ".num_batches_tracked", tensor(shape)))
        return y

    def relu(x, shape):
        y = value()
        body.append("    %s = graph.relu %s : %s" % (y, x, tensor(shape)))
        return y

    body.append("    %%images = graph.get_input @images : %s" % tensor([B, 3, 32, 32]))
    body.append("    %%labels = graph.get_input @labels : tensor<%dxi32>" % B)
    x, shape = conv("%images", [B, 3, 32, 32], "conv1", 16, 3, 1)
    x = relu(batch_norm(x, shape, "bn1"), shape)
    for stage, channels in enumerate([16, 32, 64]):
        for block in range(a.blocks):
            name = "layer%d.%d" % (stage + 1, block)
            stride = 2 if stage > 0 and block == 0 else 1
            y, out = conv(x, shape, name + ".conv1", channels, 3, stride)
            y = relu(batch_norm(y, out, name + ".bn1"), out)
            y, out = conv(y, out, name + ".conv2", channels, 3, 1)
            y = batch_norm(y, out, name + ".bn2")
            shortcut = x
            if stride != 1 or shape[1] != channels:
                shortcut, _ = conv(x, shape, name + ".downsample.0", channels, 1, stride)
                shortcut = batch_norm(shortcut, out, name + ".downsample.1")
            summed = value()
            body.append("    %s = graph.add %s, %s : %s, %s"
                        % (summed, y, shortcut, tensor(out), tensor(out)))
            x, shape = relu(summed, out), out
    pooled = value()
    body.append("    %s = graph.mean %s axes [2, 3] : %s" % (pooled, x, tensor(shape)))
    weight = param("fc.weight", [64, 10], uniform(64))
    bias = param("fc.bias", [10], uniform(64))
    logits0, logits = value(), value()
    body.append("    %s = graph.matmul %s, %s : %s, %s"
                % (logits0, pooled, weight, tensor([B, 64]), tensor([64, 10])))
    body.append("    %s = graph.add %s, %s : %s, %s"
                % (logits, logits0, bias, tensor([B, 10]), tensor([10])))
    body.append("    %%loss = graph.cross_entropy %s, %%labels : %s, tensor<%dxi32>"
                % (logits, tensor([B, 10]), B))
    body.append("    graph.loss %loss : tensor<f32>")

    header = ("// resnet%d.mlir - a CIFAR-style ResNet-%d (He et al. 2016, 4.2) on 32x32 RGB images,\n"
              "// batch %d, 10 classes; written by make_resnet.py --blocks %d --batch %d.\n"
              "// Convolutions without bias, each followed by a batch norm whose running statistics\n"
              "// are untrained parameters, updated while training; PyTorch's default initialisation.\n\n"
              % (depth, depth, B, a.blocks, B))
    text = header + "graph.model @resnet%d {\n" % depth + "\n".join(params) + "\n\n"
    text += "  graph.input @images : %s\n  graph.input @labels : tensor<%dxi32>\n\n" % (
        tensor([B, 3, 32, 32]), B)
    text += "  func.func @forward() {\n" + "\n".join(body) + "\n    return\n  }\n}\n"
    with open(a.out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
