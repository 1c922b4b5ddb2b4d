"""Checks that a file is a well-formed 8-bit RGB PNG of the given size: the signature, every
chunk's CRC, the IHDR fields, and that the zlib stream of the IDAT chunks holds one filtered
row per line (argv: path width height)."""
import struct
import sys
import zlib

path, width, height = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data = open(path, "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "bad signature"
offset, chunks, idat = 8, [], b""
while offset < len(data):
    (length,) = struct.unpack(">I", data[offset:offset + 4])
    kind = data[offset + 4:offset + 8]
    body = data[offset + 8:offset + 8 + length]
    (crc,) = struct.unpack(">I", data[offset + 8 + length:offset + 12 + length])
    assert zlib.crc32(kind + body) & 0xFFFFFFFF == crc, "bad CRC in " + kind.decode()
    chunks.append(kind)
    if kind == b"IDAT":
        idat += body
    if kind == b"IHDR":
        w, h, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
        assert (w, h, depth, color, interlace) == (width, height, 8, 2, 0), (w, h, depth, color)
    offset += 12 + length
assert chunks[0] == b"IHDR" and chunks[-1] == b"IEND", chunks
raw = zlib.decompress(idat)
assert len(raw) == height * (1 + 3 * width), len(raw)
assert all(raw[row * (1 + 3 * width)] == 0 for row in range(height))
# Not blank: the curves and the budget line are drawn.
assert len(set(raw[i:i + 3] for i in range(1, len(raw), 3))) > 3
print("png ok: %dx%d, %d bytes" % (width, height, len(data)))
