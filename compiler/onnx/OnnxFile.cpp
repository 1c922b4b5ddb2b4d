//===- OnnxFile.cpp - ONNX files: protobuf parsing, tensors, attributes -===//
//
// External data (the newer exporter's side files): a tensor whose data_location is EXTERNAL names
// `location` (relative to the model's directory), and optionally `offset` and `length` in bytes;
// the bytes are the tensor's raw little-endian data. A model file comes from someone else, so
// the location is confined: relative, inside the model's folder once symbolic links are resolved,
// a regular file; offset and length are whole non-negative decimal numbers within the file.
//
//===----------------------------------------------------------------------===//

#include "compiler/onnx/OnnxFile.h"
#include "runtime/numerics/Float16.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <optional>

namespace ampc::onnximport {

int64_t HostTensor::numElements() const {
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  return count;
}

int64_t HostTensor::integer(size_t i) const {
  double value = values[i];
  if (value >= 9.2e18)
    return std::numeric_limits<int64_t>::max();
  if (value <= -9.2e18)
    return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(value);
}

std::vector<int64_t> HostTensor::integers() const {
  std::vector<int64_t> out(values.size());
  for (size_t i = 0; i < values.size(); ++i)
    out[i] = integer(i);
  return out;
}

bool HostTensor::isFloatType(int32_t dtype) {
  return dtype == onnx::TensorProto::FLOAT || dtype == onnx::TensorProto::DOUBLE ||
         dtype == onnx::TensorProto::FLOAT16 || dtype == onnx::TensorProto::BFLOAT16;
}

std::string dtypeName(int32_t dtype) {
  if (onnx::TensorProto_DataType_IsValid(dtype))
    return onnx::TensorProto_DataType_Name(static_cast<onnx::TensorProto_DataType>(dtype));
  return "type " + std::to_string(dtype);
}

namespace {

/// A model-local function by (domain, name).
using Functions = std::map<std::pair<std::string, std::string>, const onnx::FunctionProto *>;

/// The most nodes and calls local functions may expand to. Each level of nesting multiplies: 24
/// functions of two calls each, in a 2 KB file, would expand to 2^23 nodes. Exported models
/// expand to a few thousand (a 126-layer decoder to about 25,000).
constexpr size_t kMaxExpandedNodes = size_t(1) << 18;

/// Appends \p node to \p out, or, when it calls a local function, the function's body with its
/// values renamed apart ("CALL/N/value"), its formal inputs and outputs bound to the call's, and
/// attribute references resolved from the call's attributes; nested calls expand the same way.
void expandNode(const onnx::NodeProto &node, const Functions &functions,
                std::vector<onnx::NodeProto> &out, int depth, int &calls) {
  auto function = functions.find({node.domain(), node.op_type()});
  if (function == functions.end()) {
    out.push_back(node);
    return;
  }
  if (depth > 32)
    throw ImportError("local function " + node.op_type() + " calls itself (32 levels deep)");
  const onnx::FunctionProto &body = *function->second;
  if (out.size() + static_cast<size_t>(calls) >= kMaxExpandedNodes)
    throw ImportError("the model's local functions expand to more than " +
                      std::to_string(kMaxExpandedNodes) + " nodes and calls (calls of " +
                      node.op_type() + " nested too deep or too often)");
  const std::string prefix =
      (node.name().empty() ? body.name() : node.name()) + "/" + std::to_string(calls++) + "/";
  std::map<std::string, std::string> bound;
  for (int i = 0; i < body.input_size(); ++i)
    bound[body.input(i)] = i < node.input_size() ? node.input(i) : "";
  for (int i = 0; i < body.output_size(); ++i)
    bound[body.output(i)] = i < node.output_size() ? node.output(i) : "";
  auto rename = [&](const std::string &name) {
    if (name.empty())
      return name;
    auto found = bound.find(name);
    return found != bound.end() ? found->second : prefix + name;
  };
  for (const onnx::NodeProto &inner : body.node()) {
    onnx::NodeProto copy = inner;
    copy.set_name(prefix + (inner.name().empty() ? inner.op_type() : inner.name()));
    for (int i = 0; i < copy.input_size(); ++i)
      copy.set_input(i, rename(inner.input(i)));
    for (int i = 0; i < copy.output_size(); ++i)
      copy.set_output(i, rename(inner.output(i)));
    // Attributes that refer to the call's (ref_attr_name) take its value, or are left out.
    copy.clear_attribute();
    for (const onnx::AttributeProto &attribute : inner.attribute()) {
      if (attribute.ref_attr_name().empty()) {
        *copy.add_attribute() = attribute;
        continue;
      }
      for (const onnx::AttributeProto &given : node.attribute())
        if (given.name() == attribute.ref_attr_name()) {
          onnx::AttributeProto *resolved = copy.add_attribute();
          *resolved = given;
          resolved->set_name(attribute.name());
        }
    }
    expandNode(copy, functions, out, depth + 1, calls);
  }
}

} // namespace

std::unique_ptr<OnnxFile> readOnnxFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw ImportError("cannot read the file");
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  auto file = std::make_unique<OnnxFile>();
  file->path = path;
  file->directory = std::filesystem::path(path).parent_path().string();
  // Protobuf accepts many byte strings; a model needs a graph and an IR version as well.
  if (bytes.empty() || !file->model.ParseFromString(bytes) || !file->model.has_graph() ||
      file->model.ir_version() <= 0)
    throw ImportError("not an ONNX model (the file does not parse as an ONNX ModelProto with a "
                      "graph; is it truncated?)");
  for (const onnx::OperatorSetIdProto &opset : file->model.opset_import())
    if (opset.domain().empty() || opset.domain() == "ai.onnx")
      file->opset = opset.version();
  if (file->opset <= 0)
    throw ImportError("the model imports no version of the default ONNX opset");
  Functions functions;
  for (const onnx::FunctionProto &function : file->model.functions())
    functions[{function.domain(), function.name()}] = &function;
  int calls = 0;
  for (const onnx::NodeProto &node : file->model.graph().node())
    expandNode(node, functions, file->nodes, 0, calls);
  return file;
}

