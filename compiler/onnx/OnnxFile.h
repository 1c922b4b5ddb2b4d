//===- OnnxFile.h - ONNX files: protobuf parsing, tensors, attributes -*- C++ -*-===//
//
// The part of the ONNX importer that knows the file format: the ModelProto parsed with the
// protobuf classes of Debian's libonnx-dev, model-local functions inlined, tensors decoded to
// host values (raw, typed and external data), node attributes, and how errors name a node. No
// MLIR here.
//
//===--------------------------------------------------------------------------------===//

#ifndef AMPC_COMPILER_ONNX_ONNXFILE_H
#define AMPC_COMPILER_ONNX_ONNXFILE_H

#include "onnx/onnx_pb.h"

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace ampc::onnximport {

/// A problem with the ONNX file the user gave; what() is one line, without the file name (the
/// importer's diagnostic is located at the file).
class ImportError : public std::runtime_error {
public:
  using runtime_error::runtime_error;
};

/// A tensor known at import time: an initializer, a Constant, or a folded shape computation.
/// Values are held as double whatever the ONNX type (integers up to 2^53 are exact, which covers
/// shapes and indices); `dtype` is the ONNX TensorProto data type.
struct HostTensor {
  int32_t dtype = onnx::TensorProto::FLOAT;
  std::vector<int64_t> shape;
  std::vector<double> values;

  int64_t numElements() const;
  bool isFloat() const { return isFloatType(dtype); }
  /// Element \p i as an integer, saturated to int64 (INT64_MAX in Slice ends stays that).
  int64_t integer(size_t i) const;
  /// The values as integers (saturated).
  std::vector<int64_t> integers() const;
  static bool isFloatType(int32_t dtype);
};

/// The ONNX data type's name ("FLOAT", "INT64", ...).
std::string dtypeName(int32_t dtype);

/// A parsed model file with where its external data lives.
struct OnnxFile {
  std::string path;
  /// The directory external data locations are relative to.
  std::string directory;
  onnx::ModelProto model;
  /// The default domain's opset version.
  int64_t opset = 0;
  /// The graph's nodes in order, with calls of the model's local functions (which the newer
  /// exporter writes for modules) replaced by the functions' bodies.
  std::vector<onnx::NodeProto> nodes;
};

/// Reads and parses \p path; ImportError if it is unreadable, not ONNX, or truncated.
std::unique_ptr<OnnxFile> readOnnxFile(const std::string &path);

/// Decodes \p tensor (raw or typed fields, or external data relative to the file's directory);
/// \p what names it in errors ("initializer 'fc1.weight'").
HostTensor decodeTensor(const OnnxFile &file, const onnx::TensorProto &tensor,
                        const std::string &what);

/// How errors name a node: "node 12 'MatMul_3' (MatMul, opset 17)".
std::string describeNode(const onnx::NodeProto &node, int index, int64_t opset);

/// Attribute accessors; a missing attribute gives the default.
const onnx::AttributeProto *findAttribute(const onnx::NodeProto &node, const std::string &name);
int64_t intAttribute(const onnx::NodeProto &node, const std::string &name, int64_t fallback);
double floatAttribute(const onnx::NodeProto &node, const std::string &name, double fallback);
std::string stringAttribute(const onnx::NodeProto &node, const std::string &name,
                            const std::string &fallback);
std::vector<int64_t> intsAttribute(const onnx::NodeProto &node, const std::string &name);

} // namespace ampc::onnximport

#endif // AMPC_COMPILER_ONNX_ONNXFILE_H
