//===- FuzzCheckpoint.cpp - Fuzz target: checkpoint files -------------------===//
//
// The input is a checkpoint file (docs/checkpoint-format.md), as --resume reads one:
// decodeCheckpoint checks the magic, version, end marker and CRC-32, then the section table.
// Random mutations rarely keep the CRC right, so each input is decoded twice: as given, and
// with its CRC recomputed, which lets mutations of the table and sections reach the parser. A
// checkpoint that is accepted must encode to bytes that decode to the same encoding again.
// CheckpointError is the expected answer to bad bytes.
//
//===----------------------------------------------------------------------===//

#include "runtime/train/Checkpoint.h"

#include <cstdio>
#include <cstdlib>

using namespace ampc;

namespace {

/// The header (magic, version, count) and trailer (CRC-32, end marker) sizes.
constexpr size_t kHeaderBytes = 16, kTrailerBytes = 8;

void decode(const std::string &bytes) {
  train::Checkpoint decoded;
  try {
    decoded = train::decodeCheckpoint(bytes, "fuzz.ckpt");
  } catch (const train::CheckpointError &) {
    return;
  }
  const std::string first = train::encodeCheckpoint(decoded);
  if (train::encodeCheckpoint(train::decodeCheckpoint(first, "again.ckpt")) != first) {
    std::fprintf(stderr, "ampc fuzz: an accepted checkpoint does not survive "
                         "encodeCheckpoint/decodeCheckpoint\n");
    std::abort();
  }
  // What resuming asks of every checkpoint.
  decoded.valueOr("step", "");
  decoded.find("wte");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string bytes(reinterpret_cast<const char *>(data), size);
  decode(bytes);
  if (bytes.size() >= kHeaderBytes + kTrailerBytes) {
    const size_t body = bytes.size() - kTrailerBytes;
    const uint32_t crc = train::crc32Of(bytes.substr(0, body));
    for (int i = 0; i < 4; ++i)
      bytes[body + i] = static_cast<char>((crc >> (8 * i)) & 0xff);
    decode(bytes);
  }
  return 0;
}
