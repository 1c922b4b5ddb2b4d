#!/usr/bin/env python3
"""bench.py - ampc against PyTorch on one GPU, in one run: the benchmark table.

    bench.py --bundle DIR --out DIR [--models gpt10m,gpt30m,gpt124m] [--steps N] [--warmup N]
    bench.py --bundle DIR --out DIR --curves [--curve-steps 2000]

Timing: ampc's training executables (--device cuda, --summary) and bench/torch_gpt.py (mode
time) each run in a process of their own, on the same token file (DIR/data/kjv_train.bin); both
time every step with CUDA events and report the median after warm-up. FLOPs per step are
6 * parameters * tokens + 12 * layers * T * d * tokens (the weight matmuls forward and backward,
plus attention's QK^T and PV), the same count for both; MFU is against the H100 SXM's dense bf16
peak (989.4 TFLOP/s) whatever the precision. Memory, two columns: 'alloc' is ampc's device
allocations (arena, parameters, state, workspace: all it ever holds) or PyTorch's caching
allocator's peak (torch.cuda.max_memory_allocated); 'used' is what cuMemGetInfo says is in use on
the whole GPU at the end of the run (the CUDA context and PyTorch's cache included).

The table goes to stdout, every row to DIR/bench.json, each run's output to DIR/*.log.

--curves: GPT-10M trained for --curve-steps steps on the token file by ampc (fp32, bf16, fp16)
and PyTorch (fp32, bf16, fp16 with a GradScaler) from the same initial values and the same
batches (torch_gpt.py --init ampc --sampler ampc), and the final losses side by side.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PEAK_TFLOPS = 989.4

TORCH_VARIANTS = ["fp32", "bf16", "fp16", "bf16-flash", "bf16-flash-ckpt", "bf16-compile"]


def configs(bundle):
    sys.path.insert(0, os.path.join(bundle, "examples", "gpt"))
    import make_gpt  # noqa: E402
    return make_gpt.CONFIGS


def flops_per_step(c):
    tokens = c.batch * c.block_size
    return 6 * c.param_count() * tokens + 12 * c.layers * c.block_size * c.d_model * tokens


def run_logged(cmd, log, timeout):
    with open(log, "w") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        try:
            p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout)
            return p.returncode
        except subprocess.TimeoutExpired:
            f.write(f"\n(timed out after {timeout} s)\n")
            return -1


def tail(path, n=3):
    with open(path) as f:
        return " | ".join(line.strip() for line in f.readlines()[-n:])


# ampc's variants: the executable's suffix and extra flags per variant key.
AMPC_VARIANTS = {"bf16_heuristic": ("bf16", ["--matmul-algorithms", "heuristic"]),
                 "bf16_ownattn": ("bf16", ["--attention", "ampc"])}


def ampc_row(a, c, name, label):
    model, _, key = name.partition("_")
    suffix, extra = AMPC_VARIANTS.get(key, (key, []))
    exe = os.path.join(a.bundle, "train", f"{model}_{suffix}")
    summary = os.path.join(a.out, name + ".summary.json")
    log = os.path.join(a.out, name + ".log")
    cmd = [exe, "--device", "cuda", "--steps", str(a.warmup + a.steps), "--seed", "0",
           "--data", a.data, "--summary", summary, "--quiet"] + extra
    row = {"model": c.name, "impl": "ampc", "variant": label}
    if run_logged(cmd, log, a.timeout) != 0 or not os.path.exists(summary):
        row["error"] = tail(log)
        return row
    with open(summary) as f:
        s = json.load(f)
    ms = s["step_ms_median"]
    mem = s.get("memory", {})
    row.update(step_ms=ms, tokens_per_s=s.get("tokens_per_s"), final_loss=s.get("last_loss"),
               planned_mib=mem.get("planned_bytes", 0) / 2 ** 20,
               alloc_mib=mem.get("allocated_bytes", 0) / 2 ** 20,
               device_used_mib=mem.get("device_used_bytes", 0) / 2 ** 20)
    # Which attention ran (cuDNN's or ampc's, and the times that chose it): the lines of the
    # device description under "attention (...)".
    attention = [line.strip() for line in s.get("device_description", "").splitlines()
                 if line.startswith("  forward") or line.startswith("  backward")]
    if attention:
        row["attention"] = attention
    return row


def torch_row(a, c, variant):
    out = os.path.join(a.out, f"torch_{c.name}_{variant}.json")
    log = os.path.join(a.out, f"torch_{c.name}_{variant}.log")
    if os.path.exists(out):
        os.remove(out)
    cmd = [sys.executable, os.path.join(HERE, "torch_gpt.py"), "--model", c.name, "--variant",
           variant, "--steps", str(a.steps), "--warmup", str(a.warmup), "--data", a.data,
           "--json", out]
    row = {"model": c.name, "impl": "torch", "variant": variant}
    if run_logged(cmd, log, a.timeout) != 0 or not os.path.exists(out):
        row["error"] = tail(log)
        return row
    with open(out) as f:
        r = json.loads(f.readline())
    row.update(step_ms=r["step_ms_median"], tokens_per_s=r["tokens_per_s"],
               final_loss=r["final_loss"], alloc_mib=r["peak_alloc_mib"],
               device_used_mib=r["device_used_mib"], gpu=r.get("gpu_name"),
               torch=r.get("torch_version"))
    return row


def fmt(x, spec):
    return format(x, spec) if isinstance(x, (int, float)) else "-"


def table(rows, cs):
    lines = [f"{'model':8s} {'impl':5s} {'variant':16s} {'ms/step':>8s} {'tok/s':>9s} "
             f"{'TFLOP/s':>7s} {'MFU':>6s} {'alloc MiB':>9s} {'used MiB':>8s} {'/flash':>6s} "
             f"{'/compile':>8s} loss"]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['model']:8s} {r['impl']:5s} {r['variant']:16s} failed: "
                         f"{r['error'][:90]}")
            continue
        c = cs[r["model"]]
        same = {x["variant"]: x for x in rows if x["model"] == r["model"] and
                x["impl"] == "torch" and "error" not in x}
        tflops = flops_per_step(c) / (r["step_ms"] * 1e-3) / 1e12
        r.update(tflops=tflops, mfu=tflops / PEAK_TFLOPS, flops_per_step=flops_per_step(c))
        for key, variant in (("vs_flash", "bf16-flash"), ("vs_compile", "bf16-compile")):
            if variant in same:
                r[key] = same[variant]["step_ms"] / r["step_ms"]
        lines.append(f"{r['model']:8s} {r['impl']:5s} {r['variant']:16s} "
                     f"{fmt(r['step_ms'], '8.2f')} {fmt(r['tokens_per_s'], '9.0f')} "
                     f"{fmt(tflops, '7.1f')} {fmt(100 * r['mfu'], '5.1f')}% {fmt(r.get('alloc_mib'), '9.0f')} "
                     f"{fmt(r.get('device_used_mib'), '8.0f')} "
                     f"{fmt(r.get('vs_flash'), '6.2f')} {fmt(r.get('vs_compile'), '8.2f')} "
                     f"{fmt(r.get('final_loss'), '.3f')}")
    return "\n".join(lines)


def bench(a, cs):
    rows = []
    plan = {"gpt10m": ["bf16", "fp16", "fp32"], "gpt30m": ["bf16"],
            "gpt124m": ["bf16", "bf16_ownattn", "bf16_budget50"]}
    for model in a.models.split(","):
        c = cs[model]
        for p in plan.get(model, ["bf16"]):
            label = (p.replace("_budget50", " budget 50%").replace("_heuristic", " heuristic mm")
                     .replace("_ownattn", " ampc attention"))
            rows.append(ampc_row(a, c, f"{model}_{p}", label))
            print(f"bench: ampc {model} {p}: {rows[-1].get('step_ms', 'failed')}",
                  file=sys.stderr, flush=True)
        for v in a.torch_variants.split(","):
            rows.append(torch_row(a, c, v))
            print(f"bench: torch {model} {v}: {rows[-1].get('step_ms', 'failed')}",
                  file=sys.stderr, flush=True)
    text = table(rows, cs)
    gpu = next((r["gpu"] for r in rows if r.get("gpu")), "GPU")
    head = (f"ampc vs PyTorch on {gpu}, {datetime.date.today()}: median of {a.steps} steps after "
            f"{a.warmup} of warm-up, CUDA events; /flash, /compile = speed-up over torch eager bf16 + SDPA "
            f"flash and torch.compile")
    print(head + "\n" + text)
    with open(os.path.join(a.out, "bench.json"), "w") as f:
        json.dump({"gpu": gpu, "date": str(datetime.date.today()), "steps": a.steps,
                   "warmup": a.warmup, "rows": rows}, f, indent=1)
    return 0 if all("error" not in r for r in rows) else 1


def mean_last(path, key, n=50):
    with open(path) as f:
        values = [json.loads(line).get(key) for line in f if line.strip()]
    values = [v for v in values if v is not None][-n:]
    return sum(values) / len(values) if values else float("nan")


def curves(a, cs):
    c = cs["gpt10m"]
    rows, failed = [], False
    for precision in ("fp32", "bf16", "fp16"):
        log = os.path.join(a.out, f"ampc_gpt10m_{precision}.jsonl")
        cmd = [os.path.join(a.bundle, "train", f"gpt10m_{precision}"), "--device", "cuda",
               "--steps", str(a.curve_steps), "--seed", "0", "--data", a.data, "--log", log,
               "--quiet"]
        status = run_logged(cmd, log.replace(".jsonl", ".log"), a.timeout)
        ampc = mean_last(log, "loss") if status == 0 else float("nan")
        variant = precision
        log_t = os.path.join(a.out, f"torch_gpt10m_{precision}.jsonl")
        cmd = [sys.executable, os.path.join(HERE, "torch_gpt.py"), "--model", "gpt10m",
               "--variant", variant, "--mode", "curve", "--steps", str(a.curve_steps),
               "--data", a.data, "--init", "ampc", "--sampler", "ampc", "--seed", "0",
               "--log", log_t]
        status_t = run_logged(cmd, log_t.replace(".jsonl", ".log"), a.timeout)
        torch = mean_last(log_t, "loss") if status_t == 0 else float("nan")
        failed = failed or status != 0 or status_t != 0
        rows.append((precision, ampc, torch))
        print(f"curves: {precision}: ampc {ampc:.4f} torch {torch:.4f}", file=sys.stderr,
              flush=True)
    print(f"GPT-10M, {a.curve_steps} steps on {os.path.basename(a.data)} (same initial values "
          f"and batches), mean loss of the last 50 steps:")
    print(f"{'precision':9s} {'ampc':>8s} {'torch':>8s}")
    for p, x, y in rows:
        print(f"{p:9s} {x:8.4f} {y:8.4f}")
    with open(os.path.join(a.out, "curves.json"), "w") as f:
        json.dump([{"precision": p, "ampc": x, "torch": y} for p, x, y in rows], f, indent=1)
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="gpt10m,gpt30m,gpt124m")
    ap.add_argument("--torch-variants", default=",".join(TORCH_VARIANTS))
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--timeout", type=int, default=420)
    ap.add_argument("--data", help="token file (default: BUNDLE/data/kjv_train.bin)")
    ap.add_argument("--curves", action="store_true")
    ap.add_argument("--curve-steps", type=int, default=2000)
    a = ap.parse_args()
    a.data = a.data or os.path.join(a.bundle, "data", "kjv_train.bin")
    os.makedirs(a.out, exist_ok=True)
    cs = configs(a.bundle)
    return curves(a, cs) if a.curves else bench(a, cs)


if __name__ == "__main__":
    sys.exit(main())
