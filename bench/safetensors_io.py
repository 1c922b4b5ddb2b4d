"""safetensors_io.py - safetensors files with the standard library only (the scripts run where the
safetensors package is not installed: Debian's python3, the GPU machines).

The format: an 8-byte little-endian header length, a JSON header {"__metadata__": {...}, name:
{"dtype", "shape", "data_offsets": [begin, end]}}, padded with spaces to 8 bytes, then the data.
ampc's training executables read and write it (--init-from, --export-weights, ampc eval
--weights/--grads) with tensors named as the model's parameters.

    metadata, tensors = read(path)         # tensors: {name: (dtype, shape, raw bytes)}, file order
    values(dtype, raw)                     # F32/F16/BF16/F64 bytes as a list of floats
    write(path, tensors, metadata=None)    # tensors as read returns them
"""

import json
import struct


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", {}) or {}
    tensors = {}
    for name, entry in sorted(header.items(), key=lambda item: item[1]["data_offsets"][0]):
        begin, end = entry["data_offsets"]
        tensors[name] = (entry["dtype"], entry["shape"], data[8 + n + begin:8 + n + end])
    return metadata, tensors


def values(dtype, raw):
    if dtype == "F32":
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))
    if dtype == "F64":
        return list(struct.unpack(f"<{len(raw) // 8}d", raw))
    if dtype == "F16":
        return list(struct.unpack(f"<{len(raw) // 2}e", raw))
    if dtype == "BF16":
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0]
                for h in struct.unpack(f"<{len(raw) // 2}H", raw)]
    raise ValueError(f"cannot read {dtype} values as floats")


def write(path, tensors, metadata=None):
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
