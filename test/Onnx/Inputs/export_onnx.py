"""export_onnx.py MODEL OUT_DIR [OPSET] [--eval]: exports a model of torch_models.py as OUT_DIR/MODEL.onnx and
writes its batch as raw little-endian files OUT_DIR/MODEL.NAME.bin (ampc eval --input NAME=FILE)
and as OUT_DIR/MODEL.batch.pt.

The TorchScript exporter with opset 17 in training mode: in eval mode it merges initializers of
equal value (every LayerNorm's ones would become one parameter), and it folds the transpose of a
weight into a new, unnamed initializer. A tied weight stays one initializer either way.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
import torch_models  # noqa: E402

name, out = sys.argv[1], sys.argv[2]
opset = int(sys.argv[3]) if len(sys.argv) > 3 else 17
# --eval: torch.onnx's default, evaluation mode with constant folding (what ampc refuses).
evaluation = "--eval" in sys.argv
os.makedirs(out, exist_ok=True)
model = torch_models.make(name)
generator = torch.Generator().manual_seed(1)
batch = model.batch(generator)
torch.save(batch, os.path.join(out, name + ".batch.pt"))
for key, value in batch.items():
    # ampc holds a bool input (a padding mask) as f32 0 and 1.
    array = value.float().numpy() if value.dtype == torch.bool else value.numpy()
    array.astype(array.dtype.newbyteorder("<")).tofile(os.path.join(out, name + "." + key + ".bin"))
# Exporting in training mode runs the module once, which moves its batch norms' running
# statistics; the file gets the values the module had before, as the tests' PyTorch runs start
# from them.
buffers = {name: value.clone() for name, value in model.named_buffers()}
if evaluation:
    torch.onnx.export(model.eval(), tuple(batch.values()), os.path.join(out, name + ".onnx"),
                      input_names=list(batch.keys()), output_names=["loss"], opset_version=opset)
else:
    torch.onnx.export(model, tuple(batch.values()), os.path.join(out, name + ".onnx"),
                      input_names=list(batch.keys()), output_names=["loss"], opset_version=opset,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
if buffers and not evaluation:
    import onnx
    from onnx import numpy_helper
    path = os.path.join(out, name + ".onnx")
    exported = onnx.load(path)
    for initializer in exported.graph.initializer:
        if initializer.name in buffers:
            initializer.CopyFrom(numpy_helper.from_array(buffers[initializer.name].numpy(),
                                                         initializer.name))
    onnx.save(exported, path)
print("exported", name, "opset", opset)
