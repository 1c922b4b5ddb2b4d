//===- CompileHelpers.h - compile model text or files in unit tests -*- C++ -*-===//

#ifndef AMPC_TEST_UNIT_COMPILER_COMPILEHELPERS_H
#define AMPC_TEST_UNIT_COMPILER_COMPILEHELPERS_H

#include "compiler/lowering/ModelLoader.h"
#include "compiler/lowering/PlanEmitter.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <string>

namespace ampc {

// Single passes of the training pipeline, for tests that look at the step between them (the
// product runs the whole pipeline: passes/TrainingPipeline.h).

/// Runs \p add's passes on \p model.
template <typename AddPasses> mlir::LogicalResult runPasses(graph::ModelOp model, AddPasses add) {
  mlir::PassManager pm(model->getContext(), graph::ModelOp::getOperationName());
  add(pm);
  return pm.run(model);
}

/// graph-inline-calls and graph-build-training.
inline mlir::LogicalResult buildTraining(graph::ModelOp model,
                                         const graph::GraphBuildTrainingOptions &options) {
  return runPasses(model, [&](mlir::PassManager &pm) {
    pm.addPass(graph::createGraphInlineCalls());
    pm.addPass(graph::createGraphBuildTraining(options));
  });
}

/// graph-assign-precision, and graph-insert-loss-scaling when \p scaling is given.
inline mlir::LogicalResult assignPrecision(graph::ModelOp model,
                                           const graph::GraphAssignPrecisionOptions &precision,
                                           const graph::GraphInsertLossScalingOptions *scaling) {
  return runPasses(model, [&](mlir::PassManager &pm) {
    pm.addPass(graph::createGraphAssignPrecision(precision));
    if (scaling)
      pm.addPass(graph::createGraphInsertLossScaling(*scaling));
  });
}

/// graph-plan-memory.
inline mlir::LogicalResult planMemory(graph::ModelOp model) {
  return runPasses(model,
                   [&](mlir::PassManager &pm) { pm.addPass(graph::createGraphPlanMemory()); });
}

/// graph-plan-remat for \p budget, counting \p workspaceBytes as persistent.
inline mlir::LogicalResult planRemat(graph::ModelOp model, const std::string &budget,
                                     int64_t workspaceBytes) {
  graph::GraphPlanRematOptions options;
  options.budget = budget;
  options.workspace = std::to_string(workspaceBytes);
  return runPasses(
      model, [&](mlir::PassManager &pm) { pm.addPass(graph::createGraphPlanRemat(options)); });
}

} // namespace ampc

namespace ampc::test_support {

/// A temporary file name no other test process uses: ctest runs tests in parallel.
inline std::string uniqueTempPath(const std::string &stem) {
  static int counter = 0;
  return ::testing::TempDir() + std::to_string(::getpid()) + "." + std::to_string(counter++) + "." +
         stem + ".mlir";
}

/// Parses and verifies the model file at `path`, runs `prepare(model)` (the passes that bring it
/// to the form plan emission takes) and emits its plan; diagnostics are collected into
/// `diagnostics`. Returns nullopt on failure.
template <typename Prepare>
std::optional<plan::Plan> compileFileWith(const std::string &path, std::string *diagnostics,
                                          Prepare prepare) {
  mlir::MLIRContext context;
  registerModelDialects(context);
  llvm::SourceMgr sourceMgr;
  std::string collected;
  llvm::raw_string_ostream os(collected);
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &context, os);
  std::optional<plan::Plan> result;
  auto loaded = loadModel(path, sourceMgr, context);
  if (succeeded(loaded) && succeeded(prepare(loaded->model))) {
    auto compiled = emitPlan(loaded->model);
    if (succeeded(compiled))
      result = std::move(*compiled);
  }
  if (diagnostics)
    *diagnostics = os.str();
  return result;
}

/// Parses, verifies, flattens and lowers the model file at `path`; diagnostics are collected
/// into `diagnostics`. Returns nullopt on failure.
inline std::optional<plan::Plan> compileFile(const std::string &path,
                                             std::string *diagnostics = nullptr) {
  return compileFileWith(path, diagnostics,
                         [](graph::ModelOp model) { return flattenModel(model); });
}

/// Writes `text` to a temporary .mlir file and compiles it.
inline std::optional<plan::Plan> compileText(const std::string &text,
                                             std::string *diagnostics = nullptr) {
  std::string path = uniqueTempPath("ampc_test_model");
  std::ofstream(path) << text;
  auto result = compileFile(path, diagnostics);
  std::remove(path.c_str());
  return result;
}

/// Parses and verifies the model file at `path`, builds its training step with `options`
/// (graph-inline-calls, then graph-build-training) and emits the training plan. Every
/// diagnostic (warnings included) is collected into `diagnostics`. Returns nullopt on failure.
inline std::optional<plan::Plan>
compileTrainingFile(const std::string &path, const graph::GraphBuildTrainingOptions &options,
                    std::string *diagnostics = nullptr) {
  return compileFileWith(path, diagnostics,
                         [&](graph::ModelOp model) { return buildTraining(model, options); });
}

/// Writes `text` to a temporary .mlir file and compiles its training step.
inline std::optional<plan::Plan>
compileTrainingText(const std::string &text, const graph::GraphBuildTrainingOptions &options,
                    std::string *diagnostics = nullptr) {
  std::string path = uniqueTempPath("ampc_test_training_model");
  std::ofstream(path) << text;
  auto result = compileTrainingFile(path, options, diagnostics);
  std::remove(path.c_str());
  return result;
}

/// Like compileTrainingFile, then assigns precision and inserts loss scaling with the given
/// options (graph-assign-precision, graph-insert-loss-scaling).
inline std::optional<plan::Plan>
compileMixedPrecisionFile(const std::string &path, const graph::GraphBuildTrainingOptions &training,
                          const graph::GraphAssignPrecisionOptions &precision,
                          const graph::GraphInsertLossScalingOptions &scaling,
                          std::string *diagnostics = nullptr) {
  return compileFileWith(path, diagnostics, [&](graph::ModelOp model) {
    if (failed(buildTraining(model, training)))
      return mlir::failure();
    return assignPrecision(model, precision, &scaling);
  });
}

/// Writes `text` to a temporary .mlir file and compiles it as compileMixedPrecisionFile does.
inline std::optional<plan::Plan>
compileMixedPrecisionText(const std::string &text, const graph::GraphBuildTrainingOptions &training,
                          const graph::GraphAssignPrecisionOptions &precision,
                          const graph::GraphInsertLossScalingOptions &scaling,
                          std::string *diagnostics = nullptr) {
  std::string path = uniqueTempPath("ampc_test_mixed_precision_model");
  std::ofstream(path) << text;
  auto result = compileMixedPrecisionFile(path, training, precision, scaling, diagnostics);
  std::remove(path.c_str());
  return result;
}

inline std::string examplePath(const std::string &relative) {
  return std::string(AMPC_SOURCE_DIR) + "/examples/" + relative;
}

} // namespace ampc::test_support

#endif // AMPC_TEST_UNIT_COMPILER_COMPILEHELPERS_H
