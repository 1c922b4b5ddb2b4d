#!/usr/bin/env python3
"""make_gpt.py - writes GPT-2-style decoder model files in the graph dialect.

The model is the GPT of ../shared/bench/torch_baseline.py (paths here are from the repository
root): token embedding wte [V, d] and learned position embedding wpe [T, d], then L pre-LayerNorm
blocks
    x = x + proj(attention(ln1(x)))      (one [d, 3d] qkv matmul, split into q, k, v; causal)
    x = x + fc2(gelu_tanh(fc(ln2(x))))   (hidden width 4d)
a final LayerNorm, and an output head tied to wte (logits = h @ wte^T, no bias); the loss is the
mean cross-entropy of the logits [B, T, V] against the targets [B, T]. Weights are stored
[in, out] (x @ W). Initialisation is GPT-2's: weights and embeddings normal(0, 0.02), biases
zeros, LayerNorm gains ones and biases zeros.

The transformer block is written once, as the private function @block, and called per layer
with that layer's parameters (@h<i>.ln1.g, @h<i>.attn.qkv.w, ..., @h<i>.mlp.fc2.b).

    python3 examples/gpt/make_gpt.py --all            # rewrite every named config
    python3 examples/gpt/make_gpt.py --all --check    # fail if a committed file is stale
    python3 examples/gpt/make_gpt.py gpt10m -o out.mlir
    python3 examples/gpt/make_gpt.py --layers 4 --d-model 128 --heads 4 --vocab 512 \\
        --block-size 64 --batch 8 --name small -o small.mlir
"""

import argparse
import math
import os
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Config:
    """A GPT size. T is the block size, which is also the sequence length of every batch."""

    name: str
    layers: int  # L
    d_model: int  # d
    heads: int  # H
    vocab: int  # V
    block_size: int  # T
    batch: int  # B

    @property
    def head_dim(self):
        return self.d_model // self.heads

    def param_count(self):
        """Parameters of the model with tied head, by formula: V*d + T*d + L*(12 d^2 + 13 d) + 2d.

        Per block: ln1 2d, qkv 3d^2 + 3d, proj d^2 + d, ln2 2d, fc 4d^2 + 4d, fc2 4d^2 + d.
        """
        V, T, L, d = self.vocab, self.block_size, self.layers, self.d_model
        return V * d + T * d + L * (12 * d * d + 13 * d) + 2 * d


# The sizes of torch_baseline.py's CFG, plus a tiny model for tests.
CONFIGS = {
    c.name: c
    for c in [
        Config("tiny", layers=2, d_model=64, heads=4, vocab=256, block_size=32, batch=4),
        Config("gpt10m", layers=6, d_model=384, heads=6, vocab=8192, block_size=256, batch=64),
        Config("gpt30m", layers=8, d_model=512, heads=8, vocab=8192, block_size=512, batch=32),
        Config("gpt124m", layers=12, d_model=768, heads=12, vocab=50304, block_size=1024,
               batch=16),
    ]
}

# The configs that torch_baseline.py trains (its CFG); tiny is ours.
BASELINE_CONFIGS = ("gpt10m", "gpt30m", "gpt124m")

# What PyTorch's sum(p.numel() for p in model.parameters()) reports for gpt124m (the tied head
# is counted once); the generator refuses to write a gpt124m that disagrees.
GPT124M_TORCH_PARAMS = 124_475_904

NORMAL = "#graph.normal<std = 0.02>"
ZEROS = "#graph.zeros"
ONES = "#graph.ones"


def tensor(*shape, dtype="f32"):
    """The MLIR type of a static tensor: tensor(4, 8) -> 'tensor<4x8xf32>'."""
    return "tensor<" + "".join(f"{n}x" for n in shape) + dtype + ">"


def op(text, types, indent="    "):
    """One op line 'text : types', with the types on a continuation line past 100 columns."""
    line = f"{indent}{text} : {types}"
    if len(line) <= 100:
        return line
    return f"{indent}{text}\n{indent}    : {types}"


