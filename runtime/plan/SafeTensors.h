//===- SafeTensors.h - Reading and writing the safetensors format ---------===//
//
// safetensors is the weights format Hugging Face and PyTorch users
// exchange: an 8-byte little-endian header length N, N bytes of JSON
//
//   {"__metadata__": {"key": "value", ...},
//    "wte": {"dtype": "F32", "shape": [8192, 384], "data_offsets": [0, 12582912]}, ...}
//
// and then the tensors' bytes (little-endian, row-major), each at its
// [begin, end) offsets relative to the end of the header. The header is
// padded with spaces to a multiple of 8 bytes. ampc reads and writes it for
// a training run's initial and final weights (--init-from,
// --export-weights), `ampc eval --weights/--grads` and the weights of
// imported models; names are the model's parameter names.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_PLAN_SAFETENSORS_H
#define AMPC_RUNTIME_PLAN_SAFETENSORS_H

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace ampc::safetensors {

/// A file that is not valid safetensors, or cannot be read or written;
/// what() is one line: "<file>: <cause>" or "cannot read|write ...".
class Error : public std::runtime_error {
public:
  using runtime_error::runtime_error;
};

/// One tensor.
struct Tensor {
  std::string name;
  /// "F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8" or "BOOL".
  std::string dtype;
  std::vector<int64_t> shape; ///< empty for a scalar
  std::string bytes;          ///< little-endian, row-major
};

/// A whole file: metadata plus tensors in file order.
struct File {
  std::map<std::string, std::string> metadata;
  std::vector<Tensor> tensors;

  /// The tensor named \p name, or null.
  const Tensor *find(const std::string &name) const;
};

/// Bytes per element of \p dtype; 0 when it is not a safetensors dtype.
size_t elementBytes(const std::string &dtype);

/// Parses and checks \p bytes: the header's length and JSON, each entry's
/// dtype, shape and offsets (inside the data, matching the shape's size,
/// not overlapping), duplicate names. Error "<file>: <cause>".
File decode(const std::string &bytes, const std::string &file);

/// Reads and decodes \p path.
File readFile(const std::string &path);

/// The file bytes of \p file (tensors stored in the order given).
std::string encode(const File &file);

/// Writes \p file to \p path atomically (runtime/plan/FileIO.h).
void writeFile(const std::string &path, const File &file);

/// The values of a floating-point tensor (F64, F32, F16, BF16) as f32, F64
/// rounded to nearest; Error for other dtypes.
std::vector<float> toFloats(const Tensor &tensor);

/// A tensor of \p values stored as \p dtype ("F32", "BF16" or "F16", the
/// narrow types rounded to nearest even).
Tensor fromFloats(std::string name, std::vector<int64_t> shape, const std::vector<float> &values,
                  const std::string &dtype = "F32");

/// "[8192, 384]".
std::string formatShape(const std::vector<int64_t> &shape);

} // namespace ampc::safetensors

#endif // AMPC_RUNTIME_PLAN_SAFETENSORS_H
