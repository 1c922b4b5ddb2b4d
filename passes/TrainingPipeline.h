//===- TrainingPipeline.h - the one pass pipeline of a training step -*- C++ -*-===//
//
// The passes `ampc compile`, `ampc plan --train` and `ampc report` run on a model. Their order
// is written in one place, buildTrainingPipeline() (TrainingPipeline.cpp): from
// graph-inline-calls, which flattens the model, to graph-plan-memory, which places the fused
// step's values in arenas; graph-plan-remat runs only with a memory budget. The pipeline is
// registered in ampc-opt as --ampc-training-pipeline with the options and defaults of
// `ampc compile` (same names), so
//   ampc-opt model.mlir --ampc-training-pipeline="precision=fp16 memory-budget=50%"
// prints exactly the IR that `ampc compile model.mlir --precision fp16 --memory-budget 50%`
// lowers to its plan.
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_PASSES_TRAININGPIPELINE_H
#define AMPC_PASSES_TRAININGPIPELINE_H

#include "passes/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

#include <cstdint>
#include <string>

namespace ampc::graph {

/// The persistent bytes a training step reserves for cuBLASLt's matmul workspace, counted by
/// rematerialization against the memory budget.
inline constexpr int64_t kMatmulWorkspaceBytes = 32ll << 20;

/// What the pipeline's passes are given; the defaults are `ampc compile`'s.
struct TrainingPipelineConfig {
  GraphBuildTrainingOptions training;
  GraphChunkClassifierOptions classifier;
  GraphAssignPrecisionOptions precision;
  GraphInsertLossScalingOptions scaling;
  /// graph-plan-remat's budget ("6GiB", "75%"); empty: no rematerialization.
  std::string memoryBudget;
  /// Persistent bytes for the matmul workspace (graph-plan-remat's workspace).
  int64_t workspaceBytes = kMatmulWorkspaceBytes;
};

/// The two halves of the pipeline, for tools that look at the step between them (`ampc report
/// memory` plans its budgets on the step as written, as graph-plan-remat does).
enum class PipelinePart {
  /// Everything before rematerialization: the training step derived (its output head in row
  /// chunks where the logits are large), precision assigned, loss scaling inserted, attention's
  /// lse saved for its gradient.
  TrainingStep,
  /// Rematerialization (with a budget), fusion and memory planning.
  MemoryPlanning,
  /// Both.
  All,
};

/// Adds the training pipeline for \p config (or one \p part of it) to \p pm, which runs on a
/// builtin.module holding a graph.model (the passes are nested on the model).
void buildTrainingPipeline(mlir::OpPassManager &pm, const TrainingPipelineConfig &config,
                           PipelinePart part = PipelinePart::All);

/// The pipeline's options as ampc-opt parses them: the flag names of `ampc compile`.
struct TrainingPipelineOptions : mlir::PassPipelineOptions<TrainingPipelineOptions> {
  // graph-build-training
  Option<int64_t> accumSteps{*this, "accum-steps", llvm::cl::desc("micro-batches per step"),
                             llvm::cl::init(1)};
  Option<std::string> optimizer{*this, "optimizer", llvm::cl::desc("adamw or sgd"),
                                llvm::cl::init("adamw")};
  Option<double> lr{*this, "lr", llvm::cl::desc("peak learning rate"), llvm::cl::init(3e-4)};
  Option<double> beta1{*this, "beta1", llvm::cl::desc("AdamW first-moment decay"),
                       llvm::cl::init(0.9)};
  Option<double> beta2{*this, "beta2", llvm::cl::desc("AdamW second-moment decay"),
                       llvm::cl::init(0.95)};
  Option<double> eps{*this, "eps", llvm::cl::desc("AdamW epsilon"), llvm::cl::init(1e-8)};
  Option<double> weightDecay{*this, "weight-decay", llvm::cl::desc("decoupled weight decay"),
                             llvm::cl::init(0.1)};
  Option<double> momentum{*this, "momentum", llvm::cl::desc("SGD momentum"), llvm::cl::init(0.9)};
  Option<double> clipNorm{*this, "clip-norm", llvm::cl::desc("global-norm clip (0: off)"),
                          llvm::cl::init(1.0)};
  Option<std::string> schedule{*this, "schedule", llvm::cl::desc("constant or cosine"),
                               llvm::cl::init("constant")};
  Option<int64_t> warmupSteps{*this, "warmup-steps", llvm::cl::desc("linear warmup steps"),
                              llvm::cl::init(0)};
  Option<int64_t> decaySteps{*this, "decay-steps",
                             llvm::cl::desc("cosine: steps to min-lr (0: the run's)"),
                             llvm::cl::init(0)};
  Option<double> minLr{*this, "min-lr", llvm::cl::desc("cosine: final rate (<0: lr / 10)"),
                       llvm::cl::init(-1.0)};
  // graph-chunk-classifier
  Option<std::string> classifierChunk{
      *this, "classifier-chunk",
      llvm::cl::desc("logits over this many bytes (f32) are computed in row chunks (0: whole)"),
      llvm::cl::init("256MiB")};
  // graph-assign-precision
  Option<std::string> precision{*this, "precision", llvm::cl::desc("bf16, fp16 or fp32"),
                                llvm::cl::init("bf16")};
  Option<std::string> policy{*this, "policy", llvm::cl::desc("precision policy file"),
                             llvm::cl::init("")};
  Option<std::string> reducedOps{*this, "reduced-ops", llvm::cl::desc("op kinds to run reduced"),
                                 llvm::cl::init("")};
  Option<std::string> fp32Ops{*this, "fp32-ops", llvm::cl::desc("op kinds to run in f32"),
                              llvm::cl::init("")};
  Option<std::string> followOps{
      *this, "follow-ops", llvm::cl::desc("op kinds that follow their inputs"), llvm::cl::init("")};
  Option<std::string> storeFp32Ops{*this, "store-fp32-ops",
                                   llvm::cl::desc("op kinds whose results are stored in f32"),
                                   llvm::cl::init("")};
  // graph-insert-loss-scaling
  Option<std::string> lossScaling{*this, "loss-scaling",
                                  llvm::cl::desc("auto, dynamic, static or none"),
                                  llvm::cl::init("auto")};
  Option<double> initialLossScale{*this, "initial-loss-scale",
                                  llvm::cl::desc("the first (or static) scale"),
                                  llvm::cl::init(65536.0)};
  Option<int64_t> lossScaleGrowthInterval{*this, "loss-scale-growth-interval",
                                          llvm::cl::desc("finite steps before the scale grows"),
                                          llvm::cl::init(2000)};
  Option<double> lossScaleGrowthFactor{*this, "loss-scale-growth-factor",
                                       llvm::cl::desc("the scale's growth after the interval"),
                                       llvm::cl::init(2.0)};
  Option<double> lossScaleBackoffFactor{*this, "loss-scale-backoff-factor",
                                        llvm::cl::desc("the scale's cut after an overflow"),
                                        llvm::cl::init(0.5)};
  Option<double> lossScaleFloor{*this, "loss-scale-floor", llvm::cl::desc("the smallest scale"),
                                llvm::cl::init(1.0)};
  Option<bool> debugNonfinite{*this, "debug-nonfinite",
                              llvm::cl::desc("name the first op that overflows"),
                              llvm::cl::init(false)};
  // graph-plan-remat
  Option<std::string> memoryBudget{*this, "memory-budget",
                                   llvm::cl::desc("rematerialize to fit (empty: off)"),
                                   llvm::cl::init("")};

  /// The configuration these options describe.
  TrainingPipelineConfig config() const;
};

/// Registers --ampc-training-pipeline (for ampc-opt).
void registerTrainingPipeline();

} // namespace ampc::graph

#endif // AMPC_PASSES_TRAININGPIPELINE_H
