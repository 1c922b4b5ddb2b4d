"""torch_gpt_data.py - the batches of bench/torch_gpt.py's runs, as torch's or ampc's sampler draws.

A nanoGPT .bin file of uint16 tokens (each batch row a window of T+1 tokens: tokens and
next-token targets), uniformly random tokens, or ampc's built-in synthetic language. With the
ampc sampler, the batches are exactly those an ampc training executable draws for the same seed
(runtime/train/Data.cpp and Runner.cpp, through ampc_random.py).
"""

import os
import sys

import torch

from ampc_random import AmpcRandom


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------


def load_tokens(path, vocab):
    """A nanoGPT .bin file (little-endian uint16) as a CPU int64 tensor, checked against V."""
    try:
        size = os.path.getsize(path)
    except OSError as e:
        sys.exit(f"torch_gpt.py: cannot read data file {path}: {e.strerror}")
    if size % 2:
        sys.exit(f"torch_gpt.py: data file {path} has an odd number of bytes ({size}), "
                 "so it is not a file of uint16 tokens")
    with open(path, "rb") as f:
        raw = bytearray(f.read())
    if sys.byteorder != "little":
        raw[0::2], raw[1::2] = raw[1::2], raw[0::2]
    data = torch.frombuffer(raw, dtype=torch.int16).to(torch.int64) & 0xFFFF
    if len(data) == 0:
        sys.exit(f"torch_gpt.py: data file {path} is empty")
    top = int(data.max())
    if top >= vocab:
        where = int((data >= vocab).nonzero()[0])
        sys.exit(f"torch_gpt.py: data file {path}: token {int(data[where])} at position "
                 f"{where} is outside the model's vocabulary (V = {vocab})")
    return data


class Batches:
    """The micro-batches of a run: (tokens, targets), each [B, T] int64 on the CPU."""

    def __init__(self, c, source, sampler, seed, path=None):
        self.c, self.source, self.sampler, self.seed = c, source, sampler, seed
        self.generator = torch.Generator().manual_seed(seed)
        self.data = None
        if source == "file":
            self.data = load_tokens(path, c.vocab)
            if len(self.data) < c.block_size + 1:
                sys.exit(f"torch_gpt.py: data file {path} has {len(self.data)} tokens; one "
                         f"batch row needs T+1 = {c.block_size + 1}")
        if source == "synthetic":
            if sampler != "ampc":
                sys.exit("torch_gpt.py: --data synthetic is ampc's task; it needs --sampler ampc")
            self.permutation = self._synthetic_permutation()

    def describe(self):
        return {"file": "token file", "random": "random tokens",
                "synthetic": "ampc's synthetic language"}[self.source]

    def get(self, micro_step):
        c = self.c
        B, T = c.batch, c.block_size
        if self.source == "random" and self.sampler == "ampc":
            # randomizeInputs(inputSeed(seed, micro_step)) of runtime/train/Runner.cpp.
            seed = self.seed ^ ((micro_step * 0x9E3779B97F4A7C15) & ((1 << 64) - 1))
            tokens, targets = AmpcRandom.random_inputs(seed, ["tokens", "targets"], B * T,
                                                       c.vocab)
            return tokens.view(B, T), targets.view(B, T)
        if self.source == "random":
            w = torch.randint(0, c.vocab, (B, T + 1), generator=self.generator)
        elif self.source == "synthetic":
            w = self._synthetic_windows(micro_step)
        else:
            if self.sampler == "ampc":
                # randomBits(seed, micro_step, WINDOW, row) mod (N - T), all rows at once.
                rows = torch.arange(B, dtype=torch.int64)
                w0, w1, _, _ = AmpcRandom.block(self.seed, micro_step, self.WINDOW, rows)
                starts = AmpcRandom.mod64(w1, w0, len(self.data) - T)
            else:
                starts = torch.randint(0, len(self.data) - T, (B,), generator=self.generator)
            w = self.data[starts[:, None] + torch.arange(T + 1)]
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()

    # The streams of runtime/train/Data.cpp.
    WINDOW = AmpcRandom.fnv1a32("ampc.train.window")
    SYNTHETIC = AmpcRandom.fnv1a32("ampc.train.synthetic")
    PERMUTATION = AmpcRandom.fnv1a32("ampc.train.permutation")
    NOISE_THRESHOLD = int(0.1 * (1 << 24))

    def _synthetic_permutation(self):
        V = self.c.vocab
        i = torch.arange(V, dtype=torch.int64)
        w0, w1, _, _ = AmpcRandom.block(self.seed, 0, self.PERMUTATION, i)
        draws = AmpcRandom.mod64(w1, w0, i + 1).tolist()
        perm = list(range(V))
        for k in range(V - 1, 0, -1):  # Fisher-Yates
            j = draws[k]
            perm[k], perm[j] = perm[j], perm[k]
        return torch.tensor(perm, dtype=torch.int64)

    def _synthetic_windows(self, micro_step):
        B, L = self.c.batch, self.c.block_size + 1
        e = torch.arange(B * L, dtype=torch.int64)
        w0, _, w2, w3 = AmpcRandom.block(self.seed, micro_step, self.SYNTHETIC, e)
        uniform = AmpcRandom.mod64(w3, w2, self.c.vocab).view(B, L)
        noise = ((w0 >> 8) < self.NOISE_THRESHOLD).view(B, L)
        out = torch.empty(B, L, dtype=torch.int64)
        out[:, 0] = uniform[:, 0]
        for i in range(1, L):
            out[:, i] = torch.where(noise[:, i], uniform[:, i], self.permutation[out[:, i - 1]])
        return out

