//===- ByteCodec.h - Byte writer and checked byte reader --------*- C++ -*-===//
//
// The two primitives the binary plan encoding (docs/plan-format.md) is written
// and read with. ByteWriter appends fixed-width little-endian integers, IEEE
// floats, counted strings and raw bytes to a byte vector, whatever the host's
// byte order. ByteReader decodes the same fields from a range of a loaded file
// with a bounds check on every read, so a truncated or corrupted plan fails as
// one PlanError naming what was being read instead of reading past the end or
// allocating an absurd amount. Used by the plan file codec (PlanIO.cpp) and the
// device program's section (DeviceProgramCodec.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_PLAN_BYTECODEC_H
#define AMPC_RUNTIME_PLAN_BYTECODEC_H

#include "runtime/plan/Plan.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace ampc::plan::detail {

/// Appends little-endian fields to a byte vector.
class ByteWriter {
public:
  void u8(uint8_t value) { bytes.push_back(value); }
  void u16(uint16_t value) { fixed(value, 2); }
  void u32(uint32_t value) { fixed(value, 4); }
  void u64(uint64_t value) { fixed(value, 8); }
  void i64(int64_t value) { fixed(static_cast<uint64_t>(value), 8); }
  void f32(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    u32(bits);
  }
  void f64(double value) {
    uint64_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    u64(bits);
  }
  void raw(const void *data, size_t size) {
    const auto *begin = static_cast<const uint8_t *>(data);
    bytes.insert(bytes.end(), begin, begin + size);
  }
  /// A u32 byte count, then the bytes.
  void string(const std::string &text) {
    u32(checkedCount(text.size(), "string"));
    raw(text.data(), text.size());
  }
  /// A u32 element count for a list of \p count elements.
  void count(size_t count) { u32(checkedCount(count, "list")); }

  std::vector<uint8_t> bytes;

private:
  void fixed(uint64_t value, int size) {
    for (int i = 0; i < size; ++i)
      bytes.push_back(static_cast<uint8_t>(value >> (8 * i)));
  }
  static uint32_t checkedCount(size_t count, const char *what) {
    if (count > UINT32_MAX)
      throw PlanError(std::string("cannot write plan: a ") + what + " of " + std::to_string(count) +
                      " elements exceeds the format's 32-bit count");
    return static_cast<uint32_t>(count);
  }
};

/// Decodes little-endian fields from [begin, end) of the file, with a bounds
/// check on every read; `context` names what is being read for diagnostics.
class ByteReader {
public:
  ByteReader(const uint8_t *file, size_t begin, size_t end, std::string context)
      : file(file), offset(begin), end(end), context(std::move(context)) {}

  uint8_t u8(const char *what) { return static_cast<uint8_t>(fixed(1, what)); }
  uint16_t u16(const char *what) { return static_cast<uint16_t>(fixed(2, what)); }
  uint32_t u32(const char *what) { return static_cast<uint32_t>(fixed(4, what)); }
  uint64_t u64(const char *what) { return fixed(8, what); }
  int64_t i64(const char *what) { return static_cast<int64_t>(fixed(8, what)); }
  float f32(const char *what) {
    uint32_t bits = static_cast<uint32_t>(fixed(4, what));
    float value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
  }
  double f64(const char *what) {
    uint64_t bits = fixed(8, what);
    double value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
  }
  std::string string(const char *what) {
    uint32_t size = u32(what);
    need(size, what);
    std::string text(reinterpret_cast<const char *>(file + offset), size);
    offset += size;
    return text;
  }
  /// A u32 element count, checked against the bytes left: each element
  /// occupies at least \p minElementBytes, so a corrupted count fails here
  /// instead of allocating gigabytes.
  uint32_t count(const char *what, size_t minElementBytes) {
    uint32_t count = u32(what);
    if (minElementBytes && count > remaining() / minElementBytes)
      fail(std::string(what) + " " + std::to_string(count) + " needs at least " +
           std::to_string(count * minElementBytes) + " bytes, but only " +
           std::to_string(remaining()) + " remain");
    return count;
  }
  void bytesInto(std::vector<uint8_t> &bytes, uint64_t size, const char *what) {
    need(size, what);
    bytes.assign(file + offset, file + offset + size);
    offset += size;
  }
  size_t remaining() const { return end - offset; }
  size_t position() const { return offset; }
  void skip(size_t size) { offset += size; }

  [[noreturn]] void fail(const std::string &message) const {
    throw PlanError("malformed plan: " + context + ": " + message);
  }

private:
  void need(uint64_t size, const char *what) const {
    if (size > remaining())
      throw PlanError("plan truncated: " + context + ": " + what + " needs " +
                      std::to_string(size) + " bytes at offset " + std::to_string(offset) +
                      ", only " + std::to_string(remaining()) + " left");
  }
  uint64_t fixed(int size, const char *what) {
    need(size, what);
    uint64_t value = 0;
    for (int i = 0; i < size; ++i)
      value |= static_cast<uint64_t>(file[offset + i]) << (8 * i);
    offset += size;
    return value;
  }

  const uint8_t *file;
  size_t offset;
  size_t end;
  std::string context;
};

/// \p code as an \p Enum whose codes are [0, \p limit); a malformed-plan
/// error naming \p what otherwise.
template <typename Enum>
Enum decodeEnum(ByteReader &in, uint64_t code, uint64_t limit, const char *what) {
  if (code >= limit)
    in.fail(std::string("bad ") + what + " code " + std::to_string(code));
  return static_cast<Enum>(code);
}

} // namespace ampc::plan::detail

#endif // AMPC_RUNTIME_PLAN_BYTECODEC_H
