#!/usr/bin/env python3
"""agree.py - the CUDA backend against the CPU backend: the same training executable, seed and
data on both, step by step.

    agree.py reference --bundle DIR --out DIR [--cache DIR] [--limit MODEL=STEPS]
                                                              CPU runs (on the build machine)
    agree.py check --bundle DIR --out DIR [--reference DIR]   GPU runs, compared
    agree.py curves A.jsonl B.jsonl [--tolerance T] [--window N]
                                                              any two loss curves, compared
    agree.py keep --bundle DIR [--case NAME]...              CPU curves kept in the repository
                                                              (GPT-10M's take hours; LONG_CASES)
    agree.py overflows LOG.jsonl --injected 3,7,8             a run with --inject-overflow, checked

Every case trains one of the bundle's executables for a few steps from seed 0 on its built-in
synthetic task. The CPU backend is deterministic (counter-based RNG, fixed reduction order), so
its curves are computed once where the bundle is made and travel in DIR/reference. A GPU run
agrees when every step's loss is within the case's relative tolerance of the CPU's: 1e-4 in fp32,
2% in bf16 and fp16 (their rounding differs between a fused GPU kernel and the CPU's op-by-op
evaluation), over the steps both logged (a reference may be cut short with --limit: the CPU
backend trains GPT-10M at about 20 s a step on two cores); with dynamic loss scaling the scale
and the skipped steps must be identical, and an injected overflow must skip its step and halve
the scale on both, and on the GPU over every step it logged (GPT-10M in fp16 too, past its
short CPU reference). The end-to-end case trains the tiny GPT for 50 steps on the GPU alone and
asks that the loss falls.

The long cases (LONG_CASES: GPT-10M in bf16 and fp16 for 300 steps) take the CPU backend hours
each, so their curves are computed once with `keep` and kept in the repository
(bench/reference/NAME-DIGEST.jsonl, DIGEST as for the cache: the plan without its GPU code, the
flags and steps), as can any case's. `reference` copies the ones that match today's plans into
the bundle; a long case without one is reported as not compared. Over hundreds of steps the
16-bit rounding of two different evaluation orders moves the curves apart step by step, so a
long case compares means over windows of steps: the curves fall together when every window's
mean loss agrees within the tolerance and both fall.
"""

import argparse
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

# name, executable, steps, extra flags, relative tolerance of the loss (None: GPU only)
CASES = [
    ("mlp_fp32", "mlp_fp32", 20, [], 1e-4),
    ("mlp_bf16", "mlp_bf16", 20, [], 0.02),
    ("mlp_fp16", "mlp_fp16", 20, [], 0.02),
    ("tiny_fp32", "tiny_fp32", 20, [], 1e-4),
    ("tiny_bf16", "tiny_bf16", 20, [], 0.02),
    ("tiny_fp16", "tiny_fp16", 20, [], 0.02),
    ("tiny_fp16_overflow", "tiny_fp16", 20, ["--inject-overflow", "3,7,8"], 0.02),
    ("gpt10m_fp32", "gpt10m_fp32", 20, [], 1e-4),
    ("gpt10m_bf16", "gpt10m_bf16", 20, [], 0.02),
    ("gpt10m_fp16", "gpt10m_fp16", 20, [], 0.02),
    ("gpt10m_fp16_overflow", "gpt10m_fp16", 10, ["--inject-overflow", "3,7,8"], 0.02),
    ("tiny_bf16_e2e", "tiny_bf16", 50, [], None),
]

# name, executable, steps, extra flags, relative tolerance of a window's mean loss, window
LONG_CASES = [
    ("gpt10m_bf16_300", "gpt10m_bf16", 300, [], 0.03, 10),
    ("gpt10m_fp16_300", "gpt10m_fp16", 300, [], 0.03, 10),
]
# The CPU backend's numerics (docs/plan-format.md, "Numerics of the CPU reference backend"), part
# of every curve's key: raise it with any change that alters the backend's bits, so that kept
# curves are computed again.
CPU_NUMERICS = 1
KEPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference")


