//===- SafeTensors.cpp - read and write safetensors files -----------------===//
//
// The header is a flat JSON object: {"NAME": {"dtype": "F32", "shape": [2, 3],
// "data_offsets": [begin, end]}, ..., "__metadata__": {"key": "value"}}. This
// reader parses exactly that shape of JSON (strings, integers, arrays and
// objects) and rejects anything else with the byte offset of the problem.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/SafeTensors.h"
#include "runtime/numerics/Float16.h"

#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <sstream>
#include <unistd.h>

namespace ampc::safetensors {

namespace {

/// Bytes per element of a dtype name; 0 for an unknown name.
size_t elementBytes(const std::string &dtype) {
  if (dtype == "F64" || dtype == "I64")
    return 8;
  if (dtype == "F32" || dtype == "I32")
    return 4;
  if (dtype == "F16" || dtype == "BF16")
    return 2;
  if (dtype == "U8" || dtype == "BOOL")
    return 1;
  return 0;
}

/// The header's JSON, parsed by recursive descent into the few shapes it has.
class HeaderParser {
public:
  HeaderParser(const std::string &text, const std::string &file) : text(text), file(file) {}

  [[noreturn]] void fail(const std::string &cause) const {
    throw Error(file + ": bad safetensors header at byte " + std::to_string(8 + pos) + ": " +
                cause);
  }

  void skipSpace() {
    while (pos < text.size() && std::strchr(" \t\r\n", text[pos]))
      ++pos;
  }
  bool peek(char c) {
    skipSpace();
    return pos < text.size() && text[pos] == c;
  }
  void expect(char c) {
    if (!peek(c))
      fail(std::string("expected '") + c + "'");
    ++pos;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (pos < text.size() && text[pos] != '"') {
      char c = text[pos++];
      if (c == '\\') {
        if (pos >= text.size())
          fail("unterminated string");
        char e = text[pos++];
        switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'u':
          if (pos + 4 > text.size())
            fail("bad \\u escape");
          out += static_cast<char>(std::stoi(text.substr(pos, 4), nullptr, 16) & 0x7f);
          pos += 4;
          break;
        default:
          out += e;
        }
      } else {
        out += c;
      }
    }
    if (pos >= text.size())
      fail("unterminated string");
    ++pos;
    return out;
  }
  int64_t integer() {
    skipSpace();
    size_t start = pos;
    while (pos < text.size() && (std::isdigit(static_cast<unsigned char>(text[pos]))))
      ++pos;
    if (start == pos || pos - start > 18)
      fail("expected a non-negative integer");
    return std::stoll(text.substr(start, pos - start));
  }
  std::vector<int64_t> integers() {
    std::vector<int64_t> out;
    expect('[');
    if (peek(']')) {
      ++pos;
      return out;
    }
    do {
      out.push_back(integer());
    } while (peek(',') && ++pos);
    expect(']');
    return out;
  }
  /// Calls \p member(key) for each member of an object.
  template <typename F> void object(F member) {
    expect('{');
    if (peek('}')) {
      ++pos;
      return;
    }
    do {
      std::string key = string();
      expect(':');
      member(key);
    } while (peek(',') && ++pos);
    expect('}');
  }
  void end() {
    skipSpace();
    if (pos != text.size())
      fail("unexpected data after the header object");
  }

private:
  const std::string &text;
  const std::string &file;
  size_t pos = 0;
};

void appendLittleEndian(std::string &out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(static_cast<char>(value >> (8 * i)));
}

uint64_t readLittleEndian(const char *bytes, int count) {
  uint64_t value = 0;
  for (int i = 0; i < count; ++i)
    value |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  return value;
}

std::string quoted(const std::string &text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

} // namespace

const Tensor *File::find(const std::string &name) const {
  for (const Tensor &tensor : tensors)
    if (tensor.name == name)
      return &tensor;
  return nullptr;
}

File decode(const std::string &bytes, const std::string &file) {
  if (bytes.size() < 8)
    throw Error(file + ": not a safetensors file (shorter than its 8-byte header length)");
  const uint64_t headerLength = readLittleEndian(bytes.data(), 8);
  if (headerLength > bytes.size() - 8)
    throw Error(file + ": not a safetensors file (header length " + std::to_string(headerLength) +
                " exceeds the file's " + std::to_string(bytes.size()) + " bytes)");
  const std::string header = bytes.substr(8, headerLength);
  const size_t dataBegin = 8 + headerLength;
  const size_t dataSize = bytes.size() - dataBegin;
  HeaderParser parser(header, file);
  File result;
  parser.object([&](const std::string &key) {
    if (key == "__metadata__") {
      parser.object([&](const std::string &name) { result.metadata[name] = parser.string(); });
      return;
    }
    Tensor tensor;
    tensor.name = key;
    std::vector<int64_t> offsets;
    bool haveShape = false;
    parser.object([&](const std::string &field) {
      if (field == "dtype")
        tensor.dtype = parser.string();
      else if (field == "shape")
        tensor.shape = parser.integers(), haveShape = true;
      else if (field == "data_offsets")
        offsets = parser.integers();
      else
        parser.fail("unknown field '" + field + "' of tensor '" + key + "'");
    });
    const size_t width = elementBytes(tensor.dtype);
    if (!width)
      throw Error(file + ": tensor '" + key + "' has unknown dtype '" + tensor.dtype + "'");
    if (!haveShape || offsets.size() != 2)
      throw Error(file + ": tensor '" + key + "' needs a shape and two data_offsets");
    uint64_t elements = 1;
    for (int64_t dim : tensor.shape) {
      if (dim < 0 || (dim && elements > (uint64_t(1) << 50) / dim))
        throw Error(file + ": tensor '" + key + "' has a bad shape");
      elements *= dim;
    }
    const uint64_t begin = offsets[0], end = offsets[1];
    if (begin > end || end > dataSize)
      throw Error(file + ": tensor '" + key + "' lies outside the file's data (bytes " +
                  std::to_string(begin) + " to " + std::to_string(end) + " of " +
                  std::to_string(dataSize) + ")");
    if (end - begin != elements * width)
      throw Error(file + ": tensor '" + key + "' has " + std::to_string(end - begin) +
                  " bytes but its shape and dtype need " + std::to_string(elements * width));
    if (result.find(key))
      throw Error(file + ": tensor '" + key + "' appears twice");
    tensor.bytes = bytes.substr(dataBegin + begin, end - begin);
    result.tensors.push_back(std::move(tensor));
  });
  parser.end();
  return result;
}

File readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(path + ": cannot read the file");
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  return decode(bytes, path);
}

