//===- TrainingPipeline.cpp - the one pass pipeline of a training step ----===//
//
// buildTrainingPipeline() is the only place the training step's pass order is written; the
// ampc driver and ampc-opt's --ampc-training-pipeline both call it.
//
//===----------------------------------------------------------------------===//

#include "passes/TrainingPipeline.h"

#include "mlir/Pass/PassRegistry.h"

namespace ampc::graph {

void buildTrainingPipeline(mlir::OpPassManager &pm, const TrainingPipelineConfig &config,
                           PipelinePart part) {
  mlir::OpPassManager &model = pm.nest<ModelOp>();
  if (part != PipelinePart::MemoryPlanning) {
    model.addPass(createGraphInlineCalls());
    model.addPass(createGraphRaiseFusedOps());
    model.addPass(createGraphPackQkvAttention());
    model.addPass(createGraphBuildTraining(config.training));
    model.addPass(createGraphChunkClassifier(config.classifier));
    model.addPass(createGraphAssignPrecision(config.precision));
    model.addPass(createGraphInsertLossScaling(config.scaling));
    model.addPass(createGraphSaveAttentionLse());
  }
  if (part == PipelinePart::TrainingStep)
    return;
  if (!config.memoryBudget.empty()) {
    GraphPlanRematOptions remat;
    remat.budget = config.memoryBudget;
    remat.workspace = std::to_string(config.workspaceBytes);
    model.addPass(createGraphPlanRemat(remat));
  }
  // The CUDA backend's form of the step: fused groups, then their values placed in arenas.
  // Both only add attributes, so plan emission (and the CPU backend) sees the same ops.
  model.addPass(createGraphFuse());
  model.addPass(createGraphPlanMemory());
}

TrainingPipelineConfig TrainingPipelineOptions::config() const {
  TrainingPipelineConfig config;
  GraphBuildTrainingOptions &training = config.training;
  training.accumSteps = accumSteps;
  training.optimizer = optimizer;
  training.lr = lr;
  training.beta1 = beta1;
  training.beta2 = beta2;
  training.eps = eps;
  training.weightDecay = weightDecay;
  training.momentum = momentum;
  training.clipNorm = clipNorm;
  training.schedule = schedule;
  training.warmupSteps = warmupSteps;
  training.decaySteps = decaySteps;
  training.minLr = minLr;
  GraphAssignPrecisionOptions &mixed = config.precision;
  mixed.mode = precision;
  mixed.policyFile = policy;
  mixed.reducedOps = reducedOps;
  mixed.fp32Ops = fp32Ops;
  mixed.followOps = followOps;
  mixed.storeFp32Ops = storeFp32Ops;
  GraphInsertLossScalingOptions &scaling = config.scaling;
  scaling.mode = lossScaling;
  scaling.initialScale = initialLossScale;
  scaling.growthInterval = lossScaleGrowthInterval;
  scaling.growthFactor = lossScaleGrowthFactor;
  scaling.backoffFactor = lossScaleBackoffFactor;
  scaling.minScale = lossScaleFloor;
  scaling.debugNonfinite = debugNonfinite;
  config.classifier.chunkBytes = classifierChunk;
  config.memoryBudget = memoryBudget;
  return config;
}

void registerTrainingPipeline() {
  mlir::PassPipelineRegistration<TrainingPipelineOptions>(
      "ampc-training-pipeline",
      "The passes `ampc compile` runs, with its options: the training step derived, precision "
      "assigned, loss scaling, rematerialization (with memory-budget), fusion and memory "
      "planning",
      [](mlir::OpPassManager &pm, const TrainingPipelineOptions &options) {
        buildTrainingPipeline(pm, options.config());
      });
}

} // namespace ampc::graph
