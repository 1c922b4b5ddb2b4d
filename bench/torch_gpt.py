#!/usr/bin/env python3
"""torch_gpt.py - the PyTorch reference of ampc's example GPTs, for side-by-side benchmarks.

The models are those of examples/gpt/make_gpt.py (its CONFIGS are imported, so the shapes are the
same by construction): token and position embeddings, L pre-LayerNorm blocks (one [d, 3d] qkv
matmul with bias, causal attention, output projection; an MLP d -> 4d -> d with tanh GELU), a
final LayerNorm and an output head tied to the token embedding; the loss is the mean
cross-entropy, computed in fp32 as ampc does. LayerNorm epsilon 1e-5 (graph.layernorm's default),
no dropout. Initialisation is GPT-2's, as make_gpt.py documents: weights and embeddings
normal(0, 0.02), biases zero, LayerNorm gains one and biases zero.

The optimizer is ampc's default: AdamW with lr 3e-4, betas (0.9, 0.95), eps 1e-8, decoupled weight
decay 0.1 on parameters of rank >= 2 only, global gradient-norm clipping at 1.0, and ampc's
learning-rate schedule (linear warmup, then constant or cosine decay to --min-lr).

Variants:
    fp32             eager fp32, TF32 off
    bf16             autocast bf16, attention written out (matmul, mask, softmax, matmul)
    fp16             autocast fp16 with a GradScaler (dynamic loss scaling)
    bf16-flash       autocast bf16, scaled_dot_product_attention forced onto the flash backend
    bf16-flash-ckpt  bf16-flash plus activation checkpointing of every block
    bf16-compile     torch.compile of the bf16-flash model

Modes:
    time   (default) --warmup steps, then --steps timed steps, each between two CUDA events;
           one JSON object with the median and mean step time, tokens/s, TFLOP/s, MFU and memory
    curve  --steps training steps from the seed, one JSON line per step in --log FILE with the
           keys of an ampc training executable's --log (step from 1, loss, grad_norm, lr, ...)
    eval   the loss of the first batch at initialisation, no training

Data: --data FILE (a nanoGPT .bin file of uint16 tokens; each batch row is a random window of T+1
tokens: tokens and next-token targets), --data random (default: uniformly random tokens) or
--data synthetic (ampc's built-in synthetic language). --sampler torch (default) draws windows
and random tokens from a seeded torch.Generator; --sampler ampc draws exactly the batches an ampc
training executable (or `ampc eval`) draws for the same --seed, and --init ampc initialises the
parameters to exactly ampc's values for the seed (ampc's Philox4x32-10 streams,
docs/plan-format.md), so that fp32 runs can be compared with ampc's step by step. --init FILE
loads a safetensors file of ampc-named weights (an ampc executable's --export-weights) and
--export-weights FILE writes one (ampc's --init-from reads it): weights travel both ways.

    python3 bench/torch_gpt.py --model gpt10m --variant bf16-flash
    python3 bench/torch_gpt.py --model gpt124m --variant all --json results.jsonl
    python3 bench/torch_gpt.py --model gpt10m --variant bf16 --mode curve --steps 1000 \\
        --data data/kjv_train.bin --val-data data/kjv_val.bin --eval-every 100 --log curve.jsonl
    python3 bench/torch_gpt.py --model tiny --variant fp32 --device cpu --mode eval \\
        --init ampc --sampler ampc --seed 0          # the loss `ampc eval --seed 0` prints
    python3 bench/torch_gpt.py --check-params

Works with PyTorch 1.13 (CPU: fp32 and bf16 only) through 2.x.
"""

import argparse
import contextlib
import gc
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from torch_gpt_data import Batches  # noqa: E402
from torch_gpt_model import (  # noqa: E402
    CONFIGS, GPT, export_weights, init_ampc, init_file, init_gpt2, make_gpt, param_count)

PEAK_TFLOPS = 989.4  # H100 SXM, dense bf16


class Variant:
    def __init__(self, dtype, flash=False, ckpt=False, compile=False, cuda_only=False):
        self.dtype, self.flash, self.ckpt, self.compile = dtype, flash, ckpt, compile
        self.cuda_only = cuda_only


