//===- Format.h - how the compiler writes locations and sizes for people -*- C++ -*-===//
//
// The two formats every report, warning and internal error of the compiler shares: an op's
// source location and a byte count. Kept apart from the stages so that none of them depends on
// another only to print.
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_COMPILER_SUPPORT_FORMAT_H
#define AMPC_COMPILER_SUPPORT_FORMAT_H

#include "mlir/IR/Location.h"

#include <cstdint>
#include <string>

namespace ampc {

/// "file:line:col" of an op's location; inlined ops read "callee-loc (called from caller-loc)".
/// \p brief drops the directory and writes an inlined op as "file:line:col <- line:col" (the call).
std::string formatLocation(mlir::Location loc, bool brief = false);

/// "1.5 GB", "730.0 kB", "512 B" (decimal units, one decimal).
std::string formatBytes(int64_t bytes);

} // namespace ampc

#endif // AMPC_COMPILER_SUPPORT_FORMAT_H
