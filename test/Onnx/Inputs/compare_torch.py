"""compare_torch.py MODEL DIR AMPC_EVAL_OUTPUT GRADS.safetensors [--tolerance T] [--double]

Compares `ampc eval --grads` of DIR/MODEL.onnx with PyTorch on the same weights and batch: the loss
(ampc's printed figure and the one in the gradient file's metadata, within min(T, 1e-5)) and every
parameter's gradient, relative to the largest gradient of that parameter, or to 1e-4 of the
model's largest gradient when the parameter's is smaller (a bias just before a batch norm, whose
exact gradient is 0 and whose computed one is rounding noise). Prints one summary line; exits 1
when anything differs by more than the tolerance.

--double runs PyTorch in float64: the oracle for deep networks with batch norms, where PyTorch's
own float32 gradients are off by 1e-3 (its convolutions and batch-norm backward in float32).
"""

import json
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "bench"))
import safetensors_io  # noqa: E402
import torch_models  # noqa: E402


def read_safetensors(path):
    """The tensors (float32) and metadata of a safetensors file (bench/safetensors_io.py)."""
    metadata, raw = safetensors_io.read(path)
    tensors = {}
    for name, (dtype, shape, data) in raw.items():
        assert dtype == "F32", (name, dtype)
        tensors[name] = torch.frombuffer(bytearray(data), dtype=torch.float32).reshape(shape)
    return tensors, metadata


def compare_losses(log_path, losses, tolerance, failures):
    """The largest relative difference between PyTorch's per-step losses and those of ampc's
    metrics log; appends to failures when the counts or values differ."""
    with open(log_path) as f:
        ampc_losses = [json.loads(line)["loss"] for line in f if '"loss"' in line]
    if len(ampc_losses) != len(losses):
        failures.append("ampc logged %d losses for %d steps" % (len(ampc_losses), len(losses)))
    differences = [abs(a - t) / abs(t) for a, t in zip(ampc_losses, losses)]
    # A NaN loss is the largest difference (max() would drop one after the first).
    difference = float("nan") if any(d != d for d in differences) else max(differences)
    if not difference <= tolerance:  # NaN fails
        failures.append("relative loss difference %.3g" % difference)
    return difference


def compare_trained(weights_path, final, initial, tolerance, failures):
    """Compares ampc's --export-weights file with PyTorch's final tensors (name -> tensor),
    absolutely; appends to failures. Returns (tensors in the file, how far the tensors moved
    from initial, the largest difference, its tensor)."""
    trained, _ = read_safetensors(weights_path)
    worst, worst_name, moved = 0.0, "", 0.0
    for name, value in final.items():
        if name not in trained:
            failures.append("no trained value for " + name)
            continue
        value = value.detach().double()
        difference = (trained[name].double() - value).abs().max().item()
        moved = max(moved, (value - initial[name].detach().double()).abs().max().item())
        if not difference <= worst:  # NaN is the worst
            worst, worst_name = difference, name
    if not worst <= tolerance:
        failures.append("%s differs by %.3g" % (worst_name, worst))
    return len(trained), moved, worst, worst_name


def main():
    model_name, directory, eval_output, grads_path = sys.argv[1:5]
    tolerance = float(sys.argv[sys.argv.index("--tolerance") + 1]) if "--tolerance" in sys.argv \
        else 1e-5
    model = torch_models.make(model_name)
    batch = torch.load(os.path.join(directory, model_name + ".batch.pt"))
    if "--double" in sys.argv:
        model = model.double()
        batch = {k: v.double() if v.is_floating_point() else v for k, v in batch.items()}
    loss = model(*batch.values())
    loss.backward()
    with open(eval_output) as f:
        printed = float(re.search(r"loss (\S+)", f.read()).group(1))
    grads, metadata = read_safetensors(grads_path)
    failures = []
    loss_difference = abs(float(metadata["loss"]) - loss.item()) / abs(loss.item())
    # Written so that a NaN anywhere fails.
    if not loss_difference <= min(tolerance, 1e-5) or \
            not abs(printed - loss.item()) <= 1e-6 * abs(loss.item()) + 5e-7:
        failures.append("loss: ampc %.8g, torch %.8g" % (float(metadata["loss"]), loss.item()))
    worst, worst_name = 0.0, ""
    largest = max(p.grad.abs().max().item() for p in model.parameters() if p.grad is not None)
    names = {name for name, _ in model.named_parameters()}
    for name, parameter in model.named_parameters():
        if name not in grads:
            failures.append("no gradient for " + name)
            continue
        reference = parameter.grad
        scale = max(reference.abs().max().item(), 1e-4 * largest) or 1.0
        difference = (grads[name].to(reference.dtype) - reference).abs().max().item() / scale
        if not difference <= worst:
            worst, worst_name = difference, name
        if not difference <= tolerance:
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
