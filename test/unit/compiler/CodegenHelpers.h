//===- CodegenHelpers.h - Generate a model's CUDA kernels in a test -------===//
//
// What the tests of the generated kernels share: the three precision settings, running the
// pipeline up to graph-fuse on a model file or text and generating its kernels, and finding a
// kernel by kind and fused op.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_TEST_UNIT_COMPILER_CODEGENHELPERS_H
#define AMPC_TEST_UNIT_COMPILER_CODEGENHELPERS_H

#include "CompileHelpers.h"
#include "compiler/cuda/CudaCodegen.h"

#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace ampc {

/// The precision settings of one test configuration.
struct PrecisionCase {
  const char *mode;        ///< graph-assign-precision mode
  const char *lossScaling; ///< graph-insert-loss-scaling mode
};
inline const PrecisionCase kPrecisions[] = {{"bf16", "none"}, {"fp16", "dynamic"}, {"fp32", "none"}};

/// Runs the pipeline (inline, build-training with \p training, assign-precision,
/// insert-loss-scaling, graph-fuse) on the model file at \p path and generates its kernels.
/// Fails the test with the diagnostics on a pipeline error.
inline std::vector<GeneratedKernel>
generateForFile(const std::string &path, const PrecisionCase &mode,
                const graph::GraphBuildTrainingOptions &training) {
  mlir::MLIRContext context;
  registerModelDialects(context);
  llvm::SourceMgr sourceMgr;
  std::string diagnostics;
  llvm::raw_string_ostream os(diagnostics);
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &context, os);
  auto loaded = loadModel(path, sourceMgr, context);
  if (failed(loaded)) {
    ADD_FAILURE() << "cannot load " << path << ":\n" << os.str();
    return {};
  }
  graph::GraphAssignPrecisionOptions precision;
  precision.mode = mode.mode;
  graph::GraphInsertLossScalingOptions scaling;
  scaling.mode = mode.lossScaling;
  if (failed(buildTraining(loaded->model, training)) ||
      failed(assignPrecision(loaded->model, precision, &scaling))) {
    ADD_FAILURE() << "pipeline failed for " << path << ":\n" << os.str();
    return {};
  }
  mlir::PassManager pm(&context, graph::ModelOp::getOperationName());
  pm.addPass(graph::createGraphFuse());
  if (failed(pm.run(loaded->model))) {
    ADD_FAILURE() << "graph-fuse failed for " << path << ":\n" << os.str();
    return {};
  }
  return generateKernels(loaded->model);
}

/// The same with the default training options and \p accumSteps micro steps per step.
inline std::vector<GeneratedKernel> generateForFile(const std::string &path,
                                                    const PrecisionCase &mode, int accumSteps = 1) {
  graph::GraphBuildTrainingOptions training;
  training.accumSteps = accumSteps;
  return generateForFile(path, mode, training);
}

/// Writes \p text to a temporary model file and generates its kernels with \p training.
inline std::vector<GeneratedKernel>
generateForText(const std::string &text, const PrecisionCase &mode,
                const graph::GraphBuildTrainingOptions &training) {
  std::string path = test_support::uniqueTempPath("ampc_codegen_model");
  std::ofstream(path) << text;
  auto kernels = generateForFile(path, mode, training);
  std::remove(path.c_str());
  return kernels;
}

/// Writes \p text to a temporary model file and generates its kernels.
inline std::vector<GeneratedKernel> generateForText(const std::string &text,
                                                    const PrecisionCase &mode, int accumSteps = 1) {
  graph::GraphBuildTrainingOptions training;
  training.accumSteps = accumSteps;
  return generateForText(text, mode, training);
}

inline const GeneratedKernel *findKernel(const std::vector<GeneratedKernel> &kernels,
                                  const std::string &kind, const std::string &op) {
  for (const GeneratedKernel &kernel : kernels)
    if (kernel.kind == kind)
      for (const std::string &fused : kernel.fusedOps)
        if (fused.rfind(op + " at ", 0) == 0)
          return &kernel;
  return nullptr;
}

} // namespace ampc

#endif // AMPC_TEST_UNIT_COMPILER_CODEGENHELPERS_H
