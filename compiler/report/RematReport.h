//===- RematReport.h - `ampc report memory --memory-budget` ----*- C++ -*-===//
//
// What rematerialization does to a training step for one or more budgets: for each, the planned
// peak before and after, the values recomputed (grouped by op and source line across layers),
// the extra FLOPs as a share of the step; for the last budget that can be met a memory-over-time
// table (and, when asked, a PNG plot) of the live bytes with and without remat. Plans come from
// the same planner and checks as graph-plan-remat (passes/RematAdapter.h).
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_COMPILER_REPORT_REMATREPORT_H
#define AMPC_COMPILER_REPORT_REMATREPORT_H

#include "dialects/Graph/GraphDialect.h"

#include "passes/TrainingPipeline.h"

#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace ampc {

/// The cuBLASLt workspace the CUDA runtime allocates, counted as persistent memory (the
/// training pipeline's default).
using graph::kMatmulWorkspaceBytes;

/// Prints the remat section for `budgets` (as written by users: "6GiB", "75%") of a model that
/// went through precision assignment but not yet graph-plan-remat. Writes the plot to
/// `plotPath` when it is not empty. Returns false, after printing the reason to `errors`, for an
/// unreadable budget or a plot that cannot be written.
bool printRematReport(graph::ModelOp model, const std::vector<std::string> &budgets,
                      const std::string &plotPath, llvm::raw_ostream &os,
                      llvm::raw_ostream &errors);

/// One line on stdout after graph-plan-remat ran on `model`: the planned peak against the budget
/// and the peak without remat, the values recomputed and the extra FLOPs.
void printRematSummary(graph::ModelOp model);

} // namespace ampc

#endif // AMPC_COMPILER_REPORT_REMATREPORT_H
