# write-safetensors.py FILE NAME=D0xD1:V,V,... ...: a safetensors file of F32 tensors.
import json
import struct
import sys

header, data = {}, b""
for spec in sys.argv[2:]:
    name, rest = spec.split("=")
    dims, values = rest.split(":")
    shape = [int(d) for d in dims.split("x")] if dims else []
    floats = [float(v) for v in values.split(",")]
    raw = struct.pack("<%df" % len(floats), *floats)
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
    data += raw
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + data)