VARIANTS = {
    "fp32": Variant(None),
    "bf16": Variant(torch.bfloat16),
    "fp16": Variant(torch.float16, cuda_only=True),
    "bf16-flash": Variant(torch.bfloat16, flash=True, cuda_only=True),
    "bf16-flash-ckpt": Variant(torch.bfloat16, flash=True, ckpt=True, cuda_only=True),
    "bf16-compile": Variant(torch.bfloat16, flash=True, compile=True, cuda_only=True),
}


def torch_version():
    parts = []
    for p in torch.__version__.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


# ---------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------


def learning_rate(a, step, total):
    """ampc's schedule (runtime/cpu/OptimizerKernels.cpp) for 0-based optimizer step `step`."""
    if step < a.warmup_steps:
        return a.lr * (step + 1) / a.warmup_steps
    if a.schedule == "constant":
        return a.lr
    decay = a.decay_steps if a.decay_steps > 0 else total
    progress = min(max((step - a.warmup_steps) / max(1.0, decay - a.warmup_steps), 0.0), 1.0)
    min_lr = a.lr / 10 if a.min_lr is None else a.min_lr
    return min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (a.lr - min_lr)


def make_optimizer(model, a, device):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": a.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    kwargs = dict(lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps)
    if device.type == "cuda" and torch_version() >= (2, 0):
        kwargs["fused"] = True
    return torch.optim.AdamW(groups, **kwargs)


def make_scaler():
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler("cuda")
    return torch.cuda.amp.GradScaler()


def flash_only():
    """A context that restricts scaled_dot_product_attention to the flash backend."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel(SDPBackend.FLASH_ATTENTION)
    except ImportError:
        return torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False,
                                              enable_mem_efficient=False)


class Run:
    """One model and optimizer for one variant; step() is one optimizer step."""

    def __init__(self, c, variant_name, a, device):
        v = VARIANTS[variant_name]
        if v.cuda_only and device.type != "cuda":
            raise RuntimeError(f"variant {variant_name} needs a CUDA device")
        if v.flash and not hasattr(F, "scaled_dot_product_attention"):
            raise RuntimeError(f"variant {variant_name} needs scaled_dot_product_attention "
                               f"(PyTorch >= 2.0; this is {torch.__version__})")
        if v.compile and not hasattr(torch, "compile"):
            raise RuntimeError(f"variant {variant_name} needs torch.compile (PyTorch >= 2.0)")
        self.c, self.v, self.a, self.device = c, v, a, device
        model = GPT(c, flash=v.flash, ckpt=v.ckpt)
        if a.init == "ampc":
            init_ampc(model, a.seed)
        elif a.init == "gpt2":
            init_gpt2(model, a.seed)
        else:
            init_file(model, a.init)
        self.model = model.to(device)
        self.params = list(self.model.parameters())
        self.n_params = param_count(self.model)
        self.opt = make_optimizer(self.model, a, device)
        self.forward = torch.compile(self.model) if v.compile else self.model
        self.scaler = make_scaler() if v.dtype == torch.float16 else None
        self.clip = a.clip_norm if a.clip_norm > 0 else float("inf")

    def context(self):
        stack = contextlib.ExitStack()
        if self.v.flash:
            stack.enter_context(flash_only())
        return stack

    def autocast(self):
        if self.v.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.v.dtype)

    def step(self, tokens, targets, lr):
        """One step; returns (loss, grad norm before clipping, loss scale or None), tensors."""
        for group in self.opt.param_groups:
            group["lr"] = lr
        with self.context():
            with self.autocast():
                loss = self.forward(tokens, targets)
            if self.scaler is not None:
                self.scaler.scale(loss).backward()
                self.scaler.unscale_(self.opt)
            else:
                loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        if self.scaler is not None:
            self.scaler.step(self.opt)
            self.scaler.update()
        else:
            self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss.detach(), norm

    def loss(self, tokens, targets):
        self.model.eval()
        with torch.no_grad(), self.context(), self.autocast():
            loss = self.forward(tokens, targets)
        self.model.train()
        return float(loss)

    def close(self):
        del self.forward, self.model, self.opt, self.params, self.scaler
        if self.v.compile:
            torch._dynamo.reset()
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def to_device(batch, device):
    if device.type != "cuda":
        return batch
    return tuple(t.pin_memory().to(device, non_blocking=True) for t in batch)


def number(x):
    """A JSON number as ampc's training executable writes it (%.9g; null if not finite)."""
    x = float(x)
    return "%.9g" % x if math.isfinite(x) else "null"


