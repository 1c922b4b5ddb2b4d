//===- SafeTensors.cpp - Reading and writing the safetensors format -------===//
//
// The header is JSON, parsed and written with nlohmann::json (header-only,
// Debian's nlohmann-json3-dev); every offset is checked before a byte is
// copied, so a truncated or hostile file is an Error, never a crash.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/SafeTensors.h"

#include "runtime/numerics/Float16.h"
#include "runtime/plan/FileIO.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <set>

namespace ampc::safetensors {

namespace {

/// Headers are written in the tensors' order (ordered_json) and parsed into std::map-backed
/// objects: ordered_json looks keys up by a linear scan, which makes parsing a header of n
/// entries take n^2 steps, hours for one of the 100 MB a header may have. The order the
/// tensors are kept in comes from their offsets, not from the header.
using Json = nlohmann::ordered_json;
using ParsedJson = nlohmann::json;

/// Headers larger than this are refused (the format's own limit is 100 MB).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

[[noreturn]] void fail(const std::string &file, const std::string &cause) {
  throw Error(file + ": " + cause);
}

uint64_t readU64(const std::string &bytes) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i)
    value |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  return value;
}

/// A non-negative JSON integer, or fail naming \p what.
uint64_t integer(const ParsedJson &value, const std::string &file, const std::string &what) {
  if (!value.is_number_unsigned())
    fail(file, what + " is not a non-negative integer");
  return value.get<uint64_t>();
}

/// The tensor \p entry describes, without its bytes; its [begin, end) offsets, checked to lie
/// inside the \p available data bytes, are appended to \p ranges.
Tensor decodeEntry(const std::string &name, const ParsedJson &entry, uint64_t available,
                   const std::string &file, std::vector<std::pair<uint64_t, uint64_t>> &ranges) {
  const std::string where = "tensor '" + name + "'";
  if (!entry.is_object())
    fail(file, where + " is not a JSON object");
  for (const char *key : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(key))
      fail(file, where + " has no \"" + key + "\"");
  Tensor tensor;
  tensor.name = name;
  if (!entry["dtype"].is_string())
    fail(file, where + ": \"dtype\" is not a string");
  tensor.dtype = entry["dtype"].get<std::string>();
  const size_t width = elementBytes(tensor.dtype);
  if (width == 0)
    fail(file, where + " has the unknown dtype '" + tensor.dtype + "'");
  if (!entry["shape"].is_array())
    fail(file, where + ": \"shape\" is not an array");
  uint64_t count = 1;
  for (const ParsedJson &dim : entry["shape"]) {
    const uint64_t size = integer(dim, file, where + ": a dimension");
    if (size > (1ull << 40) || (size && count > (1ull << 40) / size))
      fail(file, where + " has an impossibly large shape");
    count *= size;
    tensor.shape.push_back(static_cast<int64_t>(size));
  }
  const ParsedJson &offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2)
    fail(file, where + ": \"data_offsets\" is not [begin, end]");
  const uint64_t begin = integer(offsets[0], file, where + ": data_offsets[0]");
  const uint64_t end = integer(offsets[1], file, where + ": data_offsets[1]");
  if (begin > end || end > available)
    fail(file, where + " has data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                   "] outside the " + std::to_string(available) +
                   " data bytes (a truncated file?)");
  if (end - begin != count * width)
    fail(file, where + " has " + std::to_string(end - begin) + " bytes for shape " +
                   formatShape(tensor.shape) + " of " + tensor.dtype + " (" +
                   std::to_string(count * width) + " expected)");
  ranges.emplace_back(begin, end);
  return tensor;
}

} // namespace

const Tensor *File::find(const std::string &name) const {
  for (const Tensor &tensor : tensors)
    if (tensor.name == name)
      return &tensor;
  return nullptr;
}

size_t elementBytes(const std::string &dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64")
    return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32")
    return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16")
    return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL")
    return 1;
  return 0;
}

