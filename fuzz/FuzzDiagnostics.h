//===- FuzzDiagnostics.h - What the MLIR fuzz targets do with diagnostics -*- C++ -*-===//
//
// A diagnostic is the expected answer to a bad model and is swallowed: printing thousands a
// second would only slow the fuzzer. With AMPC_FUZZ_DIAGNOSTICS=1 in the environment they are
// printed, to see why an input (a corpus file, say) is rejected.
//
//===--------------------------------------------------------------------------------===//

#ifndef AMPC_FUZZ_FUZZDIAGNOSTICS_H
#define AMPC_FUZZ_FUZZDIAGNOSTICS_H

#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

namespace ampc::fuzz {

/// Installs the handler on \p context.
inline void handleDiagnostics(mlir::MLIRContext &context) {
  static const bool print = std::getenv("AMPC_FUZZ_DIAGNOSTICS") != nullptr;
  context.getDiagEngine().registerHandler([](mlir::Diagnostic &diagnostic) {
    if (print)
      llvm::errs() << diagnostic.getLocation() << ": " << diagnostic << "\n";
    return mlir::success();
  });
}

} // namespace ampc::fuzz

#endif // AMPC_FUZZ_FUZZDIAGNOSTICS_H
