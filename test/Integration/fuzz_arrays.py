"""fuzz_arrays.py TRAIN DATA.npz WORK_DIR COUNT: mutates a NumPy archive COUNT times
(deterministically) and runs `TRAIN --data MUTANT --steps 1` on each. Half the mutants change
the archive's bytes (flipped bits, overwritten runs, truncations, duplicated spans: the zip
records and CRCs); the other half rewrite a valid archive around a mutated member (its .npy
header's dtype, order or shape, its data cut short or grown), so the .npy parser and the checks
of each array against its input see them. Every run must exit with status 0 (the data still
fits) or 1 with a one-line error; a crash, a signal or any other status fails, naming the mutant.
"""

import io
import os
import random
import subprocess
import sys
import zipfile

train, data, work, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
original = open(data, "rb").read()
members = {}
with zipfile.ZipFile(data) as archive:
    for name in archive.namelist():
        members[name] = archive.read(name)
generator = random.Random(int(os.environ.get("FUZZ_SEED", "4321")))


def mutate_bytes(raw):
    data = bytearray(raw)
    kind = generator.randrange(4)
    if kind == 0:
        for _ in range(generator.randint(1, 8)):
            data[generator.randrange(len(data))] ^= 1 << generator.randrange(8)
    elif kind == 1:
        start = generator.randrange(len(data))
        for j in range(start, min(len(data), start + generator.randint(1, 16))):
            data[j] = generator.randrange(256)
    elif kind == 2:
        data = data[:generator.randrange(len(data))]
    else:
        start = generator.randrange(len(data))
        span = data[start:start + generator.randint(1, 64)]
        at = generator.randrange(len(data))
        data[at:at] = span
    return bytes(data)


def mutate_member(raw):
    """A mutated .npy image: its header dict edited, or its bytes mutated past the magic."""
    end = raw.index(b"\n") + 1
    header, body = raw[:end].decode("latin-1"), raw[end:]
    edits = [("<f4", "<f8"), ("<f4", ">f4"), ("<f4", "<U4"), ("<i8", "<f4"), ("<i8", "|b1"),
             ("<i8", "<u8"), ("False", "True"), ("(", "(0, "), ("(", "(99999999999999, "),
             (",)", ", 3)"), ("'shape'", "'shap'"), ("'descr': '", "'descr': '|O"),
             ("}", "")]
    kind = generator.randrange(3)
    if kind == 0:
        old, new = generator.choice(edits)
        header = header.replace(old, new, 1)
    elif kind == 1:
        body = body[:generator.randrange(len(body) + 1)] if generator.random() < 0.5 \
            else body + bytes(generator.randrange(1, 64))
    else:
        return raw[:10] + mutate_bytes(raw[10:])
    return header.encode("latin-1") + body


statuses = {0: 0, 1: 0}
for i in range(count):
    if i % 2 == 0:
        mutant = mutate_bytes(original)
    else:
        target = generator.choice(sorted(members))
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            for name, raw in members.items():
                archive.writestr(name, mutate_member(raw) if name == target else raw)
        mutant = buffer.getvalue()
    path = os.path.join(work, "mutant-%d.npz" % i)
    with open(path, "wb") as f:
        f.write(mutant)
    run = subprocess.run([train, "--data", path, "--steps", "1", "--device", "cpu", "--quiet"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    errors = run.stderr.decode(errors="replace").strip().splitlines()
    if run.returncode not in statuses or (run.returncode == 1 and len(errors) != 1):
        print("FAIL: mutant %d (%s) exited with status %d: %s"
              % (i, path, run.returncode, "\n".join(errors[-3:])))
        sys.exit(1)
    statuses[run.returncode] += 1
    os.remove(path)
print("ok: %d mutants, %d trained, %d rejected with one error line"
      % (count, statuses[0], statuses[1]))
