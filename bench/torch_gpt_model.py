"""torch_gpt_model.py - the PyTorch version of ampc's example GPTs (bench/torch_gpt.py runs it).

The models are those of examples/gpt/make_gpt.py (its CONFIGS are imported, so the shapes are the
same by construction): token and position embeddings, L pre-LayerNorm blocks (one [d, 3d] qkv
matmul with bias, causal attention, output projection; an MLP d -> 4d -> d with tanh GELU), a
final LayerNorm and an output head tied to the token embedding; the loss is the mean
cross-entropy, computed in fp32 as ampc does. LayerNorm epsilon 1e-5 (graph.layernorm's default),
no dropout. Initialisation is GPT-2's, as make_gpt.py documents, ampc's exact values for a seed
(ampc_random.py), or a safetensors file of ampc-named weights; export_weights writes one.
"""

import importlib.util
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import safetensors_io
from ampc_random import AmpcRandom

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def load_make_gpt():
    """examples/gpt/make_gpt.py as a module: the configs and the parameter list."""
    path = os.path.join(REPO, "examples", "gpt", "make_gpt.py")
    spec = importlib.util.spec_from_file_location("make_gpt", path)
    if spec is None or not os.path.exists(path):
        sys.exit(f"torch_gpt.py: cannot find {path}; run this script from an ampc checkout")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_gpt = load_make_gpt()
CONFIGS = make_gpt.CONFIGS

LN_EPS = 1e-5  # graph.layernorm's default epsilon (dialects/Graph/GraphOps.td)
INIT_STD = 0.02


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------


class Block(nn.Module):
    """x + proj(attention(ln1(x))), then x + fc2(gelu_tanh(fc(ln2(x))))."""

    def __init__(self, c, flash):
        super().__init__()
        d = c.d_model
        self.heads, self.flash = c.heads, flash
        self.ln1 = nn.LayerNorm(d, eps=LN_EPS)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d, eps=LN_EPS)
        self.fc = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        if not flash:
            mask = torch.ones(c.block_size, c.block_size, dtype=torch.bool).triu(1)
            self.register_buffer("future", mask, persistent=False)

    def attention(self, x):
        B, T, C = x.shape
        H = self.heads
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
            scores = scores.masked_fill(self.future[:T, :T], float("-inf"))
            y = F.softmax(scores, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, c, flash=False, ckpt=False):
        super().__init__()
        self.config, self.ckpt = c, ckpt
        self.wte = nn.Embedding(c.vocab, c.d_model)
        self.wpe = nn.Embedding(c.block_size, c.d_model)
        self.blocks = nn.ModuleList([Block(c, flash) for _ in range(c.layers)])
        self.ln_f = nn.LayerNorm(c.d_model, eps=LN_EPS)

    def forward(self, tokens, targets):
        T = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(T, device=tokens.device))
        for block in self.blocks:
            if self.ckpt and self.training:
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # the head is wte itself
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))

    def ampc_parameters(self):
        """{ampc parameter name: (torch parameter, stored transposed)}; ampc keeps matmul
        weights [in, out], torch.nn.Linear [out, in]."""
        table = {"wte": (self.wte.weight, False), "wpe": (self.wpe.weight, False),
                 "ln_f.g": (self.ln_f.weight, False), "ln_f.b": (self.ln_f.bias, False)}
        names = {"ln1.g": "ln1.weight", "ln1.b": "ln1.bias", "attn.qkv.w": "qkv.weight",
                 "attn.qkv.b": "qkv.bias", "attn.proj.w": "proj.weight",
                 "attn.proj.b": "proj.bias", "ln2.g": "ln2.weight", "ln2.b": "ln2.bias",
                 "mlp.fc.w": "fc.weight", "mlp.fc.b": "fc.bias", "mlp.fc2.w": "fc2.weight",
                 "mlp.fc2.b": "fc2.bias"}
        for i, block in enumerate(self.blocks):
            mine = dict(block.named_parameters())
            for ampc_name, torch_name in names.items():
                table[f"h{i}.{ampc_name}"] = (mine[torch_name], ampc_name.endswith(".w"))
        return table


def init_gpt2(model, seed):
    """GPT-2's initialisation, from torch's generator seeded with seed."""
    torch.manual_seed(seed)
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, INIT_STD)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)
        if isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def init_ampc(model, seed):
    """The values ampc's initializeParameters gives for the seed (see AmpcRandom)."""
    table = model.ampc_parameters()
    with torch.no_grad():
        for _, params in make_gpt.model_params(model.config):
            for name, shape, init in params:
                p, transposed = table[name]
                if init == make_gpt.ONES:
                    values = torch.ones(shape)
                elif init == make_gpt.ZEROS:
                    values = torch.zeros(shape)
                elif init == make_gpt.NORMAL:
                    values = AmpcRandom.normal(seed, name, math.prod(shape), INIT_STD)
                    values = values.float().view(shape)
                else:
                    sys.exit(f"torch_gpt.py: unknown initialiser {init} for {name}")
                p.copy_(values.t() if transposed else values)


SAFETENSORS_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
                      "F64": torch.float64}


def read_safetensors(path):
    """{name: float32 tensor} of a safetensors file (safetensors_io.py)."""
    out = {}
    for name, (dtype, shape, raw) in safetensors_io.read(path)[1].items():
        t = torch.frombuffer(bytearray(raw), dtype=SAFETENSORS_DTYPES[dtype]) if raw else \
            torch.empty(0, dtype=SAFETENSORS_DTYPES[dtype])
        out[name] = t.reshape(shape).float()
    return out


def write_safetensors(path, tensors, metadata=None):
    """Writes {name: tensor} as F32 safetensors."""
    safetensors_io.write(path, {name: ("F32", list(t.shape),
                                       t.detach().cpu().float().contiguous().numpy().tobytes())
                                for name, t in tensors.items()}, metadata)


def init_file(model, path):
    """Loads ampc-named weights (an ampc --export-weights file)."""
    table, values = model.ampc_parameters(), read_safetensors(path)
    if set(values) != set(table):
        sys.exit(f"torch_gpt.py: {path} holds {sorted(set(values) ^ set(table))[:5]} "
                 f"that are not both in the file and the model")
    with torch.no_grad():
        for name, (p, transposed) in table.items():
            v = values[name]
            p.copy_(v.t() if transposed else v)


def export_weights(model, path):
    """The model's weights with ampc's names and layouts."""
    write_safetensors(path, {name: (p.t() if transposed else p)
                             for name, (p, transposed) in model.ampc_parameters().items()},
                      {"written_by": "torch_gpt.py"})


def param_count(model):
    """All parameters, the tied embedding once (parameters() yields each tensor once)."""
    return sum(p.numel() for p in model.parameters())

