#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention timed at the shapes ampc_attention_bench uses.

    attention_torch.py [--iterations N] [--json FILE]

bf16, q/k/v [B, H, T, D] contiguous as ampc's kernels read them: GPT-124M (B 16, H 12,
T 1024, D 64, causal), the same non-causal, and D 128 with H 6. For each: the forward alone
and the backward alone (the gradient of sum(o * dO) from a retained graph), each the median of
N runs (default 20, after 3 warm-up runs) between two CUDA events, with the backend PyTorch
picks (flash attention on an H100) and, where they are available, with the flash and cuDNN
backends forced.
TFLOP/s use FlashAttention's counts, as ampc_attention_bench: forward 4 B H T S D, backward
10 B H T S D, halved when causal. Exit status 2 without a GPU or PyTorch.
"""

import argparse
import json
import statistics
import sys

SHAPES = [("gpt124m", 16, 12, 1024, 64, True),
          ("gpt124m-noncausal", 16, 12, 1024, 64, False),
          ("d128", 16, 6, 1024, 128, True)]


def median_ms(torch, iterations, function):
    for _ in range(3):
        function()
    times = []
    for _ in range(iterations):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        function()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--json")
    args = parser.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("attention_torch.py: no PyTorch here", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("attention_torch.py: no CUDA GPU here", file=sys.stderr)
        return 2
    # The versions behind the figures (cuDNN's is the one ampc's attention opens too, from the
    # same wheel, when run.sh puts it on the loader's path).
    print(f"PyTorch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"cuDNN {torch.backends.cudnn.version()}")
    backends = [("default", None)]
    kernel = getattr(getattr(torch.nn, "attention", None), "SDPBackend", None)
    if kernel is not None:
        backends.append(("flash", kernel.FLASH_ATTENTION))
        # cuDNN's fused attention (what ampc could open at run time like cuBLASLt): the
        # measurement that decides between it and ampc's own kernels.
        if hasattr(kernel, "CUDNN_ATTENTION"):
            backends.append(("cudnn", kernel.CUDNN_ATTENTION))
    results = []
    print(f"{'shape':18s} {'backend':10s} {'fwd ms':>9s} {'bwd ms':>9s} {'fwd TF/s':>9s} "
          f"{'bwd TF/s':>9s}")
    for label, batch, heads, tokens, dim, causal in SHAPES:
        generator = torch.Generator(device="cuda").manual_seed(2024)
        shape = (batch, heads, tokens, dim)
        q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.bfloat16,
                                   generator=generator) for _ in range(4))
        for tensor in (q, k, v):
            tensor.requires_grad_(True)
        pairs = batch * heads * tokens * tokens * dim * (0.5 if causal else 1.0)
        for name, backend in backends:
            def forward():
                if backend is None:
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                with torch.nn.attention.sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            try:
                with torch.no_grad():
                    forward_ms = median_ms(torch, args.iterations, forward)
                out = forward()
                backward_ms = median_ms(
                    torch, args.iterations,
                    lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True))
            except RuntimeError as error:  # the backend cannot run this shape
                print(f"{label:18s} {name:10s} unavailable: {str(error).splitlines()[0]}")
                continue
            forward_rate = 4 * pairs / (forward_ms * 1e-3) / 1e12
            backward_rate = 10 * pairs / (backward_ms * 1e-3) / 1e12
            print(f"{label:18s} {name:10s} {forward_ms:9.3f} {backward_ms:9.3f} "
                  f"{forward_rate:9.1f} {backward_rate:9.1f}")
            results.append({"shape": label, "backend": name, "batch": batch, "heads": heads,
                            "tokens": tokens, "head_dim": dim, "causal": causal,
                            "forward_ms": forward_ms, "backward_ms": backward_ms,
                            "forward_tflops": forward_rate, "backward_tflops": backward_rate})
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "iterations": args.iterations, "results": results}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