def summary(run, variant, a, c, device, step_ms, final_loss, warmup, steps):
    tokens_per_step = c.batch * c.block_size
    flops_per_step = (6 * run.n_params * tokens_per_step
                      + 12 * c.layers * c.block_size * c.d_model * tokens_per_step)
    median = statistics.median(step_ms) if step_ms else float("nan")
    mean = statistics.fmean(step_ms) if step_ms else float("nan")
    tflops = flops_per_step / (median * 1e-3) / 1e12 if step_ms else float("nan")
    r = {
        "model": c.name, "variant": variant, "mode": a.mode, "device": device.type,
        "params": run.n_params, "batch": c.batch, "seq": c.block_size,
        "tokens_per_step": tokens_per_step, "warmup": warmup, "steps": steps,
        "step_ms_median": round(median, 4), "step_ms_mean": round(mean, 4),
        "tokens_per_s": round(tokens_per_step / (median * 1e-3), 1) if step_ms else None,
        "flops_per_step": flops_per_step,
        "tflops": round(tflops, 3),
        "mfu": round(tflops / a.peak_tflops, 5),
        "mfu_peak_tflops": a.peak_tflops,
    }
    if variant == "fp32":
        r["mfu_note"] = "fp32 run measured against the bf16 peak"
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info()
        r["peak_alloc_mib"] = round(torch.cuda.max_memory_allocated() / 2 ** 20, 1)
        r["device_used_mib"] = round((total - free) / 2 ** 20, 1)
        r["gpu_name"] = torch.cuda.get_device_name()
    else:
        r["peak_alloc_mib"] = r["device_used_mib"] = None
        r["gpu_name"] = None
    r.update({"final_loss": round(final_loss, 6), "seed": a.seed, "data": a.data,
              "sampler": a.sampler, "init": a.init, "torch_version": torch.__version__})
    return r


def time_run(run, variant, a, c, device):
    """--warmup untimed steps, then --steps steps each timed between two events."""
    total = a.warmup + a.steps
    batches = Batches(c, a.source, a.sampler, a.seed, a.data_path)
    # Every batch is made and copied before the clock starts.
    data = [tuple(t.to(device) for t in batches.get(i)) for i in range(total)]
    cuda = device.type == "cuda"
    for i in range(a.warmup):
        run.step(*data[i], learning_rate(a, i, total))
    marks = []
    if cuda:
        torch.cuda.synchronize()
    for i in range(a.warmup, total):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            loss, _ = run.step(*data[i], learning_rate(a, i, total))
            end.record()
            marks.append((start, end))
        else:
            t0 = time.perf_counter()
            loss, _ = run.step(*data[i], learning_rate(a, i, total))
            marks.append(time.perf_counter() - t0)
    if cuda:
        torch.cuda.synchronize()
        step_ms = [s.elapsed_time(e) for s, e in marks]
    else:
        step_ms = [t * 1e3 for t in marks]
    final = float(loss) if a.steps else float("nan")
    return summary(run, variant, a, c, device, step_ms, final, a.warmup, a.steps)


