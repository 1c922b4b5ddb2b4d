#!/usr/bin/env python3
"""weights-tool.py - reads, edits and compares safetensors files in tests, with the standard
library only (the format: an 8-byte little-endian header length, a JSON header, the data).

    weights-tool.py list FILE                  name dtype shape per tensor, sorted
    weights-tool.py drop FILE NAME OUT         OUT is FILE without tensor NAME
    weights-tool.py add FILE NAME OUT          OUT is FILE plus a 1-element F32 tensor NAME
    weights-tool.py reshape FILE NAME OUT      OUT is FILE with NAME's shape flattened to 1-D
    weights-tool.py to-int FILE NAME OUT       OUT is FILE with NAME stored as I32
    weights-tool.py same A B                   exit 0 when every tensor's values are equal
    weights-tool.py close A B TOL              exit 0 when every value is within TOL of the
                                               other's
"""

import json
import math
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from safetensors_io import read, values, write  # noqa: E402


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "list":
        meta, tensors = read(args[0])
        for name in sorted(tensors):
            dtype, shape, _ = tensors[name]
            print(name, dtype, shape)
        print("metadata", json.dumps(meta, sort_keys=True))
        return 0
    if cmd in ("drop", "add", "reshape", "to-int"):
        meta, tensors = read(args[0])
        name, out = args[1], args[2]
        if cmd == "drop":
            del tensors[name]
        elif cmd == "add":
            tensors[name] = ("F32", [1], struct.pack("<f", 1.0))
        elif cmd == "reshape":
            dtype, shape, raw = tensors[name]
            tensors[name] = (dtype, [math.prod(shape)], raw)
        else:
            dtype, shape, raw = tensors[name]
            tensors[name] = ("I32", shape, raw)
        write(out, tensors, meta)
        return 0
    if cmd in ("same", "close"):
        _, a = read(args[0])
        _, b = read(args[1])
        tol = float(args[2]) if cmd == "close" else 0.0
        if sorted(a) != sorted(b):
            print(f"tensors differ: {sorted(set(a) ^ set(b))}")
            return 1
        worst = 0.0
        for name in sorted(a):
            va, vb = values(a[name][0], a[name][2]), values(b[name][0], b[name][2])
            if a[name][1] != b[name][1] or len(va) != len(vb):
                print(f"{name}: shape {a[name][1]} vs {b[name][1]}")
                return 1
            diff = max([abs(x - y) for x, y in zip(va, vb)] + [0.0])
            worst = max(worst, diff)
            if not diff <= tol:
                print(f"{name}: values differ by {diff:.2e} (> {tol:g})")
                return 1
        print(f"{cmd}: {len(a)} tensors, largest difference {worst:.2e}")
        return 0
    sys.exit(f"weights-tool: unknown command {cmd}")


sys.exit(main())