def read_log(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def run(exe, steps, extra, device, log, timeout):
    cmd = [exe, "--device", device, "--steps", str(steps), "--seed", "0", "--quiet",
           "--log", log] + extra
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout


def digest(path, extra, steps):
    """A key of a CPU run: the plan embedded in the executable (runtime/train/Bundle.cpp: the
    plan, then its length as 8 little-endian bytes and an 8-byte magic) without its device
    program, the flags and steps. The CPU backend reads every section but DEVP
    (docs/plan-format.md), so a curve stays valid while the GPU code changes; a rebuilt runner
    with the same plan reuses it too."""
    with open(path, "rb") as f:
        data = f.read()
    length = int.from_bytes(data[-16:-8], "little")
    plan = data[-16 - length:-16] if 0 < length <= len(data) - 16 else data
    h = hashlib.sha256()
    if plan[:8] == b"AMPCPLAN":
        h.update(plan[:16])  # magic, version, section count
        at = 16
        while at + 16 <= len(plan):
            tag, size = plan[at:at + 4], int.from_bytes(plan[at + 8:at + 16], "little")
            if tag != b"DEVP":
                h.update(plan[at:at + 16 + size])
            at += 16 + size
    else:
        h.update(plan)
    h.update(json.dumps([extra, steps, CPU_NUMERICS]).encode())
    return h.hexdigest()[:16]


def within_steps(extra, steps):
    """extra for a run cut to steps: overflows injected later are dropped."""
    if "--inject-overflow" not in extra:
        return extra
    at = extra.index("--inject-overflow")
    kept = [s for s in extra[at + 1].split(",") if int(s) <= steps]
    rest = extra[:at] + extra[at + 2:]
    return rest + (["--inject-overflow", ",".join(kept)] if kept else [])


def reference(a):
    os.makedirs(a.out, exist_ok=True)
    if a.cache:
        os.makedirs(a.cache, exist_ok=True)
    for name, exe_name, steps, extra, tol in CASES:
        if tol is None:
            continue
        exe = os.path.join(a.bundle, "train", exe_name)
        target = os.path.join(a.out, name + ".jsonl")
        kept = kept_path(name, exe, extra, steps)
        if os.path.exists(kept):  # the whole curve, kept in the repository
            shutil.copyfile(kept, target)
            continue
        steps = min(steps, a.limit.get(name.split("_")[0], steps))
        extra = within_steps(extra, steps)
        cached = None
        if a.cache:
            cached = os.path.join(a.cache, f"{name}-{digest(exe, extra, steps)}.jsonl")
            if os.path.exists(cached):
                shutil.copyfile(cached, target)
                continue
        print(f"agree: CPU reference {name} ({steps} steps)", file=sys.stderr, flush=True)
        status, output = run(exe, steps, extra, "cpu", target, None)
        if status != 0:
            sys.exit(f"agree: the CPU run of {name} failed ({status}):\n{output}")
        if cached:
            shutil.copyfile(target, cached)
    for name, exe_name, steps, extra, _, _ in LONG_CASES:
        kept = kept_path(name, os.path.join(a.bundle, "train", exe_name), extra, steps)
        target = os.path.join(a.out, name + ".jsonl")
        if os.path.exists(kept):
            shutil.copyfile(kept, target)
        else:
            if os.path.exists(target):  # an earlier plan's
                os.remove(target)
            print(f"agree: no kept CPU curve for {name} at this plan ({os.path.basename(kept)}); "
                  f"the GPU run will not be compared (make one with: agree.py keep)",
                  file=sys.stderr, flush=True)


def kept_path(name, exe, extra, steps):
    return os.path.join(KEPT, f"{name}-{digest(exe, extra, steps)}.jsonl")


def constant_schedule(exe):
    """Whether the executable's learning rate is constant (so a run's first steps do not
    depend on --steps, which a decaying schedule's length defaults to)."""
    info = subprocess.run([exe, "--info"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True).stdout
    return " schedule=constant " in info


def keep(a):
    """CPU curves of every compared case (long ones first), written into the repository under
    their digest; a case whose curve is the start of a longer kept run of the same executable
    and flags takes that run's first steps when the learning rate is constant."""
    os.makedirs(KEPT, exist_ok=True)
    cases = [c[:5] for c in LONG_CASES] + [c for c in CASES if c[4] is not None]
    done = {}  # (executable, flags) -> the longest kept log
    for name, exe_name, steps, extra, _ in cases:
        if a.case and name not in a.case:
            continue
        exe = os.path.join(a.bundle, "train", exe_name)
        kept = kept_path(name, exe, extra, steps)
        key = (exe_name, tuple(extra))
        if os.path.exists(kept):
            print(f"agree: {os.path.basename(kept)} is already there", file=sys.stderr)
        elif key in done and len(read_log(done[key])) >= steps and constant_schedule(exe):
            with open(done[key]) as f:
                lines = [line for line in f if line.strip()][:steps]
            with open(kept + ".partial", "w") as f:
                f.writelines(lines)
            os.replace(kept + ".partial", kept)
            print(f"agree: {os.path.basename(kept)}: the first {steps} steps of "
                  f"{os.path.basename(done[key])}", file=sys.stderr)
        else:
            print(f"agree: CPU run {name} ({steps} steps)", file=sys.stderr, flush=True)
            status, output = run(exe, steps, extra, "cpu", kept + ".partial", None)
            if status != 0:
                sys.exit(f"agree: the CPU run of {name} failed ({status}):\n{output}")
            os.replace(kept + ".partial", kept)
        if key not in done or len(read_log(done[key])) < steps:
            done[key] = kept


def window_means(log, window):
    """{first step: mean loss} of the windows [1, window], [window + 1, 2 window], ... whose
    every step logged a finite loss (a non-finite one is logged as null)."""
    losses = {r["step"]: r["loss"] for r in log if r.get("loss") is not None}
    last = max((r["step"] for r in log), default=0)
    return {first: sum(losses[s] for s in range(first, first + window)) / window
            for first in range(1, last - window + 2, window)
            if all(s in losses for s in range(first, first + window))}


def compare_windows(cpu, gpu, tol, window, require_cuda=True, labels=("the GPU", "the CPU")):
    """Problems of a long GPU curve against the CPU's: the mean loss of every window of steps
    within tol (a window where one side has a non-finite loss and the other not is a problem),
    both curves falling (the last window below the first), as many steps on both; and the
    largest relative difference of a window's mean."""
    problems = []
    on_gpu, on_cpu = labels
    if len(gpu) < len(cpu):
        problems.append(f"{len(gpu)} steps logged on {on_gpu}, {len(cpu)} on {on_cpu}")
    if require_cuda and any(r.get("device") != "cuda" for r in gpu):
        problems.append("not every step ran on cuda")
    worst = 0.0
    cw, gw = window_means(cpu, window), window_means(gpu, window)
    last = min(max((r["step"] for r in cpu), default=0), max((r["step"] for r in gpu), default=0))
    for first in range(1, last - window + 2, window):
        c, g = cw.get(first), gw.get(first)
        if c is None or g is None:
            if (c is None) != (g is None):
                side = on_gpu if g is None else on_cpu
                problems.append(f"steps {first}-{first + window - 1}: a non-finite or missing "
                                f"loss on {side} only")
            continue
        rel = abs(g - c) / max(abs(c), 1e-12)
        worst = max(worst, rel)
        if not rel <= tol:
            problems.append(f"steps {first}-{first + window - 1}: mean loss {g:.5g} on {on_gpu}, "
                            f"{c:.5g} on {on_cpu} (relative {rel:.2e} > {tol:g})")
    for label, w in ((on_cpu, cw), (on_gpu, gw)):
        means = [w[first] for first in sorted(w)]
        if len(means) < 2 or not means[-1] < means[0]:
            problems.append(f"the curve of {label} does not fall: window means "
                            f"{[round(m, 4) for m in means[:1] + means[-1:]]}")
    return problems, worst


def compare(cpu, gpu, tol, require_cuda=True, labels=("the GPU", "the CPU")):
    """Problems of a GPU curve against the CPU's, and the largest relative loss difference."""
    problems, worst = [], 0.0
    on_gpu, on_cpu = labels
    if len(gpu) < len(cpu):
        problems.append(f"{len(gpu)} steps logged on {on_gpu}, {len(cpu)} on {on_cpu}")
    for c, g in zip(cpu, gpu):
        step = c["step"]
        if require_cuda and g.get("device") != "cuda":
            problems.append(f"step {step} did not run on cuda")
            break
        cl, gl = c.get("loss"), g.get("loss")
        if cl is None or gl is None:
            if (cl is None) != (gl is None):
                problems.append(f"step {step}: loss {gl} on {on_gpu}, {cl} on {on_cpu}")
            continue
        rel = abs(gl - cl) / max(abs(cl), 1e-12)
        worst = max(worst, rel)
        if not rel <= tol:
            problems.append(f"step {step}: loss {gl:.6g} on {on_gpu}, {cl:.6g} on {on_cpu} "
                            f"(relative {rel:.2e} > {tol:g})")
        cv, gv = c.get("val_loss"), g.get("val_loss")
        if (cv is None) != (gv is None):
            problems.append(f"step {step}: val_loss {gv} on {on_gpu}, {cv} on {on_cpu}")
        elif cv is not None:
            rel = abs(gv - cv) / max(abs(cv), 1e-12)
            worst = max(worst, rel)
            if not rel <= tol:
                problems.append(f"step {step}: val_loss {gv:.6g} on {on_gpu}, {cv:.6g} on "
                                f"{on_cpu} (relative {rel:.2e} > {tol:g})")
        for key in ("loss_scale", "skipped"):
            if key in c and c[key] != g.get(key):
                problems.append(f"step {step}: {key} {g.get(key)} on {on_gpu}, {c[key]} on "
                                f"{on_cpu}")
    return problems, worst


def overflow_trajectory(log, extra):
    """Problems of a run with --inject-overflow against GradScaler's rules, read from its own
    log (so it holds past the steps a CPU reference has): exactly the injected steps are
    skipped, a skipped step halves the scale, any other step keeps it or (growth) doubles it."""
    if "--inject-overflow" not in extra:
        return []
    injected = {int(s) for s in extra[extra.index("--inject-overflow") + 1].split(",")}
    problems, previous = [], None
    for r in log:
        step, scale, skipped = r["step"], r.get("loss_scale"), bool(r.get("skipped"))
        if skipped != (step in injected):
            problems.append(f"step {step}: skipped {skipped}, injected {step in injected}")
        if previous is not None and scale is not None:
            allowed = [previous / 2] if skipped else [previous, previous * 2]
            if scale not in allowed:
                problems.append(f"step {step}: scale {previous:g} -> {scale:g} "
                                f"({'skipped' if skipped else 'applied'})")
        previous = scale
    return problems


def check(a):
    os.makedirs(a.out, exist_ok=True)
    ref_dir = a.reference or os.path.join(a.bundle, "reference")
    results, failed = [], False
    for name, exe_name, steps, extra, tol in CASES:
        exe = os.path.join(a.bundle, "train", exe_name)
        log = os.path.join(a.out, name + ".jsonl")
        try:
            status, output = run(exe, steps, extra, "cuda", log, 300)
        except subprocess.TimeoutExpired:
            status, output = -1, "timed out after 300 s"
        with open(os.path.join(a.out, name + ".log"), "w") as f:
            f.write(output)
        record = {"case": name, "steps": steps, "tolerance": tol}
        if status != 0:
            problems = [f"the GPU run failed ({status}): " + output.strip()[-600:]]
        elif tol is None:
            losses = [r["loss"] for r in read_log(log)]
            first, last = losses[0], sum(losses[-10:]) / len(losses[-10:])
            record.update(first_loss=first, last_loss=last)
            problems = [] if last < first - 0.5 else [f"loss {first:.4f} -> {last:.4f}"]
        else:
            cpu = read_log(os.path.join(ref_dir, name + ".jsonl"))
            gpu = read_log(log)
            problems, worst = compare(cpu, gpu, tol)
            problems += overflow_trajectory(gpu, extra)
            record["max_rel_loss_diff"] = worst
            record["steps_compared"] = min(len(cpu), len(gpu))
            record["final_loss_cpu"] = cpu[-1]["loss"] if cpu else None
            record["final_loss_gpu"] = gpu[-1]["loss"] if gpu else None
            if any("loss_scale" in r for r in cpu):
                record["loss_scale_gpu"] = [r.get("loss_scale") for r in gpu]
                record["skipped_gpu"] = [r["step"] for r in gpu if r.get("skipped")]
        record["problems"] = problems
        results.append(record)
        failed = failed or bool(problems)
        detail = (f"max relative loss difference {record['max_rel_loss_diff']:.2e}"
                  if "max_rel_loss_diff" in record else
                  f"loss {record.get('first_loss', float('nan')):.3f} -> "
                  f"{record.get('last_loss', float('nan')):.3f}" if status == 0 else "")
        if "skipped_gpu" in record:
            detail += f"; skipped steps {record['skipped_gpu']}"
        print(f"{'FAIL' if problems else 'ok'} {name}: {detail}", flush=True)
        for p in problems[:5]:
            print(f"     {p}", flush=True)
    for name, exe_name, steps, extra, tol, window in LONG_CASES:
        record = {"case": name, "steps": steps, "tolerance": tol, "window": window}
        cpu_log = os.path.join(ref_dir, name + ".jsonl")
        if not os.path.exists(cpu_log):
            record["problems"] = []
            record["compared"] = False
            results.append(record)
            print(f"not compared {name}: no kept CPU curve for this plan (agree.py keep)",
                  flush=True)
            continue
        log = os.path.join(a.out, name + ".jsonl")
        try:
            status, output = run(os.path.join(a.bundle, "train", exe_name), steps, extra,
                                 "cuda", log, 600)
        except subprocess.TimeoutExpired:
            status, output = -1, "timed out after 600 s"
        with open(os.path.join(a.out, name + ".log"), "w") as f:
            f.write(output)
        if status != 0:
            problems, worst = [f"the GPU run failed ({status}): " + output.strip()[-600:]], 0.0
        else:
            cpu, gpu = read_log(cpu_log), read_log(log)
            problems, worst = compare_windows(cpu, gpu, tol, window)
            record["window_means_cpu"] = window_means(cpu, window)
            record["window_means_gpu"] = window_means(gpu, window)
        record.update(compared=True, max_rel_window_diff=worst, problems=problems)
        results.append(record)
        failed = failed or bool(problems)
        print(f"{'FAIL' if problems else 'ok'} {name}: max relative difference of "
              f"{window}-step mean losses {worst:.2e}", flush=True)
        for p in problems[:5]:
            print(f"     {p}", flush=True)
    with open(os.path.join(a.out, "agree.json"), "w") as f:
        json.dump(results, f, indent=1)
    return 1 if failed else 0


def curves(a):
    """Two JSONL loss curves (an ampc executable's --log, torch_gpt.py's curve mode)."""
    reference, other = read_log(a.files[0]), read_log(a.files[1])
    steps = min(len(reference), len(other))
    if a.window:
        problems, worst = compare_windows(reference, other, a.tolerance, a.window,
                                          require_cuda=False,
                                          labels=(os.path.basename(a.files[1]),
                                                  os.path.basename(a.files[0])))
        print(f"{'FAIL' if problems else 'ok'}: max relative difference of {a.window}-step mean "
              f"losses {worst:.2e} over {steps} steps (tolerance {a.tolerance:g})")
    else:
        problems, worst = compare(reference, other, a.tolerance, require_cuda=False,
                                  labels=(os.path.basename(a.files[1]),
                                          os.path.basename(a.files[0])))
        print(f"{'FAIL' if problems else 'ok'}: max relative loss difference {worst:.2e} over "
              f"{steps} steps (tolerance {a.tolerance:g})")
    for p in problems[:5]:
        print(f"     {p}")
    return 1 if problems or steps == 0 else 0


def read_weights(path):
    """{name: (shape, [floats])} of a weights file."""
    return {name: (shape, safetensors_io.values(dtype, raw))
            for name, (dtype, shape, raw) in safetensors_io.read(path)[1].items()}


def weights(a):
    """Two weights files (an executable's --export-weights): every tensor within --tolerance."""
    ref, other = (read_weights(path) for path in a.files)
    problems, worst = [], 0.0
    if sorted(ref) != sorted(other):
        problems.append(f"tensors differ: {sorted(set(ref) ^ set(other))[:5]}")
    for name in sorted(set(ref) & set(other)):
        (sa, va), (sb, vb) = ref[name], other[name]
        if sa != sb:
            problems.append(f"{name}: shape {sb} against {sa}")
            continue
        diffs = [abs(x - y) for x, y in zip(va, vb)]
        # A NaN on either side is a difference (max() would drop one after the first).
        diff = float("nan") if any(d != d for d in diffs) else max(diffs + [0.0])
        worst = max(worst, diff)
        if not diff <= a.tolerance:
            problems.append(f"{name}: values differ by up to {diff:.2e}")
    print(f"{'FAIL' if problems else 'ok'}: {len(ref)} tensors of {os.path.basename(a.files[1])}, "
          f"largest difference {worst:.2e} (tolerance {a.tolerance:g})")
    for p in problems[:5]:
        print(f"     {p}")
    return 1 if problems else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what",
                    choices=["reference", "check", "curves", "weights", "overflows", "keep"])
    ap.add_argument("files", nargs="*",
                    help="curves: REFERENCE.jsonl OTHER.jsonl; weights: two .safetensors files; "
                         "overflows: one .jsonl")
    ap.add_argument("--injected", help="overflows: the steps given to --inject-overflow (3,7,8)")
    ap.add_argument("--tolerance", type=float, default=1e-4,
                    help="curves: relative, per step (per window with --window)")
    ap.add_argument("--window", type=int, default=0,
                    help="curves: compare means over windows of this many steps, and ask that "
                         "both curves fall (the long cases' rule)")
    ap.add_argument("--bundle")
    ap.add_argument("--out")
    ap.add_argument("--cache")
    ap.add_argument("--reference")
    ap.add_argument("--case", action="append", default=[],
                    help="keep: only this case (repeatable)")
    ap.add_argument("--limit", action="append", default=[], metavar="MODEL=STEPS",
                    help="reference: run MODEL's cases for at most STEPS steps (the CPU is slow)")
    a = ap.parse_args()
    a.limit = {k: int(v) for k, v in (x.split("=", 1) for x in a.limit)}
    if a.window < 0:
        ap.error("--window must be positive")
    if a.what == "overflows":
        if len(a.files) != 1 or not a.injected:
            ap.error("overflows needs one log and --injected")
        problems = overflow_trajectory(read_log(a.files[0]), ["--inject-overflow", a.injected])
        print(f"{'FAIL' if problems else 'ok'}: skipped steps and loss scale follow GradScaler's "
              f"rules for overflows injected at {a.injected}")
        for p in problems[:5]:
            print(f"     {p}")
        return 1 if problems else 0
    if a.what in ("curves", "weights"):
        if len(a.files) != 2:
            ap.error(f"{a.what} needs two files")
        return curves(a) if a.what == "curves" else weights(a)
    if a.what == "keep":
        if not a.bundle:
            ap.error("keep needs --bundle")
        keep(a)
        return 0
    if not a.bundle or not a.out:
        ap.error(f"{a.what} needs --bundle and --out")
    if a.what == "reference":
        reference(a)
        return 0
    return check(a)


if __name__ == "__main__":
    sys.exit(main())
