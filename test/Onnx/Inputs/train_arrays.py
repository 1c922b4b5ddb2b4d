"""train_arrays.py MODEL DATA.npz STEPS AMPC_WEIGHTS.safetensors AMPC_LOG.jsonl LR [--tolerance T]

Trains a model of torch_models.py from its exported initial values for STEPS steps of SGD
(momentum 0.9, no weight decay, no clipping: `ampc compile --optimizer sgd --lr LR --momentum 0.9
--weight-decay 0 --clip-norm 0`) in train() mode on DATA.npz, whose arrays hold exactly one
micro-batch, so every step sees the same rows as an ampc training executable given
`--data DATA.npz` (which visits them in a shuffled order each epoch: the same rows). Compares
with that run: the per-step losses of its metrics log (relative), and in its --export-weights
file every parameter and every buffer (running means and variances, num_batches_tracked)
(absolute). Prints one summary line; exits 1 when anything differs by more than the tolerance
(default 1e-4).
"""

import os
import sys

import numpy as np
import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import torch_models  # noqa: E402
from compare_torch import compare_losses, compare_trained  # noqa: E402


def main():
    name, data, steps, weights_path, log_path, lr = sys.argv[1:7]
    steps, lr = int(steps), float(lr)
    tolerance = float(sys.argv[sys.argv.index("--tolerance") + 1]) if "--tolerance" in sys.argv \
        else 1e-4
    torch.set_num_threads(1)
    model = torch_models.make(name).train()
    arrays = np.load(data)
    inputs = [torch.from_numpy(arrays[key]) for key in model.batch(torch.Generator()).keys()]
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses = []
    for _ in range(steps):
        loss = model(*inputs)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())

    failures = []
    loss_difference = compare_losses(log_path, losses, tolerance, failures)
    state = model.state_dict()
    _, moved, worst, worst_name = compare_trained(
        weights_path, state, dict(torch_models.make(name).state_dict()), tolerance, failures)
    if failures:
        print("FAIL: " + "; ".join(failures))
        sys.exit(1)
    print("ok: %s: %d steps, losses %.4f -> %.4f, largest relative loss difference %.2g; %d "
          "tensors (parameters and buffers) moved by up to %.2g, largest difference %.2g (%s), "
          "tolerance %g" % (name, steps, losses[0], losses[-1], loss_difference, len(state),
                            moved, worst, worst_name, tolerance))


main()
