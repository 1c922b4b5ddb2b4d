"""fuzz_structure.py AMPC MODEL.onnx WORK_DIR COUNT: structural mutations of MODEL.onnx (the onnx
package's view of it, deterministic): an attribute's integers changed (axes, perms, splits), an
operator replaced by another, a node's inputs swapped or dropped, an initializer's or input's
dimensions changed, a node removed. `AMPC verify` must exit with status 0 or 1 on every mutant,
as for the byte-level mutations of fuzz_onnx.py, but these reach the importer's op table and the
graph ops' shape rules rather than the protobuf parser.
"""

import copy
import os
import random
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

ampc, path, work, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
original = onnx.load(path)
generator = random.Random(99)
OPS = ["Add", "Mul", "MatMul", "Transpose", "Reshape", "Softmax", "ReduceMean", "Concat",
       "Gather", "Slice", "Split", "Where", "LayerNormalization", "Relu", "Unsqueeze", "Squeeze",
       "Expand", "Cast", "Erf", "Sigmoid", "Sub", "Div", "Pow", "Gemm", "Identity"]
statuses = {0: 0, 1: 0}
for i in range(count):
    model = copy.deepcopy(original)
    graph = model.graph
    kind = i % 6
    if kind == 0:  # change an integer attribute
        candidates = [(n, a) for n in graph.node for a in n.attribute
                      if a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.INTS)]
        if candidates:
            _, attribute = generator.choice(candidates)
            if attribute.type == onnx.AttributeProto.INT:
                attribute.i = generator.randint(-4, 4)
            elif attribute.ints:
                attribute.ints[generator.randrange(len(attribute.ints))] = generator.randint(-4, 4)
    elif kind == 1:  # another operator
        generator.choice(graph.node).op_type = generator.choice(OPS)
    elif kind == 2:  # inputs swapped or dropped
        node = generator.choice(graph.node)
        if len(node.input) >= 2 and generator.random() < 0.5:
            node.input[0], node.input[1] = node.input[1], node.input[0]
        elif node.input:
            del node.input[generator.randrange(len(node.input))]
    elif kind == 3:  # an initializer reshaped (same values, other dims)
        if graph.initializer:
            index = generator.randrange(len(graph.initializer))
            array = numpy_helper.to_array(graph.initializer[index])
            if array.size > 1:
                dims = [array.size] if array.ndim > 1 else [1, array.size]
                replacement = numpy_helper.from_array(array.reshape(dims),
                                                      graph.initializer[index].name)
                graph.initializer[index].CopyFrom(replacement)
    elif kind == 4:  # an input's dimension changed
        if graph.input:
            dims = generator.choice(graph.input).type.tensor_type.shape.dim
            if dims:
                dims[generator.randrange(len(dims))].dim_value = generator.randint(1, 9)
    else:  # a node removed
        del graph.node[generator.randrange(len(graph.node))]
    mutant = os.path.join(work, "structure-%d.onnx" % i)
    onnx.save(model, mutant)
    status = subprocess.run([ampc, "verify", mutant], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, timeout=60).returncode
    if status not in statuses:
        print("FAIL: mutant %d (%s, kind %d) exited with status %d" % (i, mutant, kind, status))
        sys.exit(1)
    statuses[status] += 1
    os.remove(mutant)
print("ok: %d structural mutants, %d imported, %d rejected with an error"
      % (count, statuses[0], statuses[1]))