std::string formatShape(const std::vector<int64_t> &shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

File decode(const std::string &bytes, const std::string &file) {
  if (bytes.size() < 8)
    fail(file, "not a safetensors file: " + std::to_string(bytes.size()) +
                   " bytes, shorter than the 8-byte header length");
  const uint64_t headerBytes = readU64(bytes);
  if (headerBytes > kMaxHeaderBytes || headerBytes > bytes.size() - 8)
    fail(file, "not a safetensors file: its header length " + std::to_string(headerBytes) +
                   " exceeds the file's " + std::to_string(bytes.size()) + " bytes");
  ParsedJson header;
  try {
    header =
        ParsedJson::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<int64_t>(headerBytes));
  } catch (const ParsedJson::exception &error) {
    fail(file,
         std::string("not a safetensors file: its header is not JSON (") + error.what() + ")");
  }
  if (!header.is_object())
    fail(file, "not a safetensors file: its header is not a JSON object");
  File result;
  const uint64_t dataStart = 8 + headerBytes;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto &[name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object())
        fail(file, "\"__metadata__\" is not a JSON object");
      for (const auto &[key, value] : entry.items()) {
        if (!value.is_string())
          fail(file, "metadata '" + key + "' is not a string");
        result.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    result.tensors.push_back(decodeEntry(name, entry, bytes.size() - dataStart, file, ranges));
  }
  // nlohmann keeps the last of two equal keys; the file must not have them.
  std::set<std::string> names;
  for (const Tensor &tensor : result.tensors)
    if (!names.insert(tensor.name).second)
      fail(file, "tensor '" + tensor.name + "' appears twice");
  std::vector<std::pair<uint64_t, uint64_t>> sorted = ranges;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i].first < sorted[i - 1].second)
      fail(file, "two tensors' data_offsets overlap");
  // Only ranges inside the data that do not overlap are copied: at most the file's size in all,
  // however many entries name the same bytes.
  for (size_t i = 0; i < result.tensors.size(); ++i)
    result.tensors[i].bytes =
        bytes.substr(dataStart + ranges[i].first, ranges[i].second - ranges[i].first);
  // File order is data order.
  std::vector<size_t> order(result.tensors.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return ranges[a].first < ranges[b].first; });
  std::vector<Tensor> tensors;
  tensors.reserve(order.size());
  for (size_t i : order)
    tensors.push_back(std::move(result.tensors[i]));
  result.tensors = std::move(tensors);
  return result;
}

File readFile(const std::string &path) {
  std::string bytes;
  try {
    bytes = files::readWholeFile(path, "weights file");
  } catch (const files::FileError &error) {
    throw Error(error.what());
  }
  return decode(bytes, path);
}

std::string encode(const File &file) {
  Json header = Json::object();
  if (!file.metadata.empty()) {
    Json metadata = Json::object();
    for (const auto &[key, value] : file.metadata)
      metadata[key] = value;
    header["__metadata__"] = metadata;
  }
  uint64_t offset = 0;
  for (const Tensor &tensor : file.tensors) {
    Json shape = Json::array();
    for (int64_t size : tensor.shape)
      shape.push_back(size);
    header[tensor.name] = {{"dtype", tensor.dtype},
                           {"shape", shape},
                           {"data_offsets", {offset, offset + tensor.bytes.size()}}};
    offset += tensor.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + text.size() + offset);
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<char>((static_cast<uint64_t>(text.size()) >> (8 * i)) & 0xff));
  out += text;
  for (const Tensor &tensor : file.tensors)
    out += tensor.bytes;
  return out;
}

void writeFile(const std::string &path, const File &file) {
  try {
    files::writeFileAtomically(path, encode(file), "weights file");
  } catch (const files::FileError &error) {
    throw Error(error.what());
  }
}

std::vector<float> toFloats(const Tensor &tensor) {
  const size_t width = elementBytes(tensor.dtype);
  const size_t count = width ? tensor.bytes.size() / width : 0;
  std::vector<float> values(count);
  const char *data = tensor.bytes.data();
  for (size_t i = 0; i < count; ++i) {
    if (tensor.dtype == "F32") {
      std::memcpy(&values[i], data + 4 * i, 4);
    } else if (tensor.dtype == "F64") {
      double value;
      std::memcpy(&value, data + 8 * i, 8);
      values[i] = static_cast<float>(value);
    } else if (tensor.dtype == "BF16" || tensor.dtype == "F16") {
      uint16_t bits;
      std::memcpy(&bits, data + 2 * i, 2);
      values[i] =
          tensor.dtype == "BF16" ? numerics::bf16BitsToFloat(bits) : numerics::f16BitsToFloat(bits);
    } else {
      throw Error("tensor '" + tensor.name + "' is " + tensor.dtype +
                  ", not floating point (F32, BF16, F16 or F64)");
    }
  }
  return values;
}

Tensor fromFloats(std::string name, std::vector<int64_t> shape, const std::vector<float> &values,
                  const std::string &dtype) {
  Tensor tensor{std::move(name), dtype, std::move(shape), {}};
  if (dtype == "F32") {
    tensor.bytes.resize(4 * values.size());
    std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
    return tensor;
  }
  if (dtype != "BF16" && dtype != "F16")
    throw Error("cannot store tensor '" + tensor.name + "' as " + dtype + " (F32, BF16 or F16)");
  tensor.bytes.resize(2 * values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t bits = dtype == "BF16" ? numerics::floatToBF16Bits(values[i])
                                          : numerics::floatToF16Bits(values[i]);
    std::memcpy(tensor.bytes.data() + 2 * i, &bits, 2);
  }
  return tensor;
}

} // namespace ampc::safetensors