namespace {

/// Bytes per element of the raw encoding; 0 for types the importer does not read.
size_t rawWidth(int32_t dtype) {
  switch (dtype) {
  case onnx::TensorProto::FLOAT:
  case onnx::TensorProto::INT32:
  case onnx::TensorProto::UINT32:
    return 4;
  case onnx::TensorProto::DOUBLE:
  case onnx::TensorProto::INT64:
  case onnx::TensorProto::UINT64:
    return 8;
  case onnx::TensorProto::FLOAT16:
  case onnx::TensorProto::BFLOAT16:
  case onnx::TensorProto::INT16:
  case onnx::TensorProto::UINT16:
    return 2;
  case onnx::TensorProto::INT8:
  case onnx::TensorProto::UINT8:
  case onnx::TensorProto::BOOL:
    return 1;
  default:
    return 0;
  }
}

double decodeRaw(int32_t dtype, const char *bytes) {
  uint64_t raw = 0;
  const size_t width = rawWidth(dtype);
  for (size_t i = 0; i < width; ++i)
    raw |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  switch (dtype) {
  case onnx::TensorProto::FLOAT:
    return numerics::bitsToFloat(static_cast<uint32_t>(raw));
  case onnx::TensorProto::DOUBLE: {
    double value;
    std::memcpy(&value, &raw, 8);
    return value;
  }
  case onnx::TensorProto::FLOAT16:
    return numerics::f16BitsToFloat(static_cast<uint16_t>(raw));
  case onnx::TensorProto::BFLOAT16:
    return numerics::bf16BitsToFloat(static_cast<uint16_t>(raw));
  case onnx::TensorProto::INT32:
    return static_cast<int32_t>(static_cast<uint32_t>(raw));
  case onnx::TensorProto::INT64:
    return static_cast<double>(static_cast<int64_t>(raw));
  case onnx::TensorProto::INT16:
    return static_cast<int16_t>(static_cast<uint16_t>(raw));
  case onnx::TensorProto::INT8:
    return static_cast<int8_t>(static_cast<uint8_t>(raw));
  default:
    return static_cast<double>(raw);
  }
}

/// \p text as a byte count: decimal digits only, the whole string, within int64.
std::optional<int64_t> parseByteCount(const std::string &text) {
  if (text.empty() || text.size() > 18 ||
      text.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return std::stoll(text);
}

/// The external data file \p location names, confined to the model's folder \p directory.
std::filesystem::path externalDataPath(const std::string &directory, const std::string &location,
                                       const std::string &what) {
  namespace fs = std::filesystem;
  const fs::path relative(location);
  if (relative.is_absolute())
    throw ImportError(what + ": external data location '" + location +
                      "' is absolute; it must name a file in the model's folder");
  const fs::path folder = directory.empty() ? fs::path(".") : fs::path(directory);
  const fs::path path = folder / relative;
  std::error_code error;
  // Symbolic links resolved on both sides, so neither '..' nor a link can leave the folder.
  const fs::path root = fs::weakly_canonical(folder, error);
  const fs::path resolved = error ? fs::path() : fs::weakly_canonical(path, error);
  auto inside = [&] {
    auto r = root.begin(), p = resolved.begin();
    for (; r != root.end(); ++r, ++p)
      if (p == resolved.end() || *p != *r)
        return false;
    return p != resolved.end();
  };
  if (error || !inside())
    throw ImportError(what + ": external data location '" + location +
                      "' leaves the model's folder '" + folder.string() +
                      "'; it must name a file in that folder");
  const fs::file_status status = fs::status(path, error);
  if (error || !fs::exists(status))
    throw ImportError(what + ": cannot read its external data file '" + path.string() +
                      "' (it must lie beside the model, as the exporter wrote it)");
  if (!fs::is_regular_file(status))
    throw ImportError(what + ": external data location '" + location +
                      "' is not a regular file (" +
                      (fs::is_directory(status) ? "a directory" : "a special file") + ")");
  return path;
}

/// The bytes of an external tensor.
std::string readExternal(const OnnxFile &file, const onnx::TensorProto &tensor,
                         const std::string &what) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const onnx::StringStringEntryProto &entry : tensor.external_data()) {
    if (entry.key() == "location") {
      location = entry.value();
    } else if (entry.key() == "offset" || entry.key() == "length") {
      const std::optional<int64_t> count = parseByteCount(entry.value());
      if (!count)
        throw ImportError(what + ": external data has a bad " + entry.key() + " '" +
                          entry.value() + "' (a whole number of bytes, 0 or more)");
      (entry.key() == "offset" ? offset : length) = *count;
    }
  }
  if (location.empty())
    throw ImportError(what + ": external data without a location");
  const std::filesystem::path path = externalDataPath(file.directory, location, what);
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw ImportError(what + ": cannot read its external data file '" + path.string() +
                      "' (it must lie beside the model, as the exporter wrote it)");
  in.seekg(0, std::ios::end);
  const int64_t size = static_cast<int64_t>(in.tellg());
  if (length < 0)
    length = size - offset;
  if (offset < 0 || offset > size || length > size - offset)
    throw ImportError(what + ": external data bytes " + std::to_string(offset) + " to " +
                      std::to_string(offset + length) + " lie outside '" + path.string() + "' (" +
                      std::to_string(size) + " bytes)");
  std::string bytes(length, '\0');
  in.seekg(offset);
  in.read(bytes.data(), length);
  if (!in)
    throw ImportError(what + ": cannot read its external data file '" + path.string() + "'");
  return bytes;
}

} // namespace

