# check-resume.py: kills and stops a training executable and checks that resuming it reproduces
# the uninterrupted run exactly.
#
#   check-resume.py kill TRAIN DIR STEPS KILLS [FLAGS...]
#       Runs TRAIN --steps STEPS uninterrupted (the reference), then repeatedly starts it with
#       --checkpoint-every 1 --resume latest and kills it with SIGKILL: the first run half way
#       through writing the checkpoint of step STEPS / 2 (AMPC_INJECT_KILL_WRITING, so at least
#       one kill lands during a write whatever the timing), the others at a random instant (a
#       random step after the newest checkpoint, plus up to 40 ms, so some kills land during
#       checkpoint writes), at least KILLS times in all, each killed run resumed until one
#       finishes on its own. Every
#       finished run's JSONL log must equal the reference's in every field but the wall-clock
#       ones (elapsed_s, step_ms, *_per_s), character for character, and its final checkpoint's
#       buffers must equal the reference's byte for byte. Prints the kill counts.
#   check-resume.py signal TRAIN DIR STEPS SIGNAL [FLAGS...]
#       Sends SIGNAL (INT or TERM) once the log has a third of STEPS records, expects the exit
#       status 128 + the signal number, a checkpoint at the last logged step and the message,
#       then resumes with --resume latest and compares as above.
import os
import random
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkpoint_sections import sections  # noqa: E402

WALL_CLOCK = ("elapsed_s", "step_ms", "tokens_per_s", "samples_per_s")


def fail(message):
    print(f"check-resume: {message}")
    sys.exit(1)


def numeric_fields(path):
    """The log's records without the wall-clock fields, as raw text."""
    records = []
    with open(path) as f:
        for line in f:
            fields = line.strip().strip("{}").split(", ")
            records.append([f for f in fields if f.split(":")[0].strip('"') not in WALL_CLOCK])
    return records


def compare(reference_log, reference_ckpt, log, ckpt, what):
    expected, got = numeric_fields(reference_log), numeric_fields(log)
    if got != expected:
        for i, (a, b) in enumerate(zip(expected, got)):
            if a != b:
                fail(f"{what}: record {i + 1} differs:\n  expected {a}\n  got      {b}")
        fail(f"{what}: {len(got)} records, expected {len(expected)}")
    if sections(ckpt) != sections(reference_ckpt):
        fail(f"{what}: the final checkpoint's buffers differ from the reference's")


def records_in(path):
    """Complete records in the log at \p path (0 when there is none)."""
    try:
        with open(path) as f:
            return f.read().count("\n")
    except OSError:
        return 0


def final_checkpoint(directory, steps):
    return os.path.join(directory, "step-%06d.ckpt" % steps)


def reference(train, root, steps, flags):
    log, ckpt = os.path.join(root, "ref.jsonl"), os.path.join(root, "ref-ckpt")
    subprocess.run([train, "--steps", str(steps), "--quiet", "--log", log, "--checkpoint-dir", ckpt]
                   + flags, check=True, stdout=subprocess.DEVNULL)
    return log, final_checkpoint(ckpt, steps)


