//===- SafeTensors.h - read and write safetensors files -------------------===//
//
// The safetensors format (huggingface/safetensors): an 8-byte little-endian
// header length, a JSON header naming every tensor's dtype, shape and byte
// range, then the tensors' bytes. ampc reads and writes it for weights that
// travel with a model (an imported model's initial values, `ampc eval
// --grads`). No MLIR; part of ampc_plan.
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

/// A malformed or unreadable file; what() is "FILE: cause".
class Error : public std::runtime_error {
public:
  using runtime_error::runtime_error;
};

/// One tensor: dtype "F32", "F16", "BF16", "F64", "I64", "I32", "U8" or
/// "BOOL"; bytes little-endian, row-major.
struct Tensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

/// A whole file: the header's __metadata__ and the tensors in file order.
struct File {
  std::map<std::string, std::string> metadata;
  std::vector<Tensor> tensors;
  /// The tensor called \p name, or null.
  const Tensor *find(const std::string &name) const;
};

/// Decodes a file's bytes; \p file names it in errors. Validates the header,
/// the dtypes, and that every byte range matches its shape and lies in the
/// file.
File decode(const std::string &bytes, const std::string &file);
/// Reads and decodes \p path.
File readFile(const std::string &path);
/// The bytes of \p file (tensors laid out in order, header padded to 8).
std::string encode(const File &file);
/// Writes \p file to \p path atomically: a temporary, fsync, rename.
void writeFile(const std::string &path, const File &file);
/// The values of a float tensor (F32, F16, BF16, F64); Error otherwise.
std::vector<float> toFloats(const Tensor &tensor);
/// A tensor of \p values stored as \p dtype (F32, BF16 or F16, rounded to
/// nearest even).
Tensor fromFloats(std::string name, std::vector<int64_t> shape, const std::vector<float> &values,
                  const std::string &dtype = "F32");

} // namespace ampc::safetensors

#endif // AMPC_RUNTIME_PLAN_SAFETENSORS_H