def block_params(c):
    """(name, shape, initializer) of one block's parameters, in @block's argument order."""
    d = c.d_model
    return [
        ("ln1.g", (d,), ONES),
        ("ln1.b", (d,), ZEROS),
        ("attn.qkv.w", (d, 3 * d), NORMAL),
        ("attn.qkv.b", (3 * d,), ZEROS),
        ("attn.proj.w", (d, d), NORMAL),
        ("attn.proj.b", (d,), ZEROS),
        ("ln2.g", (d,), ONES),
        ("ln2.b", (d,), ZEROS),
        ("mlp.fc.w", (d, 4 * d), NORMAL),
        ("mlp.fc.b", (4 * d,), ZEROS),
        ("mlp.fc2.w", (4 * d, d), NORMAL),
        ("mlp.fc2.b", (d,), ZEROS),
    ]


def model_params(c):
    """Every parameter of the model as (section comment, [(symbol, shape, initializer)])."""
    d = c.d_model
    sections = [("Embeddings: token table (also the output head) and learned positions.",
                 [("wte", (c.vocab, d), NORMAL), ("wpe", (c.block_size, d), NORMAL)])]
    for i in range(c.layers):
        sections.append((f"Layer {i}.", [(f"h{i}.{name}", shape, init)
                                          for name, shape, init in block_params(c)]))
    sections.append(("Final LayerNorm.", [("ln_f.g", (d,), ONES), ("ln_f.b", (d,), ZEROS)]))
    return sections


def checked_param_count(c):
    """The parameter count, after checking the declared shapes against the formula."""
    declared = sum(math.prod(shape) for _, params in model_params(c) for _, shape, _ in params)
    if declared != c.param_count():
        sys.exit(f"{c.name}: declared parameters sum to {declared:,}, "
                 f"the formula gives {c.param_count():,}")
    if c == CONFIGS["gpt124m"] and declared != GPT124M_TORCH_PARAMS:
        sys.exit(f"gpt124m: {declared:,} parameters, PyTorch has {GPT124M_TORCH_PARAMS:,}")
    return declared


def emit_block(c, out):
    """The transformer block: x + proj(attn(ln1(x))), then x + fc2(gelu_tanh(fc(ln2(x))))."""
    B, T, d, H, Dh = c.batch, c.block_size, c.d_model, c.heads, c.head_dim
    x = tensor(B, T, d)
    qkv = tensor(B, T, 3 * d)
    bthd = tensor(B, T, H, Dh)  # heads side by side, as the qkv matmul writes them
    bhtd = tensor(B, H, T, Dh)  # heads as a batch dimension, as attention reads them
    hidden = tensor(B, T, 4 * d)
    vec = tensor(d)

    args = [f"%{name}: {tensor(*shape)}" for name, shape, _ in block_params(c)]
    out += [
        "  // One pre-LayerNorm transformer block, called once per layer with that layer's",
        "  // parameters. Attention runs on heads [B, H, T, Dh]: q, k, v are split from one",
        "  // matmul, and each head reads its own slice of Dh features.",
        f"  func.func private @block(%x: {x},",
    ]
    for i in range(0, len(args), 2):
        end = ")" if i + 2 >= len(args) else ","
        out.append(" " * 27 + ", ".join(args[i:i + 2]) + end)
    out += [
        f"      -> {x} {{",
        "    // Attention sub-layer.",
        op("%a = graph.layernorm %x, %ln1.g, %ln1.b", f"{x}, {vec}, {vec}"),
        op("%qkv0 = graph.matmul %a, %attn.qkv.w", f"{x}, {tensor(d, 3 * d)}"),
        op("%qkv = graph.add %qkv0, %attn.qkv.b", f"{qkv}, {tensor(3 * d)}"),
        op(f"%q0, %k0, %v0 = graph.split %qkv axis 2 sizes [{d}, {d}, {d}]", qkv),
    ]
    for name in ("q", "k", "v"):
        out += [
            op(f"%{name}1 = graph.reshape %{name}0", f"{x} -> {bthd}"),
            op(f"%{name} = graph.transpose %{name}1 [0, 2, 1, 3]", bthd),
        ]
    out += [
        op("%y0 = graph.attention %q, %k, %v causal", f"{bhtd}, {bhtd}, {bhtd}"),
        "    // Heads back side by side, output projection, residual.",
        op("%y1 = graph.transpose %y0 [0, 2, 1, 3]", bhtd),
        op("%y2 = graph.reshape %y1", f"{bthd} -> {x}"),
        op("%y3 = graph.matmul %y2, %attn.proj.w", f"{x}, {tensor(d, d)}"),
        op("%y = graph.add %y3, %attn.proj.b", f"{x}, {vec}"),
        op("%x1 = graph.add %x, %y", f"{x}, {x}"),
        "",
        "    // MLP sub-layer: d -> 4d -> d with tanh-approximated GELU, residual.",
        op("%m = graph.layernorm %x1, %ln2.g, %ln2.b", f"{x}, {vec}, {vec}"),
        op("%f0 = graph.matmul %m, %mlp.fc.w", f"{x}, {tensor(d, 4 * d)}"),
        op("%f1 = graph.add %f0, %mlp.fc.b", f"{hidden}, {tensor(4 * d)}"),
        op("%f = graph.gelu tanh %f1", hidden),
        op("%g0 = graph.matmul %f, %mlp.fc2.w", f"{hidden}, {tensor(4 * d, d)}"),
        op("%g = graph.add %g0, %mlp.fc2.b", f"{x}, {vec}"),
        op("%x2 = graph.add %x1, %g", f"{x}, {x}"),
        f"    return %x2 : {x}",
        "  }",
    ]