def main():
    mode, train, root, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    if mode == "kill":
        kills_wanted, flags = int(sys.argv[5]), sys.argv[6:]
        ref_log, ref_ckpt = reference(train, root, steps, flags)
        rng = random.Random(20240601)
        kills = during_write = trials = 0
        # The arranged kill: half way through the temporary file of step STEPS / 2's checkpoint.
        trials += 1
        directory = os.path.join(root, "run1")
        log = os.path.join(root, "run1.jsonl")
        command = [train, "--steps", str(steps), "--quiet", "--log", log, "--checkpoint-dir",
                   directory, "--checkpoint-every", "1", "--keep", "2", "--resume",
                   "latest"] + flags
        victim = "step-%06d.ckpt" % (steps // 2)
        killed = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env=dict(os.environ, AMPC_INJECT_KILL_WRITING=victim))
        partial = [name for name in os.listdir(directory) if name.startswith("." + victim)]
        if killed.returncode != -signal.SIGKILL or not partial or \
                os.path.exists(os.path.join(directory, victim)):
            fail(f"the arranged kill: status {killed.returncode}, files {os.listdir(directory)}")
        kills += 1
        during_write += 1
        arranged = f"{partial[0]} left half written"
        finished = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if finished.returncode != 0:
            fail(f"resuming after the arranged kill: {finished.stderr.decode()}")
        compare(ref_log, ref_ckpt, log, final_checkpoint(directory, steps), "the arranged kill")
        while kills < kills_wanted:
            trials += 1
            directory = os.path.join(root, f"run{trials}")
            log = os.path.join(root, f"run{trials}.jsonl")
            command = [train, "--steps", str(steps), "--quiet", "--log", log, "--checkpoint-dir",
                       directory, "--checkpoint-every", "1", "--keep", "2", "--resume",
                       "latest"] + flags
            while True:
                # The kill point: a random step after the newest checkpoint, once its record is
                # logged, plus a random fraction of a step and a checkpoint write (5-30 ms each).
                newest = max([int(name[5:11]) for name in os.listdir(directory)
                              if name.startswith("step-")] if os.path.isdir(directory) else [0],
                             default=0)
                # (None: the newest checkpoint is the last step; the run only has to finish.)
                target = rng.randint(newest + 1, steps) if newest < steps else None
                started = time.time_ns()
                process = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                           stderr=subprocess.PIPE)
                # Records the killed run wrote past its checkpoint count only once this run has
                # rewritten the log (its modification time is then newer than the start).
                while target and process.poll() is None and not (
                        records_in(log) >= target and os.stat(log).st_mtime_ns > started):
                    time.sleep(0.001)
                time.sleep(rng.uniform(0, 0.04))
                if target and process.poll() is None:
                    process.send_signal(signal.SIGKILL)
                    process.communicate()
                    kills += 1
                    if os.path.isdir(directory) and any(".tmp-" in name
                                                        for name in os.listdir(directory)):
                        during_write += 1
                    continue
                err = process.communicate()[1]
                if process.returncode != 0:
                    fail(f"run {trials} exited {process.returncode}: {err.decode()}")
                break
            compare(ref_log, ref_ckpt, log, final_checkpoint(directory, steps), f"run {trials}")
        print(f"kill: {kills} SIGKILLs in {trials} runs ({during_write} during a checkpoint "
              f"write, one arranged: {arranged}); every resumed run matches the uninterrupted "
              f"one")
    else:
        name, flags = sys.argv[5], sys.argv[6:]
        number = getattr(signal, "SIG" + name)
        ref_log, ref_ckpt = reference(train, root, steps, flags)
        directory, log = os.path.join(root, "run"), os.path.join(root, "run.jsonl")
        command = [train, "--steps", str(steps), "--quiet", "--log", log, "--checkpoint-dir",
                   directory] + flags
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        while not (os.path.exists(log) and len(open(log).readlines()) >= steps // 3):
            if process.poll() is not None:
                fail("the run ended before the signal")
            time.sleep(0.005)
        process.send_signal(number)
        _, err = process.communicate()
        if process.returncode != 128 + number:
            fail(f"exit status {process.returncode}, expected {128 + number}: {err.decode()}")
        logged = len(open(log).readlines())
        if not os.path.exists(final_checkpoint(directory, logged)):
            fail(f"no checkpoint for step {logged}: {os.listdir(directory)}")
        sys.stdout.write(err.decode())
        subprocess.run(command + ["--resume", "latest"], check=True, stdout=subprocess.DEVNULL)
        compare(ref_log, ref_ckpt, log, final_checkpoint(directory, steps), "resumed run")
        print(f"signal: SIG{name} after step {logged}, exit status {128 + number}; the resumed "
              f"run matches the uninterrupted one")


main()
