"""make_onnx.py KIND OUT_DIR: writes ONNX files with the onnx package's helper API, for what
torch 1.13's exporter cannot write (the newer exporter's opsets and external data) and for the
error cases. Prints the expected loss where the model has one (computed here with numpy).

  opset18       an MLP in opset 18 with a symbolic batch dimension, its weights in an external
                data file: MatMul, Add, LayerNormalization, Split (num_outputs), Concat,
                ReduceMean (axes as an input), Sub, Relu, Gemm, SoftmaxCrossEntropyLoss
  function      a model-local function (as the newer exporter writes modules) called twice, with
                an attribute the body refers to
  ops           one model through many rows of the op table (Abs, Trilu, Sigmoid, LogSoftmax,
                Softmax over axis 0, Gather by constant indices, Gemm with alpha, a vector MatMul, Where of two computed values, ReduceMax, ReduceSum, Flatten,
                Squeeze, Unsqueeze, Expand, Pow, Reciprocal, Exp, Log, Tanh, Neg, Dropout)
  windows       the window attributes torch's exporter never writes: Conv with auto_pad
                SAME_UPPER (asymmetric), explicit asymmetric pads and no bias, MaxPool with
                SAME_LOWER, AveragePool with count_include_pad and asymmetric pads, Clip with
                only a min, Pad by an input (expected loss from torch, in float64)
  conv1d        a Conv over a rank-3 input (not imported: 2-D only)
  maxpool-indices  a MaxPool whose Indices output is used
  unsupported   a node whose operator ampc does not import (Cos)
  no-scalar     a model whose only output is a matrix
  missing-data  a weight whose external data file is missing
  external NAME LOCATION [OFFSET [LENGTH]]
                NAME.onnx, whose 4x4 f32 weight's external data entries are the given strings,
                and ext.weights (its 64 bytes of ones) beside it
  bad-reshape   a Reshape to a shape with the wrong number of elements
  bad-matmul    a MatMul whose contraction dimensions differ
"""

import math
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

kind, out = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(0)


def save(model, name):
    onnx.save(model, os.path.join(out, name + ".onnx"))