def emit_forward(c, out):
    """The entry function: embeddings, the blocks, final LayerNorm, tied head, loss."""
    B, T, d, V, L = c.batch, c.block_size, c.d_model, c.vocab, c.layers
    x = tensor(B, T, d)
    ids = tensor(B, T, dtype="i32")
    out += [
        "  func.func @forward() {",
        op("%tokens = graph.get_input @tokens", ids),
        op("%targets = graph.get_input @targets", ids),
        "",
        "    // Token plus position embedding; wpe [T, d] broadcasts over the batch.",
        op("%wte = graph.get_param @wte", tensor(V, d)),
        op("%wpe = graph.get_param @wpe", tensor(T, d)),
        op("%tok = graph.embedding %wte[%tokens]", f"{tensor(V, d)}, {ids}"),
        op("%x0 = graph.add %tok, %wpe", f"{x}, {tensor(T, d)}"),
    ]
    params = block_params(c)
    # The call's operands and their types, four to a line.
    types = [tensor(*shape) for _, shape, _ in params]
    for i in range(L):
        values = [f"%h{i}.{name}" for name, _, _ in params]
        out += ["", f"    // Layer {i}."]
        for (name, shape, _), value in zip(params, values):
            out.append(op(f"{value} = graph.get_param @h{i}.{name}", tensor(*shape)))
        out.append(f"    %x{i + 1} = func.call @block(%x{i},")
        for j in range(0, len(values), 4):
            end = ")" if j + 4 >= len(values) else ","
            out.append("        " + ", ".join(values[j:j + 4]) + end)
        out.append(f"        : ({x},")
        for j in range(0, len(types), 4):
            end = ")" if j + 4 >= len(types) else ","
            out.append("           " + ", ".join(types[j:j + 4]) + end)
        out.append(f"        -> {x}")
    out += [
        "",
        "    // Final LayerNorm; the output head is wte itself: logits = h @ wte^T.",
        op("%ln_f.g = graph.get_param @ln_f.g", tensor(d)),
        op("%ln_f.b = graph.get_param @ln_f.b", tensor(d)),
        op(f"%h = graph.layernorm %x{L}, %ln_f.g, %ln_f.b", f"{x}, {tensor(d)}, {tensor(d)}"),
        op("%logits = graph.matmul %h, %wte transpose_rhs", f"{x}, {tensor(V, d)}"),
        op("%loss = graph.cross_entropy %logits, %targets", f"{tensor(B, T, V)}, {ids}"),
        "    graph.loss %loss : tensor<f32>",
        "    return",
        "  }",
    ]


def regenerate_args(c):
    """The make_gpt.py arguments that write config c again."""
    if CONFIGS.get(c.name) == c:
        return c.name
    return (f"--layers {c.layers} --d-model {c.d_model} --heads {c.heads} --vocab {c.vocab} "
            f"--block-size {c.block_size} --batch {c.batch} --name {c.name}")


