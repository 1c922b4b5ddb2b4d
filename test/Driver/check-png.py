"""Checks that a file is a well-formed 8-bit RGB or RGBA PNG of the given size whose pixels are
not all one colour: the signature, every chunk's CRC, the IHDR fields, and the pixel rows of the
IDAT chunks' zlib stream, unfiltered (argv: path width height)."""
import struct
import sys
import zlib

path, width, height = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data = open(path, "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "bad signature"
offset, chunks, idat, channels = 8, [], b"", 0
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
        assert (w, h, depth, interlace) == (width, height, 8, 0), (w, h, depth, interlace)
        assert color in (2, 6), "colour type %d" % color
        channels = 3 if color == 2 else 4
    offset += 12 + length
assert chunks[0] == b"IHDR" and chunks[-1] == b"IEND", chunks
raw = zlib.decompress(idat)
stride = channels * width
assert len(raw) == height * (1 + stride), len(raw)

# Undo the per-row filters (PNG specification, section 9).
rows, previous = [], bytearray(stride)
for y in range(height):
    kind, row = raw[y * (1 + stride)], bytearray(raw[y * (1 + stride) + 1:(y + 1) * (1 + stride)])
    assert kind <= 4, "filter type %d" % kind
    if kind == 2:
        row = bytearray((a + b) & 0xFF for a, b in zip(row, previous))
    elif kind != 0:
        for i in range(stride):
            left = row[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                row[i] = (row[i] + left) & 0xFF
            elif kind == 3:
                row[i] = (row[i] + (left + up) // 2) & 0xFF
            else:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                predictor = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                row[i] = (row[i] + predictor) & 0xFF
    rows.append(bytes(row))
    previous = row
colours = set()
for row in rows:
    colours.update(row[i:i + channels] for i in range(0, stride, channels))
# Not blank: the curves, axes and text are drawn.
assert len(colours) > 3, "%d colours" % len(colours)
print("png ok: %dx%d, %d bytes" % (width, height, len(data)))
