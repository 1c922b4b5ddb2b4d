//===- FuzzModel.cpp - Fuzz target: a model file through `ampc plan --train` ===//
//
// The input is a model file (graph-dialect MLIR text). It goes through what `ampc plan --train`
// runs on it (compiler/tools/AmpcCommands.cpp, compileTrainingStep): parse and verify
// (loadModel), the training pipeline, the peak-memory check, plan emission, the device program's
// kernels generated (not compiled: the fuzz build has no NVRTC), the gradient buckets, and the
// plan's encoding. Diagnostics are the expected answer to a bad model (FuzzDiagnostics.h).
//
// A first line "// ampc-training-pipeline: OPTIONS" sets the pipeline's options, in
// ampc-opt's --ampc-training-pipeline syntax ("precision=fp16 memory-budget=50%"), so the
// corpus also covers other precisions, loss scaling and rematerialization; without it the
// defaults of `ampc plan --train` apply. The parser skips the line as a comment.
//
//===----------------------------------------------------------------------===//

#include "compiler/cuda/DeviceProgramBuilder.h"
#include "compiler/lowering/ModelLoader.h"
#include "compiler/lowering/PlanEmitter.h"
#include "compiler/report/MemoryReport.h"
#include "fuzz/FuzzDiagnostics.h"
#include "fuzz/FuzzSupport.h"
#include "runtime/plan/GradientBuckets.h"
#include "runtime/plan/Plan.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/raw_ostream.h"

#include <sstream>

using namespace ampc;

namespace {

/// The pipeline's configuration from the input's first line, or the defaults.
graph::TrainingPipelineConfig pipelineConfig(llvm::StringRef text) {
  constexpr llvm::StringLiteral kDirective = "// ampc-training-pipeline:";
  graph::TrainingPipelineOptions options;
  if (text.starts_with(kDirective)) {
    llvm::StringRef line = text.substr(kDirective.size()).split('\n').first;
    if (failed(options.parseFromString(line.trim(), llvm::nulls())))
      return graph::TrainingPipelineOptions().config();
  }
  graph::TrainingPipelineConfig config = options.config();
  // A policy names a file to read: not the input's business.
  config.precision.policyFile.clear();
  return config;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string path = fuzz::writeScratchFile("model.mlir", data, size);
  const graph::TrainingPipelineConfig config =
      pipelineConfig(llvm::StringRef(reinterpret_cast<const char *>(data), size));

  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  registerModelDialects(context);
  context.printOpOnDiagnostic(false);
  fuzz::handleDiagnostics(context);
  llvm::SourceMgr sourceMgr;
  try {
    mlir::FailureOr<LoadedModel> loaded = loadModel(path, sourceMgr, context);
    if (failed(loaded) || failed(runTrainingPipeline(*loaded, config)))
      return 0;
    // compileTrainingStep refuses a step over 64 TiB before emitting it.
    if (memoryTotals(loaded->model).peak > (int64_t(1) << 46))
      return 0;
    PlanProvenance provenance;
    mlir::FailureOr<plan::Plan> compiled = emitPlan(loaded->model, &provenance, &loaded->given);
    if (failed(compiled))
      return 0;
    // attachDeviceProgram turns any failure to build the device program into a plan without
    // GPU code and a warning.
    try {
      DeviceProgramSources sources = buildDeviceProgram(loaded->model, *compiled, provenance);
      (void)sources;
    } catch (const std::exception &) {
    }
    plan::assignGradientBuckets(*compiled, plan::kDefaultGradientBucketBytes);
    std::ostringstream encoded;
    plan::writePlan(*compiled, encoded);
  } catch (const std::runtime_error &) {
    // ampc prints these as one-line errors (ampc.cpp's main).
  }
  return 0;
}
