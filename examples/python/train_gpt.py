"""train_gpt.py [--steps N] [--data FILE.bin] [--precision bf16|fp16|fp32] [--device auto|cpu|cuda]

The training loop a nanoGPT user writes, with ampc in place of autocast, GradScaler and the
optimizer: a small GPT defined in PyTorch, compiled once with ampc.compile (its forward returns
the loss), trained step by step from this loop on windows of a uint16 token file (nanoGPT's
.bin; a Markov chain to learn without one), then loaded back into the module, which evaluates itself in
PyTorch. Run from the repository root after `make`:

    PYTHONPATH=build/python python3 examples/python/train_gpt.py --steps 200
"""

import argparse
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import ampc


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
        attention = scores.masked_fill(mask, float("-inf")).softmax(-1) @ v
        x = x + self.proj(attention.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab=256, d=64, heads=4, layers=2, context=32):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, tokens, targets):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1]))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--data")
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--accum", type=int, default=2)
    a = ap.parse_args()
    torch.manual_seed(0)
    context, vocab = 32, 256
    if a.data:
        tokens = np.fromfile(a.data, dtype=np.uint16)
    else:  # a Markov chain to learn: the next token is (7 t + 3) mod 256 nine times in ten
        noise = np.random.default_rng(0)
        tokens = np.zeros(100_000, dtype=np.uint16)
        for i in range(1, len(tokens)):
            tokens[i] = (7 * int(tokens[i - 1]) + 3) % vocab if noise.random() < 0.9 \
                else noise.integers(vocab)
    rng = np.random.default_rng(1)

    def get_batch(rows):
        starts = rng.integers(0, len(tokens) - context - 1, rows)
        x = np.stack([tokens[s:s + context] for s in starts]).astype(np.int64)
        y = np.stack([tokens[s + 1:s + 1 + context] for s in starts]).astype(np.int64)
        return torch.from_numpy(x), torch.from_numpy(y)

    model = Gpt(vocab=vocab, context=context)
    # One micro-batch as the example; each step then takes accum x batch rows.
    trainer = ampc.compile(model, get_batch(a.batch), precision=a.precision,
                           accum_steps=a.accum, lr=1e-3, total_steps=a.steps, device=a.device)
    print("training on %s%s" % (trainer.device, " (%s)" % trainer.note if trainer.note else ""))
    for step in range(1, a.steps + 1):
        result = trainer.step(*get_batch(a.batch * a.accum))
        if step == 1 or step % 50 == 0 or step == a.steps:
            print("step %d | loss %.4f | grad norm %.3f%s" % (
                step, result.loss, result.grad_norm,
                " | loss scale %g" % result.loss_scale if result.loss_scale else ""))
    model.load_state_dict(trainer.state_dict())
    with torch.no_grad():
        print("PyTorch evaluates the trained module: loss %.4f" % model(*get_batch(64)).item())


if __name__ == "__main__":
    main()