HostTensor decodeTensor(const OnnxFile &file, const onnx::TensorProto &tensor,
                        const std::string &what) {
  HostTensor result;
  result.dtype = tensor.data_type();
  int64_t count = 1;
  for (int64_t dim : tensor.dims()) {
    if (dim < 0 || (dim > 0 && count > (int64_t(1) << 40) / dim))
      throw ImportError(what + " has a bad shape");
    result.shape.push_back(dim);
    count *= dim;
  }
  const size_t width = rawWidth(result.dtype);
  if (!width)
    throw ImportError(what + " has element type " + dtypeName(result.dtype) +
                      ", which ampc does not import");
  const bool external = tensor.data_location() == onnx::TensorProto::EXTERNAL;
  if (external || tensor.has_raw_data()) {
    const std::string bytes = external ? readExternal(file, tensor, what) : tensor.raw_data();
    if (bytes.size() != count * width)
      throw ImportError(what + " has " + std::to_string(bytes.size()) + " bytes of data for " +
                        std::to_string(count) + " elements of " + dtypeName(result.dtype));
    result.values.resize(count);
    for (int64_t i = 0; i < count; ++i)
      result.values[i] = decodeRaw(result.dtype, bytes.data() + i * width);
    return result;
  }
  // Typed fields: float_data (FLOAT), int32_data (INT32 and narrower, FLOAT16/BFLOAT16 as bits),
  // int64_data, double_data, uint64_data.
  auto fill = [&](const auto &field, auto convert) {
    if (static_cast<int64_t>(field.size()) != count)
      throw ImportError(what + " has " + std::to_string(field.size()) + " values for " +
                        std::to_string(count) + " elements");
    result.values.resize(count);
    for (int64_t i = 0; i < count; ++i)
      result.values[i] = convert(field.Get(i));
  };
  auto same = [](auto value) { return static_cast<double>(value); };
  switch (result.dtype) {
  case onnx::TensorProto::FLOAT:
    fill(tensor.float_data(), same);
    break;
  case onnx::TensorProto::DOUBLE:
    fill(tensor.double_data(), same);
    break;
  case onnx::TensorProto::INT64:
    fill(tensor.int64_data(), same);
    break;
  case onnx::TensorProto::UINT64:
  case onnx::TensorProto::UINT32:
    fill(tensor.uint64_data(), same);
    break;
  case onnx::TensorProto::FLOAT16:
    fill(tensor.int32_data(),
         [](int32_t bits) { return double(numerics::f16BitsToFloat(uint16_t(bits))); });
    break;
  case onnx::TensorProto::BFLOAT16:
    fill(tensor.int32_data(),
         [](int32_t bits) { return double(numerics::bf16BitsToFloat(uint16_t(bits))); });
    break;
  default:
    fill(tensor.int32_data(), same);
  }
  return result;
}