def generate(c):
    """The model file for config c, as text."""
    if c.d_model % c.heads:
        sys.exit(f"{c.name}: d_model {c.d_model} is not a multiple of heads {c.heads}")
    n = checked_param_count(c)
    if c.name in BASELINE_CONFIGS and c == CONFIGS[c.name]:
        origin = f"Same shapes and initialisation as {c.name} in ../shared/bench/torch_baseline.py."
    else:
        origin = "The GPT of ../shared/bench/torch_baseline.py, at a size of its own."
    out = [
        f"// {c.name}.mlir - a GPT-2-style decoder, written by make_gpt.py; do not edit by hand.",
        "//",
        f"// L = {c.layers} layers, d = {c.d_model}, H = {c.heads} heads of Dh = {c.head_dim}, "
        f"V = {c.vocab}, T = {c.block_size}, B = {c.batch}.",
        f"// {n:,} parameters (V*d + T*d + L*(12 d^2 + 13 d) + 2d; the output head is wte).",
        f"// {origin}",
        f"// Regenerate: python3 examples/gpt/make_gpt.py {regenerate_args(c)}",
        "",
        f"graph.model @{c.name} {{",
    ]
    for comment, params in model_params(c):
        out.append(f"  // {comment}")
        for name, shape, init in params:
            out.append(f"  graph.param @{name} : {tensor(*shape)} init {init}")
    ids = tensor(c.batch, c.block_size, dtype="i32")
    out += [
        "",
        "  // A batch of token ids and, for each position, the id of the token that follows.",
        f"  graph.input @tokens : {ids}",
        f"  graph.input @targets : {ids}",
        "",
    ]
    emit_block(c, out)
    out.append("")
    emit_forward(c, out)
    out.append("}")
    return "\n".join(out) + "\n"


def write(c, path, check):
    """Writes (or with check, compares against) the model file; returns False if stale."""
    text = generate(c)
    if check:
        try:
            with open(path) as f:
                same = f.read() == text
        except FileNotFoundError:
            same = False
        status = "up to date" if same else "STALE: rerun without --check"
        print(f"{os.path.relpath(path)}: {status} ({c.param_count():,} parameters)")
        return same
    with open(path, "w", newline="\n") as f:
        f.write(text)
    print(f"{os.path.relpath(path)}: {c.param_count():,} parameters")
    return True


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config", nargs="?", help="one of: " + ", ".join(CONFIGS))
    ap.add_argument("--all", action="store_true", help="write every config next to this script")
    ap.add_argument("--check", action="store_true",
                    help="compare with the files on disk instead of writing; exit 1 if stale")
    ap.add_argument("-o", "--output", help="output file (default: <name>.mlir next to this script)")
    custom = ap.add_argument_group("a custom config (instead of a named one)")
    custom.add_argument("--name", default="gpt")
    for flag in ("layers", "d-model", "heads", "vocab", "block-size", "batch"):
        custom.add_argument(f"--{flag}", type=int)
    a = ap.parse_args()

    fields = ("layers", "d_model", "heads", "vocab", "block_size", "batch")
    sizes = {k: getattr(a, k) for k in fields}
    if a.all:
        if a.config or a.output or any(v is not None for v in sizes.values()):
            ap.error("--all takes no config, sizes or output")
        jobs = [(c, os.path.join(here, c.name + ".mlir")) for c in CONFIGS.values()]
    elif a.config:
        if a.config not in CONFIGS:
            ap.error(f"unknown config {a.config!r}; known: {', '.join(CONFIGS)}")
        c = CONFIGS[a.config]
        jobs = [(c, a.output or os.path.join(here, c.name + ".mlir"))]
    else:
        missing = [k for k, v in sizes.items() if v is None]
        if missing:
            ap.error("give a config name, --all, or every size (missing: "
                     + ", ".join("--" + k.replace("_", "-") for k in missing) + ")")
        if any(v <= 0 for v in sizes.values()):
            ap.error("every size must be positive")
        c = Config(a.name, **sizes)
        jobs = [(c, a.output or c.name + ".mlir")]

    ok = all([write(c, path, a.check) for c, path in jobs])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