def layer_norm(x, gamma, beta, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def opset18():
    w1 = rng.standard_normal((8, 16)).astype(np.float32) * 0.5
    b1 = rng.standard_normal(16).astype(np.float32) * 0.1
    gamma = (1 + 0.1 * rng.standard_normal(16)).astype(np.float32)
    beta = (0.1 * rng.standard_normal(16)).astype(np.float32)
    w2 = rng.standard_normal((4, 16)).astype(np.float32) * 0.5
    x = rng.standard_normal((4, 8)).astype(np.float32)
    labels = np.array([0, 3, 1, 2], dtype=np.int64)
    initializers = [numpy_helper.from_array(a, name) for a, name in
                    [(w1, "w1"), (b1, "b1"), (gamma, "ln.weight"), (beta, "ln.bias"),
                     (w2, "w2")]]
    initializers.append(numpy_helper.from_array(np.array([1], dtype=np.int64), "mean_axes"))
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"], name="fc1"),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("LayerNormalization", ["h1", "ln.weight", "ln.bias"], ["h2"],
                         axis=-1, epsilon=1e-5),
        helper.make_node("Split", ["h2"], ["a", "b"], axis=1, num_outputs=2),
        helper.make_node("Concat", ["b", "a"], ["h3"], axis=1),
        helper.make_node("ReduceMean", ["h3", "mean_axes"], ["m"], keepdims=1),
        helper.make_node("Sub", ["h3", "m"], ["h4"]),
        helper.make_node("Relu", ["h4"], ["h5"]),
        helper.make_node("Gemm", ["h5", "w2"], ["logits"], transB=1),
        helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss"]),
    ]
    graph = helper.make_graph(
        nodes, "opset18",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8]),
         helper.make_tensor_value_info("labels", TensorProto.INT64, ["batch"])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.save(model, os.path.join(out, "opset18.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="opset18.weights", size_threshold=0)
    x.tofile(os.path.join(out, "opset18.x.bin"))
    labels.tofile(os.path.join(out, "opset18.labels.bin"))
    h = layer_norm(x @ w1 + b1, gamma, beta, 1e-5)
    h = np.concatenate([h[:, 8:], h[:, :8]], axis=1)
    h = np.maximum(h - h.mean(1, keepdims=True), 0)
    logits = (h @ w2.T).astype(np.float64)
    logp = logits - logits.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    print("expected loss %.6f" % -logp[np.arange(4), labels].mean())


def small(nodes, outputs, initializers=()):
    graph = helper.make_graph(
        nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
        outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def scalar_output():
    return [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])]


def function():
    # ScaledLinear(x, w) = (x @ w) * scale, scale an attribute of the call.
    scale = onnx.AttributeProto()
    scale.name, scale.ref_attr_name, scale.type = "value_float", "scale", onnx.AttributeProto.FLOAT
    constant = helper.make_node("Constant", [], ["c"])
    constant.attribute.append(scale)
    body = helper.make_function(
        "custom", "ScaledLinear", ["x", "w"], ["y"],
        [helper.make_node("MatMul", ["x", "w"], ["p"]), constant,
         helper.make_node("Mul", ["p", "c"], ["y"])],
        [helper.make_opsetid("", 18)], ["scale"])
    w1 = rng.standard_normal((4, 6)).astype(np.float32)
    w2 = rng.standard_normal((6, 3)).astype(np.float32)
    x = rng.standard_normal((5, 4)).astype(np.float32)
    nodes = [
        helper.make_node("ScaledLinear", ["x", "w1"], ["h"], domain="custom", name="layer1",
                         scale=0.5),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("ScaledLinear", ["r", "w2"], ["o"], domain="custom", name="layer2",
                         scale=2.0),
        helper.make_node("Mul", ["o", "o"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["loss"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "function", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 4])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(graph, functions=[body],
                              opset_imports=[helper.make_opsetid("", 18),
                                             helper.make_opsetid("custom", 1)])
    save(model, "function")
    x.tofile(os.path.join(out, "function.x.bin"))
    o = (np.maximum(x @ w1 * 0.5, 0) @ w2 * 2.0).astype(np.float64)
    print("expected loss %.6f" % (o * o).mean())


def ops():
    x = rng.standard_normal((4, 6)).astype(np.float32)
    w = (rng.standard_normal((6, 6)) * 0.5).astype(np.float32)
    v = rng.standard_normal(6).astype(np.float32)
    c = (rng.standard_normal((6, 4)) * 0.5).astype(np.float32)
    mask = np.array([[1, 0, 1, 1, 0, 1]] * 4, dtype=bool)
    tensors = {"w": w, "v": v, "c": c, "mask": mask,
               "picks": np.array([5, 0, 2], dtype=np.int64),
               "two": np.array(2.0, dtype=np.float32), "half": np.array(-0.5, dtype=np.float32),
               "one": np.array(1.0, dtype=np.float32), "axes1": np.array([1], dtype=np.int64),
               "shape": np.array([2, 4, 6], dtype=np.int64),
               "ratio": np.array(0.3, dtype=np.float32)}
    n = helper.make_node
    nodes = [
        n("MatMul", ["x", "w"], ["h"]),
        n("Abs", ["h"], ["a"]),
        n("Trilu", ["a"], ["t"], upper=0),
        n("Sigmoid", ["t"], ["s"]),
        n("LogSoftmax", ["s"], ["ls"], axis=-1),
        n("Softmax", ["h"], ["sm0"], axis=0),
        n("Gather", ["h", "picks"], ["g"], axis=1),
        n("Gemm", ["h", "c"], ["gm"], alpha=0.5),
        n("MatMul", ["h", "v"], ["mv"]),
        n("Tanh", ["h"], ["th"]),
        n("Neg", ["h"], ["nh"]),
        n("Where", ["mask", "th", "nh"], ["wh"]),
        n("ReduceMax", ["wh"], ["mx"], axes=[1], keepdims=0),
        n("ReduceSum", ["ls", "axes1"], ["rs"], keepdims=1),
        n("Flatten", ["sm0"], ["fl"], axis=0),
        n("Unsqueeze", ["g", "axes1"], ["ug"]),
        n("Squeeze", ["ug", "axes1"], ["sg"]),
        n("Expand", ["h", "shape"], ["ex"]),
        n("Mul", ["h", "h"], ["h2"]),
        n("Add", ["h2", "one"], ["h2p"]),
        n("Pow", ["h2p", "half"], ["pw"]),
        n("Reciprocal", ["h2p"], ["rc"]),
        n("Exp", ["th"], ["e"]),
        n("Log", ["h2p"], ["lg"]),
        n("Dropout", ["e", "ratio"], ["dr"]),
        n("HardSigmoid", ["h"], ["hs"], alpha=1.0 / 6.0, beta=0.5),
        n("HardSigmoid", ["h"], ["hg"], alpha=0.3, beta=0.4),
        # loss = mean(rs) + mean(fl) + mean(sg) + mean(gm) + mean(mv) + mean(mx) + mean(ex)
        #        + mean(pw) + mean(rc) + mean(dr) + mean(lg) + mean(hs) + mean(hg)
    ]
    parts = ["rs", "fl", "sg", "gm", "mv", "mx", "ex", "pw", "rc", "dr", "lg", "hs", "hg"]
    for i, part in enumerate(parts):
        nodes.append(n("ReduceMean", [part], ["m%d" % i], keepdims=0))
    total = "m0"
    for i in range(1, len(parts)):
        nodes.append(n("Add", [total, "m%d" % i], ["sum%d" % i]))
        total = "sum%d" % i
    nodes.append(n("Identity", [total], ["loss"]))
    graph = helper.make_graph(
        nodes, "ops", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(value, name) for name, value in tensors.items()])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), "ops")
    x.tofile(os.path.join(out, "ops.x.bin"))
    x, w, v, c = (t.astype(np.float64) for t in (x, w, v, c))
    h = x @ w
    t = np.tril(np.abs(h))
    s_ = 1 / (1 + np.exp(-t))
    ls = s_ - s_.max(1, keepdims=True)
    ls = ls - np.log(np.exp(ls).sum(1, keepdims=True))
    sm0 = np.exp(h - h.max(0)) / np.exp(h - h.max(0)).sum(0)
    g = h[:, [5, 0, 2]]
    gm = 0.5 * (h @ c)
    mv = h @ v
    wh = np.where(mask, np.tanh(h), -h)
    h2p = h * h + 1
    values = [ls.sum(1, keepdims=True), sm0.reshape(1, -1), g, gm, mv, wh.max(1),
              np.broadcast_to(h, (2, 4, 6)), h2p ** -0.5, 1 / h2p, np.exp(np.tanh(h)),
              np.log(h2p), np.clip(h / 6 + 0.5, 0, 1), np.clip(0.3 * h + 0.4, 0, 1)]
    print("expected loss %.6f" % sum(value.mean() for value in values))


