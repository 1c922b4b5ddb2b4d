"""fuzz_onnx.py AMPC MODEL.onnx WORK_DIR COUNT [ARGS...]: mutates MODEL.onnx COUNT times
(deterministically: flipped bytes, overwritten runs, truncations, duplicated spans) and runs
`AMPC verify` on each mutant with ARGS. Every run must exit with status 0 (the mutant still is a
model) or 1 (a reported error): a crash, a signal or any other status fails, naming the mutant.
"""

import os
import random
import subprocess
import sys

ampc, model, work, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
extra = sys.argv[5:]
original = open(model, "rb").read()
generator = random.Random(1234)
statuses = {0: 0, 1: 0}
for i in range(count):
    data = bytearray(original)
    kind = i % 4
    if kind == 0:  # flip a few bits
        for _ in range(generator.randint(1, 8)):
            data[generator.randrange(len(data))] ^= 1 << generator.randrange(8)
    elif kind == 1:  # overwrite a run with random bytes
        start = generator.randrange(len(data))
        for j in range(start, min(len(data), start + generator.randint(1, 16))):
            data[j] = generator.randrange(256)
    elif kind == 2:  # truncate
        data = data[:generator.randrange(len(data))]
    else:  # duplicate a span somewhere else
        start = generator.randrange(len(data))
        span = data[start:start + generator.randint(1, 64)]
        at = generator.randrange(len(data))
        data[at:at] = span
    path = os.path.join(work, "mutant-%d.onnx" % i)
    with open(path, "wb") as f:
        f.write(data)
    status = subprocess.run([ampc, "verify", path] + extra, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, timeout=60).returncode
    if status not in statuses:
        print("FAIL: mutant %d (%s) exited with status %d" % (i, path, status))
        sys.exit(1)
    statuses[status] += 1
    os.remove(path)
print("ok: %d mutants, %d imported, %d rejected with an error" % (count, statuses[0], statuses[1]))
