"""train_torch.py MODEL DATA.bin SEED STEPS AMPC_WEIGHTS.safetensors AMPC_LOG.jsonl [--tolerance T]

Trains a model of torch_models.py from its exported initial values for STEPS optimizer steps on
the batches an ampc training executable draws from DATA.bin with --seed SEED (the sampler of
runtime/train/Data.cpp, as bench/torch_gpt.py implements it), with ampc's default optimizer:
AdamW, lr 3e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on parameters of rank >= 2 only,
global gradient norm clipped to 1, constant rate. Then compares with the training executable's
run: the per-step losses of its metrics log (relative) and its --export-weights file (absolute,
per parameter). Prints one summary line; exits 1 when anything differs by more than the
tolerance (default 1e-4).
"""

import os
import sys
import types

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "..", "..", "bench"))
import torch_gpt  # noqa: E402
import torch_models  # noqa: E402
from compare_torch import compare_losses, compare_trained  # noqa: E402


def main():
    name, data, seed, steps, weights_path, log_path = sys.argv[1:7]
    seed, steps = int(seed), int(steps)
    tolerance = float(sys.argv[sys.argv.index("--tolerance") + 1]) if "--tolerance" in sys.argv \
        else 1e-4
    torch.set_num_threads(1)
    model = torch_models.make(name)
    example = model.batch(torch.Generator().manual_seed(1))
    batch, block = example["tokens"].shape
    config = types.SimpleNamespace(vocab=model.head.weight.shape[0], batch=batch,
                                   block_size=block)
    batches = torch_gpt.Batches(config, "file", "ampc", seed, data)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    losses = []
    for step in range(steps):
        tokens, targets = batches.get(step)
        loss = model(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(model.parameters()), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())

    failures = []
    loss_difference = compare_losses(log_path, losses, tolerance, failures)
    count, moved, worst, worst_name = compare_trained(
        weights_path, dict(model.named_parameters()),
        dict(torch_models.make(name).named_parameters()), tolerance, failures)
    if failures:
        print("FAIL: " + "; ".join(failures))
        sys.exit(1)
    print("ok: %s: %d steps, losses %.4f -> %.4f, largest relative loss difference %.2g; "
          "%d parameters moved by up to %.2g, largest difference %.2g (%s), tolerance %g"
          % (name, steps, losses[0], losses[-1], loss_difference, count, moved, worst,
             worst_name, tolerance))


main()
