//===- FuzzOnnx.cpp - Fuzz target: ONNX import ------------------------------===//
//
// The input is an ONNX file (a protobuf ModelProto), imported as `ampc import` and every verb
// given a .onnx file import it (importOnnxModel: protobuf parsing, local functions inlined,
// tensors decoded, shapes folded, operators converted, the module verified). Beside it in the
// scratch directory lies "data.bin", 64 KiB of external data, so inputs that name it (the
// corpus has some) reach the external-data reader; every other location must be refused or
// read within the scratch directory. Diagnostics: FuzzDiagnostics.h.
//
//===----------------------------------------------------------------------===//

#include "compiler/lowering/ModelLoader.h"
#include "compiler/onnx/OnnxImporter.h"
#include "fuzz/FuzzDiagnostics.h"
#include "fuzz/FuzzSupport.h"

#include "mlir/IR/MLIRContext.h"

#include <vector>

using namespace ampc;

namespace {

/// Writes the external data file once: bytes i * 37 mod 251, no run of equal values.
void writeExternalData() {
  static const bool written = [] {
    std::vector<uint8_t> bytes(64 << 10);
    for (size_t i = 0; i < bytes.size(); ++i)
      bytes[i] = static_cast<uint8_t>(i * 37 % 251);
    fuzz::writeScratchFile("data.bin", bytes.data(), bytes.size());
    return true;
  }();
  (void)written;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  writeExternalData();
  const std::string path = fuzz::writeScratchFile("model.onnx", data, size);
  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  registerModelDialects(context);
  context.printOpOnDiagnostic(false);
  fuzz::handleDiagnostics(context);
  // Import-time constants of 2^24 elements in all (128 MiB as doubles) instead of 2^28: the
  // same check, with room under the fuzzer's memory limit (4 GiB, run-fuzzers.sh) for the one
  // constant (up to 2^26 elements) that crosses it.
  OnnxImportOptions options;
  options.maxFoldedElements = int64_t(1) << 24;
  // importOnnxModel reports every problem as a diagnostic; it throws nothing.
  mlir::FailureOr<ImportedOnnxModel> imported = importOnnxModel(path, context, options);
  (void)imported;
  return 0;
}