std::string describeNode(const onnx::NodeProto &node, int index, int64_t opset) {
  std::string text = "node " + std::to_string(index);
  if (!node.name().empty())
    text += " '" + node.name() + "'";
  text += " (" + (node.domain().empty() ? "" : node.domain() + ".") + node.op_type() + ", opset " +
          std::to_string(opset) + ")";
  return text;
}

const onnx::AttributeProto *findAttribute(const onnx::NodeProto &node, const std::string &name) {
  for (const onnx::AttributeProto &attribute : node.attribute())
    if (attribute.name() == name)
      return &attribute;
  return nullptr;
}

int64_t intAttribute(const onnx::NodeProto &node, const std::string &name, int64_t fallback) {
  const onnx::AttributeProto *attribute = findAttribute(node, name);
  return attribute ? attribute->i() : fallback;
}

double floatAttribute(const onnx::NodeProto &node, const std::string &name, double fallback) {
  const onnx::AttributeProto *attribute = findAttribute(node, name);
  return attribute ? attribute->f() : fallback;
}

std::string stringAttribute(const onnx::NodeProto &node, const std::string &name,
                            const std::string &fallback) {
  const onnx::AttributeProto *attribute = findAttribute(node, name);
  return attribute ? attribute->s() : fallback;
}

std::vector<int64_t> intsAttribute(const onnx::NodeProto &node, const std::string &name) {
  const onnx::AttributeProto *attribute = findAttribute(node, name);
  if (!attribute)
    return {};
  return std::vector<int64_t>(attribute->ints().begin(), attribute->ints().end());
}

} // namespace ampc::onnximport
