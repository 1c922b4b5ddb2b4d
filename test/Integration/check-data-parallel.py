# check-data-parallel.py: compares the metrics logs of data parallel runs with a single rank's.
#
#   check-data-parallel.py compare RTOL REF LOG [LOG...]
#       Every LOG must have REF's steps, learning rates, token counts, loss scales and skipped
#       flags exactly, and its loss and gradient norm within RTOL (relative) at every step.
#       Prints, per LOG, the largest relative loss and gradient-norm differences.
#   check-data-parallel.py identical LOG LOG
#       The two logs agree in every field but the wall-clock ones, character for character
#       (a run repeated on the same world size gives the same bits).
#   check-data-parallel.py same-weights CKPT CKPT
#       The two checkpoints hold the same buffers (weights, optimizer state), byte for byte.
#   check-data-parallel.py running-stats RTOL REF CKPT [CKPT...]
#       Every CKPT holds REF's running statistics (the buffers named *running_mean,
#       *running_var, *num_batches_tracked) within RTOL of their largest magnitude; prints how
#       many and the largest relative difference.
#   check-data-parallel.py launch N COMMAND...
#       Starts N copies of COMMAND as torchrun does (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
#       MASTER_PORT: a free port), waits for all (at most 60 s), prints rank 0's stdout, then every
#       rank's stderr and "rank R: exit status S"; exits 1 if any rank failed. As torchrun, once a
#       rank fails the others get a grace period (5 s) and are then killed ("killed by the
#       launcher"), so what the survivors do by themselves is seen.
#   check-data-parallel.py fails SECONDS COMMAND...
#       COMMAND must exit with a non-zero status within SECONDS (it must not hang); prints its
#       output (stdout and stderr) and then "failed within SECONDS s".
import json
import os
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkpoint_sections import sections  # noqa: E402

WALL_CLOCK = ("elapsed_s", "step_ms", "tokens_per_s", "samples_per_s")
EXACT = ("step", "lr", "tokens", "samples", "loss_scale", "skipped")


def fail(message):
    print(f"check-data-parallel: {message}")
    sys.exit(1)


def records(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError) as error:
        fail(f"cannot read {path}: {error}")


def relative(a, b):
    if a == b:
        return 0.0
    return abs(a - b) / max(abs(a), abs(b))


def compare(rtol, reference, logs):
    ref = records(reference)
    if not ref:
        fail(f"{reference} is empty")
    for path in logs:
        run = records(path)
        if len(run) != len(ref):
            fail(f"{path} has {len(run)} steps, {reference} {len(ref)}")
        worst_loss = worst_norm = 0.0
        for a, b in zip(ref, run):
            for key in EXACT:
                if a.get(key) != b.get(key):
                    fail(f"{path} step {a['step']}: {key} {b.get(key)}, the reference has "
                         f"{a.get(key)}")
            worst_loss = max(worst_loss, relative(a["loss"], b["loss"]))
            worst_norm = max(worst_norm, relative(a["grad_norm"], b["grad_norm"]))
        name = path.rsplit("/", 1)[-1]
        print(f"{name}: {len(run)} steps, max relative difference: loss {worst_loss:.2e}, "
              f"grad norm {worst_norm:.2e}")
        if worst_loss > rtol or worst_norm > rtol:
            fail(f"{path} differs from {reference} by more than {rtol}")


def identical(first, second):
    def numeric(path):
        return [{k: v for k, v in r.items() if k not in WALL_CLOCK} for r in records(path)]

    if numeric(first) != numeric(second):
        fail(f"{first} and {second} differ")
    print(f"identical: {len(numeric(first))} steps")


def same_weights(first, second):
    a, b = sections(first), sections(second)
    if a.keys() != b.keys():
        fail(f"{first} and {second} hold different buffers")
    differing = [name for name in a if a[name] != b[name]]
    if differing:
        fail(f"{first} and {second} differ in {len(differing)} buffers, first {differing[0]}")
    print(f"same weights: {len(a)} buffers")


