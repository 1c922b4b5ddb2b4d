"""checkpoint_sections.py - the buffers of an ampc checkpoint file, for the tests' scripts.

sections(path) reads a checkpoint (docs/checkpoint-format.md) and returns its sections other
than the metadata as name -> raw bytes; a file that is not a complete checkpoint is an error.
"""

import struct


def sections(path):
    data = open(path, "rb").read()
    if data[:8] != b"AMPCCKPT" or data[-4:] != b"DONE":
        raise ValueError(f"{path} is not a complete checkpoint")
    (count,) = struct.unpack_from("<I", data, 12)
    at, found = 16, {}
    for _ in range(count):
        (length,) = struct.unpack_from("<I", data, at)
        name = data[at + 4:at + 4 + length].decode()
        at += 4 + length + 1
        (rank,) = struct.unpack_from("<I", data, at)
        at += 4 + 8 * rank
        offset, size = struct.unpack_from("<QQ", data, at)
        at += 16
        if name != "meta":
            found[name] = data[offset:offset + size]
    return found
