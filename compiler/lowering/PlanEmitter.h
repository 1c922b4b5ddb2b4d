//===- PlanEmitter.h - lower a graph model to a runtime plan ---*- C++ -*-===//
//
// Turns a verified, flattened graph.model into the plan the runtime executes: one buffer per
// tensor value, parameters with their initializers, inputs with the range of valid ids, constants,
// and one instruction per op (graph.split becomes one slice per piece). The plan format is the
// only thing the compiler and the runtime share (docs/plan-format.md).
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_COMPILER_LOWERING_PLANEMITTER_H
#define AMPC_COMPILER_LOWERING_PLANEMITTER_H

#include "dialects/Graph/GraphDialect.h"
#include "runtime/plan/Plan.h"

#include "llvm/ADT/DenseMap.h"

#include <map>
#include <string>
#include <vector>

namespace ampc {

/// The initial values of the parameters initialised #graph.given, by parameter name, row-major
/// (the model's weights file, read by loadModel: compiler/lowering/ModelLoader.h).
using GivenValues = std::map<std::string, std::vector<float>>;

/// How an emitted plan relates to the IR it came from, for the stages that add to the plan after
/// emission (the device program: compiler/cuda/DeviceProgramBuilder.h).
struct PlanProvenance {
  /// The buffer of every SSA value that has one (results, parameters, inputs, constants).
  llvm::DenseMap<mlir::Value, uint32_t> bufferOf;
  /// The instructions emitted for each op, as indices into its function's list (empty for ops
  /// that only name a buffer: get_param, constant, loss, return, ...).
  llvm::DenseMap<mlir::Operation *, std::vector<uint32_t>> instructionsOf;
};

/// Lowers `model`, whose entry function must hold no calls (see flattenModel). Emits a located
/// diagnostic and fails on anything the plan cannot express. When `provenance` is given, it
/// receives the mapping from the IR to the plan. `given` holds the values of the parameters
/// initialised #graph.given, which the plan embeds; such a parameter missing from it is an error.
mlir::FailureOr<plan::Plan> emitPlan(graph::ModelOp model, PlanProvenance *provenance = nullptr,
                                     const GivenValues *given = nullptr);

} // namespace ampc

#endif // AMPC_COMPILER_LOWERING_PLANEMITTER_H
