//===- PrecisionReport.h - `ampc report precision` -------------*- C++ -*-===//
//
// Reads the `precision` attributes graph-assign-precision left on the training step and prints
// one row per op (source location, compute / accumulate / storage dtype, the rule that decided)
// and the totals: casts inserted, bytes converted per optimizer step, and the share of the step's
// FLOPs that run in reduced precision.
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_COMPILER_REPORT_PRECISIONREPORT_H
#define AMPC_COMPILER_REPORT_PRECISIONREPORT_H

#include "dialects/Graph/GraphDialect.h"

#include "llvm/Support/raw_ostream.h"

#include <cstdint>

namespace ampc {

/// The totals of a precision assignment.
struct PrecisionTotals {
  int64_t ops = 0;
  int64_t casts = 0;
  /// Bytes read and written by conversions per optimizer step: every cast of the micro step
  /// (times the accumulation steps) and the refresh of every parameter copy.
  int64_t bytesConverted = 0;
  double flops = 0, reducedFlops = 0;
};

/// Sums the totals of the model's entry function and parameter copies.
PrecisionTotals precisionTotals(graph::ModelOp model);

/// Prints the table and the totals.
void printPrecisionReport(graph::ModelOp model, llvm::raw_ostream &os);

} // namespace ampc

#endif // AMPC_COMPILER_REPORT_PRECISIONREPORT_H
