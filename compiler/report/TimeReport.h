//===- TimeReport.h - `ampc report time` -----------------------*- C++ -*-===//
//
// The time a plan's device step would take on a GPU, predicted without one
// (runtime/plan/StepTime.h): per step group folded as `--profile` folds them (same code, same
// source locations, call sites aside), per kind, and for the whole optimizer step, each beside
// its floor (the bytes at a device copy's bandwidth, the FLOPs at the tensor cores' peak). Its
// rows have `--profile`'s columns, so bench/time_model.py can put a measured profile beside
// them.
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_COMPILER_REPORT_TIMEREPORT_H
#define AMPC_COMPILER_REPORT_TIMEREPORT_H

#include "runtime/plan/Plan.h"
#include "runtime/plan/StepTime.h"

#include "llvm/Support/raw_ostream.h"

#include <cstddef>

namespace ampc {

/// Prints the report of \p plan (with its device program) on \p gpu: the `top` slowest rows,
/// the kinds and the step.
void printTimeReport(const plan::Plan &plan, const plan::GpuModel &gpu, llvm::raw_ostream &os,
                     size_t top = 40);

} // namespace ampc

#endif // AMPC_COMPILER_REPORT_TIMEREPORT_H