def curve_run(run, variant, a, c, device):
    """--steps steps from the seed, one JSONL record per step in ampc's format."""
    batches = Batches(c, a.source, a.sampler, a.seed, a.data_path)
    val = None
    if a.val_data:
        # As an ampc executable's --val-data with --sampler ampc: fixed windows, seed + 1.
        val = Batches(c, "file", a.sampler, a.seed + 1, a.val_data)
        val_batches = [to_device(val.get(i), device) for i in range(a.eval_batches)]
    log = open(a.log, "w") if a.log else None
    tokens_per_step = c.batch * c.block_size
    cuda = device.type == "cuda"
    step_ms, elapsed, loss = [], 0.0, float("nan")
    try:
        for step in range(a.steps):
            t0 = time.perf_counter()
            lr = learning_rate(a, step, a.steps)
            scale = run.scaler.get_scale() if run.scaler is not None else None
            batch = to_device(batches.get(step), device)
            if cuda:
                start, end = (torch.cuda.Event(enable_timing=True),
                              torch.cuda.Event(enable_timing=True))
                start.record()
            loss_t, norm_t = run.step(*batch, lr)
            if cuda:
                end.record()
            loss, norm = float(loss_t), float(norm_t)  # the step's one synchronisation
            dt = time.perf_counter() - t0
            elapsed += dt
            # Like ampc: CUDA events around the step on a GPU, the host clock on the CPU.
            step_ms.append(start.elapsed_time(end) if cuda else dt * 1e3)
            fields = [("step", str(step + 1)), ("loss", number(loss)),
                      ("grad_norm", number(norm)), ("lr", number(lr))]
            if run.scaler is not None:
                after = run.scaler.get_scale()
                fields += [("loss_scale", number(after)),
                           ("skipped", "true" if after < scale else "false")]
            done = tokens_per_step * (step + 1)
            fields += [("tokens", str(done)), ("tokens_per_s", number(done / elapsed)),
                       ("elapsed_s", number(elapsed)), ("step_ms", number(step_ms[-1]))]
            if cuda:
                fields.append(("device", '"cuda"'))
            if val is not None and ((step + 1) % a.eval_every == 0 or step + 1 == a.steps):
                vl = statistics.fmean(run.loss(*b) for b in val_batches)
                fields.append(("val_loss", number(vl)))
            record = "{" + ", ".join(f'"{k}": {v}' for k, v in fields) + "}"
            if log:
                log.write(record + "\n")
                log.flush()
            if a.print_every and ((step + 1) % a.print_every == 0 or step + 1 == a.steps):
                print(f"{c.name} {variant} step {step + 1}/{a.steps} loss {loss:.4f} "
                      f"grad norm {norm:.3f} lr {lr:.2e} {done / elapsed:,.0f} tok/s",
                      file=sys.stderr, flush=True)
            if not math.isfinite(loss) and run.scaler is None:
                raise RuntimeError(f"training diverged at step {step + 1}: loss {loss}")
    finally:
        if log:
            log.close()
    # The step-time statistics skip warm-up steps as ampc's --summary does: min(3, steps / 2).
    warmup = min(3, a.steps // 2)
    return summary(run, variant, a, c, device, step_ms[warmup:], loss, warmup,
                   a.steps - warmup)


def eval_run(run, variant, a, c, device):
    batches = Batches(c, a.source, a.sampler, a.seed, a.data_path)
    loss = run.loss(*to_device(batches.get(0), device))
    return {"model": c.name, "variant": variant, "mode": "eval", "device": device.type,
            "params": run.n_params, "loss": loss, "seed": a.seed, "data": a.data,
            "sampler": a.sampler, "init": a.init, "torch_version": torch.__version__}


def check_params():
    """Every config's PyTorch parameter count and shapes against make_gpt.py."""
    ok = True
    for c in CONFIGS.values():
        model = GPT(c)
        n = param_count(model)
        formula = c.param_count()
        table = model.ampc_parameters()
        declared = [(name, shape) for _, ps in make_gpt.model_params(c) for name, shape, _ in ps]
        shapes_ok = len(declared) == len(table) == len(list(model.parameters())) and all(
            tuple(table[name][0].shape) == (tuple(reversed(shape)) if table[name][1] else shape)
            for name, shape in declared)
        good = n == formula and shapes_ok
        if c.name == "gpt124m":
            good = good and n == make_gpt.GPT124M_TORCH_PARAMS
        ok = ok and good
        print(f"{c.name:8s} L={c.layers:2d} d={c.d_model:4d} H={c.heads:2d} V={c.vocab:6d} "
              f"T={c.block_size:5d} B={c.batch:3d}: torch {n:,} parameters, make_gpt.py "
              f"{formula:,}, {len(declared)} tensors with ampc's shapes: "
              f"{'OK' if good else 'MISMATCH'}")
        del model
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="gpt10m", help="one of " + ", ".join(CONFIGS))
    ap.add_argument("--variant", default="bf16-flash",
                    help="one of " + ", ".join(VARIANTS) + ", or all")
    ap.add_argument("--mode", choices=["time", "curve", "eval"], default="time")
    ap.add_argument("--steps", type=int, help="timed steps (time, default 50) or training "
                    "steps (curve, default 100)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first (time mode)")
    ap.add_argument("--data", default="random",
                    help="a .bin file of uint16 tokens, random (default) or synthetic")
    ap.add_argument("--sampler", choices=["torch", "ampc"], default="torch",
                    help="draw batches from torch's generator or exactly as ampc does")
    ap.add_argument("--export-weights", metavar="FILE",
                    help="curve and eval modes: write the final weights (safetensors, ampc's "
                         "parameter names) to FILE")
    ap.add_argument("--init", default="gpt2",
                    help="gpt2 (GPT-2's init from torch's generator), ampc (ampc's exact values "
                         "for --seed) or a safetensors FILE of ampc-named weights")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", choices=["cuda", "cpu"],
                    help="default: cuda when available")
    ap.add_argument("--json", help="also append each run's JSON object to this file")
    ap.add_argument("--log", help="curve mode: per-step JSONL metrics file")
    ap.add_argument("--val-data", help="curve mode: held-out .bin tokens for a validation loss")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-batches", type=int, default=20)
    ap.add_argument("--print-every", type=int, default=10,
                    help="curve mode: a progress line on stderr every N steps (0: none)")
    ap.add_argument("--peak-tflops", type=float, default=PEAK_TFLOPS,
                    help="the peak for MFU (default 989.4: H100 SXM dense bf16)")
    opt = ap.add_argument_group("optimizer (ampc's defaults)")
    opt.add_argument("--lr", type=float, default=3e-4)
    opt.add_argument("--beta1", type=float, default=0.9)
    opt.add_argument("--beta2", type=float, default=0.95)
    opt.add_argument("--eps", type=float, default=1e-8)
    opt.add_argument("--weight-decay", type=float, default=0.1,
                     help="on parameters of rank >= 2 only")
    opt.add_argument("--clip-norm", type=float, default=1.0, help="0 disables")
    opt.add_argument("--schedule", choices=["constant", "cosine"], default="constant")
    opt.add_argument("--warmup-steps", type=int, default=0)
    opt.add_argument("--decay-steps", type=int, default=0,
                     help="cosine: the step where the rate reaches min-lr (default: the run)")
    opt.add_argument("--min-lr", type=float, help="cosine: the final rate (default lr / 10)")
    ap.add_argument("--check-params", action="store_true",
                    help="check every config's parameter count against make_gpt.py and exit")
    a = ap.parse_args()

    if a.check_params:
        sys.exit(0 if check_params() else 1)
    if a.model not in CONFIGS:
        ap.error(f"unknown model {a.model!r}; known: {', '.join(CONFIGS)}")
    if a.steps is None:
        a.steps = 50 if a.mode == "time" else 100
    if a.steps < 0 or a.warmup < 0 or a.eval_every <= 0 or a.eval_batches <= 0:
        ap.error("step counts must not be negative")
    if a.data in ("random", "synthetic"):
        a.source, a.data_path = a.data, None
    else:
        a.source, a.data_path = "file", a.data
    device = torch.device(a.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_gpt.py: --device cuda, but CUDA is not available")
    if a.variant == "all":
        names = [n for n, v in VARIANTS.items() if device.type == "cuda" or not v.cuda_only]
    elif a.variant in VARIANTS:
        names = [a.variant]
    else:
        ap.error(f"unknown variant {a.variant!r}; known: {', '.join(VARIANTS)}, all")
    if a.mode == "curve" and len(names) > 1 and a.log:
        ap.error("curve mode with --variant all would write every variant to one --log")

    # Full fp32 matmuls everywhere (the fp32 variant is plain fp32, not TF32).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    c = CONFIGS[a.model]
    failed = False
    for name in names:
        run = None
        try:
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats()
            run = Run(c, name, a, device)
            mode = {"time": time_run, "curve": curve_run, "eval": eval_run}[a.mode]
            result = mode(run, name, a, c, device)
            if a.export_weights:
                export_weights(run.model, a.export_weights)
        except Exception as e:  # one failing variant must not stop the others
            failed = True
            result = {"model": c.name, "variant": name, "mode": a.mode,
                      "error": str(e).strip().split("\n")[0][:300]}
        finally:
            if run is not None:
                run.close()
        line = json.dumps(result)
        print(line, flush=True)
        if a.json:
            with open(a.json, "a") as f:
                f.write(line + "\n")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
