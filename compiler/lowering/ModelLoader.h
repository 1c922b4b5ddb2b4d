//===- ModelLoader.h - read a model file and prepare it for lowering -*- C++ -*-===//
//
// The front of every ampc verb: parse a model file, verify it, find its graph.model, and flatten
// calls so later stages see one entry function. Diagnostics go to the context's handler.
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_COMPILER_LOWERING_MODELLOADER_H
#define AMPC_COMPILER_LOWERING_MODELLOADER_H

#include "compiler/lowering/PlanEmitter.h"
#include "compiler/onnx/OnnxImporter.h"
#include "dialects/Graph/GraphDialect.h"
#include "passes/Passes.h"
#include "passes/TrainingPipeline.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/SourceMgr.h"

#include <string>

namespace ampc {

/// Registers every dialect a model file may use.
void registerModelDialects(mlir::MLIRContext &context);

/// A parsed, verified model file.
struct LoadedModel {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  graph::ModelOp model;
  /// The values of the parameters initialised #graph.given: the weights file the model names
  /// (read and checked against the parameters' shapes), or an imported ONNX file's initializers.
  GivenValues given;
};

/// Parses and verifies `path`: a model file (.mlir), which must hold exactly one graph.model, or
/// an ONNX file (.onnx), imported with \p onnx (compiler/onnx/OnnxImporter.h). On failure a
/// located diagnostic has been emitted (through `sourceMgr`'s handler installed by the caller).
mlir::FailureOr<LoadedModel> loadModel(const std::string &path, llvm::SourceMgr &sourceMgr,
                                       mlir::MLIRContext &context,
                                       const OnnxImportOptions &onnx = {});

/// Whether \p path names an ONNX file (by its extension).
bool isOnnxFile(const std::string &path);

/// The form a forward-only plan is emitted from: every call inlined into the entry function
/// (graph-inline-calls), decomposed ops raised to fused ones (graph-raise-fused-ops), attention
/// reading the packed q, k, v projection (graph-pack-qkv-attention), and precision assigned
/// when \p precision is given.
mlir::LogicalResult flattenModel(graph::ModelOp model,
                                 const graph::GraphAssignPrecisionOptions *precision = nullptr);

/// Runs the training pipeline (passes/TrainingPipeline.h: the training step derived, precision,
/// loss scaling, remat with a budget, fusion and memory planning) on a loaded model: the form
/// plan emission and the device program take. What `ampc compile` runs. \p part runs half of
/// it (as `ampc report` does). \p configure, when given, adjusts the pass manager before it runs
/// (the driver applies MLIR's command-line options: IR printing, timing, crash reproducers); its
/// failure stops before any pass runs.
mlir::LogicalResult
runTrainingPipeline(LoadedModel &loaded, const graph::TrainingPipelineConfig &config,
                    graph::PipelinePart part = graph::PipelinePart::All,
                    llvm::function_ref<mlir::LogicalResult(mlir::PassManager &)> configure = {});

} // namespace ampc

#endif // AMPC_COMPILER_LOWERING_MODELLOADER_H