def windows():
    import torch
    import torch.nn.functional as F

    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    w1 = (rng.standard_normal((4, 3, 4, 3)) * 0.3).astype(np.float32)
    b1 = (rng.standard_normal(4) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((6, 4, 3, 3)) * 0.3).astype(np.float32)
    tensors = {"w1": w1, "b1": b1, "w2": w2,
               "zero": np.array(0.0, dtype=np.float32),
               "pads": np.array([0, 0, 1, 0, 0, 0, 0, 2], dtype=np.int64)}
    n = helper.make_node
    nodes = [
        # [2, 3, 9, 8] -> SAME_UPPER, stride 2: [2, 4, 5, 4]; rows padded 1 + 2, columns 0 + 1.
        n("Conv", ["x", "w1", "b1"], ["c1"], auto_pad="SAME_UPPER", strides=[2, 2]),
        n("Clip", ["c1", "zero"], ["r1"]),
        # Asymmetric explicit padding, dilation, no bias: [2, 6, 5, 3].
        n("Conv", ["r1", "w2"], ["c2"], pads=[2, 1, 0, 2], dilations=[1, 2]),
        # SAME_LOWER max pooling, stride 1: [2, 6, 5, 3].
        n("MaxPool", ["c2"], ["m"], kernel_shape=[2, 3], auto_pad="SAME_LOWER"),
        # Average over padding that counts: [2, 6, 3, 2].
        n("AveragePool", ["m"], ["a"], kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1],
          count_include_pad=1),
        # Zero padding by an input, a row before and two columns after: [2, 6, 4, 4].
        n("Pad", ["a", "pads"], ["p"]),
        n("GlobalAveragePool", ["p"], ["g"]),
        n("ReduceSum", ["g"], ["s"], keepdims=0),
        n("Mul", ["s", "s"], ["loss"]),
    ]
    graph = helper.make_graph(
        nodes, "windows", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 9, 8])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(value, name) for name, value in tensors.items()])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), "windows")
    x.tofile(os.path.join(out, "windows.x.bin"))
    t = {name: torch.from_numpy(value).double() for name, value in
         [("x", x), ("w1", w1), ("b1", b1), ("w2", w2)]}
    # F.pad's order is (left, right, top, bottom).
    c1 = F.conv2d(F.pad(t["x"], (0, 1, 1, 2)), t["w1"], t["b1"], stride=2)
    c2 = F.conv2d(F.pad(c1.clamp(min=0), (1, 2, 2, 0)), t["w2"], dilation=(1, 2))
    m = F.max_pool2d(F.pad(c2, (1, 1, 1, 0), value=-math.inf), (2, 3), stride=1)
    a = F.avg_pool2d(F.pad(m, (0, 1, 1, 1)), (3, 2), stride=2)
    p = F.pad(a, (0, 2, 1, 0))
    loss = p.mean((2, 3)).sum() ** 2
    print("expected loss %.6f" % loss.item())