std::string encode(const File &file) {
  std::string header = "{";
  bool first = true;
  if (!file.metadata.empty()) {
    header += "\"__metadata__\":{";
    for (auto it = file.metadata.begin(); it != file.metadata.end(); ++it)
      header +=
          (it == file.metadata.begin() ? "" : ",") + quoted(it->first) + ":" + quoted(it->second);
    header += "}";
    first = false;
  }
  uint64_t offset = 0;
  for (const Tensor &tensor : file.tensors) {
    header += (first ? "" : ",") + quoted(tensor.name) + ":{\"dtype\":" + quoted(tensor.dtype) +
              ",\"shape\":[";
    for (size_t i = 0; i < tensor.shape.size(); ++i)
      header += (i ? "," : "") + std::to_string(tensor.shape[i]);
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + tensor.bytes.size()) + "]}";
    offset += tensor.bytes.size();
    first = false;
  }
  header += "}";
  while (header.size() % 8)
    header += ' ';
  std::string out;
  appendLittleEndian(out, header.size(), 8);
  out += header;
  for (const Tensor &tensor : file.tensors)
    out += tensor.bytes;
  return out;
}

void writeFile(const std::string &path, const File &file) {
  const std::string bytes = encode(file);
  const std::string temporary = path + ".tmp";
  int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    throw Error(path + ": cannot write the file: " + std::strerror(errno));
  size_t written = 0;
  while (written < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n <= 0) {
      std::string cause = std::strerror(errno);
      ::close(fd);
      std::remove(temporary.c_str());
      throw Error(path + ": cannot write the file: " + cause);
    }
    written += n;
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0 || std::rename(temporary.c_str(), path.c_str())) {
    std::remove(temporary.c_str());
    throw Error(path + ": cannot write the file: " + std::strerror(errno));
  }
}

std::vector<float> toFloats(const Tensor &tensor) {
  const size_t width = elementBytes(tensor.dtype);
  if (!width || tensor.dtype[0] != 'F' && tensor.dtype != "BF16")
    throw Error("tensor '" + tensor.name + "' has dtype " + tensor.dtype +
                ", not a float dtype (F32, F16, BF16, F64)");
  const size_t count = tensor.bytes.size() / width;
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t raw = readLittleEndian(tensor.bytes.data() + i * width, width);
    if (tensor.dtype == "F32")
      values[i] = numerics::bitsToFloat(static_cast<uint32_t>(raw));
    else if (tensor.dtype == "F64") {
      double value;
      std::memcpy(&value, &raw, 8);
      values[i] = static_cast<float>(value);
    } else if (tensor.dtype == "BF16")
      values[i] = numerics::bf16BitsToFloat(static_cast<uint16_t>(raw));
    else
      values[i] = numerics::f16BitsToFloat(static_cast<uint16_t>(raw));
  }
  return values;
}

Tensor fromFloats(std::string name, std::vector<int64_t> shape, const std::vector<float> &values,
                  const std::string &dtype) {
  Tensor tensor{std::move(name), dtype, std::move(shape), {}};
  for (float value : values) {
    if (dtype == "F32")
      appendLittleEndian(tensor.bytes, numerics::floatToBits(value), 4);
    else if (dtype == "BF16")
      appendLittleEndian(tensor.bytes, numerics::floatToBF16Bits(value), 2);
    else if (dtype == "F16")
      appendLittleEndian(tensor.bytes, numerics::floatToF16Bits(value), 2);
    else
      throw Error("tensor '" + tensor.name + "': fromFloats writes F32, BF16 or F16, not " + dtype);
  }
  return tensor;
}

} // namespace ampc::safetensors