def running_stats(rtol, reference, checkpoints):
    import struct
    names = ("running_mean", "running_var", "num_batches_tracked")
    ref = {k: v for k, v in sections(reference).items() if k.endswith(names)}
    if not ref:
        fail(f"{reference} holds no running statistics")
    worst = 0.0
    for path in checkpoints:
        other = sections(path)
        for name, data in ref.items():
            if name not in other or len(other[name]) != len(data):
                fail(f"{path}: no {name} of {reference}'s size")
            # Float buffers (the count too) are F32 sections.
            a = struct.unpack(f"<{len(data) // 4}f", data)
            b = struct.unpack(f"<{len(data) // 4}f", other[name])
            scale = max(max(abs(x) for x in a), 1e-30)
            difference = max(abs(x - y) for x, y in zip(a, b)) / scale
            if not difference <= rtol:
                fail(f"{path}: {name} differs by {difference:.3g} (relative to its largest "
                     f"value {scale:.3g}), tolerance {rtol:g}")
            worst = max(worst, difference)
    print(f"running statistics: {len(ref)} buffers of {len(checkpoints)} checkpoints within "
          f"{worst:.2g} of {os.path.basename(reference)}'s")


def launch(ranks, command):
    import tempfile
    import time
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    processes, files = [], []
    for rank in range(ranks):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(ranks), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        files.append((out, err))
        processes.append(subprocess.Popen(command, env=env, stdout=out, stderr=err, text=True))
    # As torchrun: when a rank fails, the others get 5 s to end on their own, then are killed.
    deadline, killed = time.time() + 60, set()
    while any(p.poll() is None for p in processes):
        if time.time() > deadline or any(p.poll() not in (None, 0) for p in processes):
            grace = time.time() + 5 if time.time() <= deadline else time.time()
            while time.time() < grace and any(p.poll() is None for p in processes):
                time.sleep(0.05)
            for rank, process in enumerate(processes):
                if process.poll() is None:
                    process.kill()
                    process.wait()
                    killed.add(rank)
            break
        time.sleep(0.05)
    for rank, (out, err) in enumerate(files):
        out.seek(0)
        err.seek(0)
        if rank == 0:
            print(out.read(), end="")
        print(err.read(), end="")
    failed = False
    for rank, process in enumerate(processes):
        status = "killed by the launcher" if rank in killed else f"exit status {process.returncode}"
        print(f"rank {rank}: {status}")
        failed = failed or process.returncode != 0
    sys.exit(1 if failed else 0)


def fails(seconds, command):
    try:
        run = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=seconds)
    except subprocess.TimeoutExpired as expired:
        out = expired.stdout.decode() if isinstance(expired.stdout, bytes) else expired.stdout
        print(out or "")
        fail(f"still running after {seconds} s: {' '.join(command)}")
    print(run.stdout)
    if run.returncode == 0:
        fail(f"exited with status 0: {' '.join(command)}")
    print(f"failed within {seconds:g} s")


if __name__ == "__main__":
    if len(sys.argv) >= 5 and sys.argv[1] == "compare":
        compare(float(sys.argv[2]), sys.argv[3], sys.argv[4:])
    elif len(sys.argv) >= 5 and sys.argv[1] == "running-stats":
        running_stats(float(sys.argv[2]), sys.argv[3], sys.argv[4:])
    elif len(sys.argv) >= 4 and sys.argv[1] == "launch":
        launch(int(sys.argv[2]), sys.argv[3:])
    elif len(sys.argv) >= 4 and sys.argv[1] == "fails":
        fails(float(sys.argv[2]), sys.argv[3:])
    elif len(sys.argv) == 4 and sys.argv[1] == "same-weights":
        same_weights(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "identical":
        identical(sys.argv[2], sys.argv[3])
    else:
        fail("usage: compare RTOL REF LOG... | identical LOG LOG | same-weights CKPT CKPT | "
             "running-stats RTOL REF CKPT... | launch N COMMAND... | fails SECONDS COMMAND...")