if kind == "opset18":
    opset18()
elif kind == "ops":
    ops()
elif kind == "function":
    function()
elif kind == "windows":
    windows()
elif kind == "conv1d":
    w = numpy_helper.from_array(np.ones((2, 4, 3), dtype=np.float32), "w")
    save(small([helper.make_node("Reshape", ["x", "shape"], ["x3"]),
                helper.make_node("Conv", ["x3", "w"], ["y"], name="temporal"),
                helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0)],
               scalar_output(), [w, numpy_helper.from_array(np.array([1, 4, 4], dtype=np.int64),
                                                            "shape")]), "conv1d")
elif kind == "maxpool-indices":
    shape = numpy_helper.from_array(np.array([1, 1, 4, 4], dtype=np.int64), "shape")
    save(small([helper.make_node("Reshape", ["x", "shape"], ["x4"]),
                helper.make_node("MaxPool", ["x4"], ["y", "where"], kernel_shape=[2, 2],
                                 name="pool"),
                helper.make_node("Cast", ["where"], ["wf"], to=TensorProto.FLOAT),
                helper.make_node("ReduceSum", ["wf"], ["loss"], keepdims=0)],
               scalar_output(), [shape]), "maxpool-indices")
elif kind == "unsupported":
    save(small([helper.make_node("Relu", ["x"], ["r"], name="first"),
                helper.make_node("Cos", ["r"], ["c"], name="my_cos"),
                helper.make_node("ReduceSum", ["c"], ["loss"], keepdims=0)], scalar_output()),
         "unsupported")
elif kind == "no-scalar":
    save(small([helper.make_node("Relu", ["x"], ["y"])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])]), "no-scalar")
elif kind == "missing-data":
    w = numpy_helper.from_array(np.ones((4, 4), dtype=np.float32), "w")
    model = small([helper.make_node("MatMul", ["x", "w"], ["y"]),
                   helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0)],
                  scalar_output(), [w])
    onnx.save(model, os.path.join(out, "missing-data.onnx"), save_as_external_data=True,
              location="missing-data.weights", size_threshold=0)
    os.remove(os.path.join(out, "missing-data.weights"))
elif kind == "external":
    name, location = sys.argv[3], sys.argv[4]
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4, 4],
                    data_location=TensorProto.EXTERNAL)
    for key, value in zip(["location", "offset", "length"], sys.argv[4:7]):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    np.ones((4, 4), dtype=np.float32).tofile(os.path.join(out, "ext.weights"))
    save(small([helper.make_node("MatMul", ["x", "w"], ["y"]),
                helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0)],
               scalar_output(), [w]), name)
elif kind == "bad-reshape":
    shape = numpy_helper.from_array(np.array([3, 5], dtype=np.int64), "shape")
    save(small([helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape_me"),
                helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0)],
               scalar_output(), [shape]), "bad-reshape")
elif kind == "bad-matmul":
    w = numpy_helper.from_array(np.ones((5, 3), dtype=np.float32), "w")
    save(small([helper.make_node("MatMul", ["x", "w"], ["y"], name="project"),
                helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0)],
               scalar_output(), [w]), "bad-matmul")
else:
    raise SystemExit("unknown kind " + kind)
