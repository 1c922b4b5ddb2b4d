//===- ModelLoader.h - read a model file and prepare it for lowering -*- C++ -*-===//
//
// The front of every ampc verb: parse a model file, verify it, find its graph.model, and flatten
// calls so later stages see one entry function. Diagnostics go to the context's handler.
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_COMPILER_MODELLOADER_H
#define AMPC_COMPILER_MODELLOADER_H

#include "dialects/Graph/GraphDialect.h"
#include "passes/Passes.h"
#include "passes/TrainingPipeline.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/SourceMgr.h"

#include <string>

namespace ampc {

/// Registers every dialect a model file may use.
void registerModelDialects(mlir::MLIRContext &context);

/// A parsed, verified model file.
struct LoadedModel {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  graph::ModelOp model;
};

/// Parses and verifies `path`. The file must hold exactly one graph.model. On failure a located
/// diagnostic has been emitted (through `sourceMgr`'s handler installed by the caller).
mlir::FailureOr<LoadedModel> loadModel(const std::string &path, llvm::SourceMgr &sourceMgr,
                                       mlir::MLIRContext &context);

/// Runs the passes that turn a verified model into the form plan emission takes: every call
/// inlined into the entry function.
mlir::LogicalResult flattenModel(graph::ModelOp model);

/// Inlines the model's calls and derives its training step (graph-build-training with
/// \p options): the model then holds micro_step and optimizer_step.
mlir::LogicalResult buildTraining(graph::ModelOp model,
                                  const graph::GraphBuildTrainingOptions &options);

/// Places the intermediate values of the model's step functions in arenas
/// (graph-plan-memory).
mlir::LogicalResult planMemory(graph::ModelOp model);

/// Runs the training pipeline (passes/TrainingPipeline.h: the training step derived, precision,
/// loss scaling, remat with a budget, fusion and memory planning) on a loaded model: the form
/// plan emission and the device program take. What `ampc compile` runs.
mlir::LogicalResult runTrainingPipeline(LoadedModel &loaded,
                                        const graph::TrainingPipelineConfig &config);

/// Recomputes forward values in the backward pass so the training step fits `budget`
/// (graph-plan-remat; "6GiB", "75%", ...), counting `workspace` bytes as persistent.
mlir::LogicalResult planRemat(graph::ModelOp model, const std::string &budget,
                              int64_t workspaceBytes);

/// Assigns precision (graph-assign-precision) and, for a training model when \p scaling is
/// given, inserts loss scaling (graph-insert-loss-scaling).
mlir::LogicalResult assignPrecision(graph::ModelOp model,
                                    const graph::GraphAssignPrecisionOptions &precision,
                                    const graph::GraphInsertLossScalingOptions *scaling);

} // namespace ampc

#endif // AMPC_COMPILER_MODELLOADER_H
