"""compare_torch.py MODEL DIR AMPC_EVAL_OUTPUT GRADS.safetensors [--tolerance T]

Compares `ampc eval --grads` of DIR/MODEL.onnx with PyTorch on the same weights and batch: the loss
(ampc's printed figure and the one in the gradient file's metadata) and every parameter's
gradient, relative to the largest gradient of that parameter. Prints one summary line; exits 1
when anything differs by more than the tolerance.
"""

import json
import os
import re
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
import torch_models  # noqa: E402


def read_safetensors(path):
    """The tensors (float32) and metadata of a safetensors file, without the safetensors package."""
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, info in header.items():
        assert info["dtype"] == "F32", info
        begin, end = info["data_offsets"]
        raw = data[8 + length + begin:8 + length + end]
        values = torch.frombuffer(bytearray(raw), dtype=torch.float32)
        tensors[name] = values.reshape(info["shape"])
    return tensors, metadata


def main():
    model_name, directory, eval_output, grads_path = sys.argv[1:5]
    tolerance = float(sys.argv[sys.argv.index("--tolerance") + 1]) if "--tolerance" in sys.argv \
        else 1e-5
    model = torch_models.make(model_name)
    batch = torch.load(os.path.join(directory, model_name + ".batch.pt"))
    loss = model(*batch.values())
    loss.backward()
    with open(eval_output) as f:
        printed = float(re.search(r"loss (\S+)", f.read()).group(1))
    grads, metadata = read_safetensors(grads_path)
    failures = []
    loss_difference = abs(float(metadata["loss"]) - loss.item()) / abs(loss.item())
    if loss_difference > tolerance or abs(printed - loss.item()) > 1e-6 * abs(loss.item()) + 5e-7:
        failures.append("loss: ampc %.8g, torch %.8g" % (float(metadata["loss"]), loss.item()))
    worst, worst_name = 0.0, ""
    names = {name for name, _ in model.named_parameters()}
    for name, parameter in model.named_parameters():
        if name not in grads:
            failures.append("no gradient for " + name)
            continue
        reference = parameter.grad
        scale = reference.abs().max().item() or 1.0
        difference = (grads[name] - reference).abs().max().item() / scale
        if difference > worst:
            worst, worst_name = difference, name
        if difference > tolerance:
            failures.append("%s: relative gradient difference %.3g" % (name, difference))
    extra = set(grads) - names
    if extra:
        failures.append("gradients of unknown parameters: " + ", ".join(sorted(extra)))
    if failures:
        print("FAIL: " + "; ".join(failures))
        sys.exit(1)
    print("ok: %s: %d parameters, loss %.6f (relative difference %.2g), largest relative gradient "
          "difference %.2g (%s), tolerance %g" % (model_name, len(grads), loss.item(),
                                                  loss_difference, worst, worst_name, tolerance))


if __name__ == "__main__":
    main()
