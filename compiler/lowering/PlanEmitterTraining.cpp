//===- PlanEmitterTraining.cpp - gradient and training ops to a plan ------===//
//
// What graph-build-training and the passes after it write: the gradient ops, the gradient seed
// and accumulation, the loss scale's reads and updates, the global norm, the learning-rate
// schedule and the optimizer updates, lowered into the step being emitted; and the plan's
// one-line summary of the optimizer's settings.
//
//===--------------------------------------------------------------------------===//

#include "compiler/lowering/PlanEmitterImpl.h"
#include "compiler/support/Format.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

using namespace mlir;
using namespace ampc::graph;
namespace plan = ampc::plan;

namespace ampc::planemitter {

/// The gradient ops and the training-state ops.
LogicalResult Emitter::emitTrainingOp(Operation *op) {
  using plan::OpCode;
  auto flag = [](bool value) { return int64_t(value); };
  auto plain = [&](OpCode code) {
    return addInstruction(op, code, op->getOperands(), op->getResults());
  };
  // Hyper-parameters are stored as f64 whatever the precision of the attribute in the IR.
  auto real = [](llvm::APFloat value) { return value.convertToDouble(); };
  // An optimizer update's optional operands: (found, applied_steps) when it skips on overflow,
  // then the parameter copy it refreshes (also a result).
  // The operand order is fixed by the plan format: the in-place symbols, then (lr, grad_norm),
  // then these optional tails; the backends recognise them by the operand count.
  auto addSkipAndCopy = [&](bool skips, FlatSymbolRefAttr copy) {
    plan::Instruction &added = instructions->back();
    if (skips) {
      added.operands.push_back(result.lossScaling.foundNonFinite);
      added.operands.push_back(result.lossScaling.appliedSteps);
    }
    if (copy) {
      uint32_t buffer = symbolBuffer.lookup(copy.getValue());
      added.operands.push_back(buffer);
      added.results.push_back(buffer);
    }
    return success();
  };
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
  // Each activation gradient opcode is lowered from the graph op of its name.
#define AMPC_UNARY_GRAD_OP(Name, ...) .Case([&](Name##Op) { return plain(OpCode::Name); })
#include "runtime/plan/OpCodes.def"
      .Case([&](SoftmaxGradOp) { return plain(OpCode::SoftmaxGrad); })
      .Case([&](BatchNormGradOp norm) {
        return addInstruction(op, OpCode::BatchNormGrad, op->getOperands(), op->getResults(),
                              {plan::attr::epsilon(real(norm.getEpsilon()))});
      })
      .Case([&](ClipGradOp clip) {
        return emitClip(op, OpCode::ClipGrad, clip.getMin(), clip.getMax());
      })
      .Case([&](Conv2dGradInputOp conv) { return emitConv2d(op, OpCode::Conv2dGradInput, conv); })
      .Case([&](Conv2dGradWeightOp conv) { return emitConv2d(op, OpCode::Conv2dGradWeight, conv); })
      .Case([&](MaxPool2dGradOp pool) { return emitPool2d(op, OpCode::MaxPool2dGrad, pool); })
      .Case([&](AvgPool2dGradOp pool) { return emitPool2d(op, OpCode::AvgPool2dGrad, pool); })
      .Case([&](EmbeddingGradOp) { return plain(OpCode::EmbeddingGrad); })
      .Case([&](GeluGradOp gelu) {
        int64_t tanhForm = gelu.getApproximation() == GeluApproximation::tanh;
        return addInstruction(op, OpCode::GeluGrad, op->getOperands(), op->getResults(),
                              {plan::attr::approximate(tanhForm)});
      })
      .Case([&](PadOp pad) {
        return addInstruction(op, OpCode::Pad, op->getOperands(), op->getResults(),
                              {plan::attr::low(toVector(pad.getLow()))});
      })
      .Case([&](MaxGradOp max) {
        return addInstruction(op, OpCode::MaxGrad, op->getOperands(), op->getResults(),
                              {plan::attr::axes(toVector(max.getAxes())),
                               plan::attr::keepdims(flag(max.getKeepdims()))});
      })
      .Case([&](LayerNormGradOp norm) {
        return addInstruction(op, OpCode::LayerNormGrad, op->getOperands(), op->getResults(),
                              {plan::attr::epsilon(real(norm.getEpsilon()))});
      })
      .Case([&](RmsNormGradOp norm) {
        return addInstruction(op, OpCode::RmsNormGrad, op->getOperands(), op->getResults(),
                              {plan::attr::epsilon(real(norm.getEpsilon()))});
      })
      .Case([&](AttentionGradOp attention) {
        return addInstruction(op, OpCode::AttentionGrad, op->getOperands(), op->getResults(),
                              {plan::attr::causal(flag(attention.getCausal())),
                               plan::attr::scale(attention.getEffectiveScale())});
      })
      .Case([&](QkvAttentionGradOp attention) {
        return addInstruction(op, OpCode::QkvAttentionGrad, op->getOperands(), op->getResults(),
                              {plan::attr::heads(static_cast<int64_t>(attention.getHeads())),
                               plan::attr::causal(flag(attention.getCausal())),
                               plan::attr::scale(attention.getEffectiveScale())});
      })
      .Case([&](CrossEntropyGradOp loss) {
        return addInstruction(op, OpCode::CrossEntropyGrad, op->getOperands(), op->getResults(),
                              {plan::attr::ignoreIndex(int64_t(loss.getIgnoreIndex())),
                               plan::attr::reduction(int64_t(loss.getReduction()))});
      })
      // The gradient seed is the first op of the backward pass; its accum_steps is the plan's
      // accumulation count, since the seed 1/accum_steps (times the loss scale) makes the
      // accumulated gradient a mean over the micro steps.
      .Case([&](GradSeedOp seed) {
        result.accumulationSteps = static_cast<int64_t>(seed.getAccumSteps());
        return addInstruction(op, OpCode::GradSeed, op->getOperands(), op->getResults(),
                              {plan::attr::accumSteps(result.accumulationSteps)});
      })
      .Case([&](AccumulateGradOp accumulate) {
        if (failed(addInPlace(op, OpCode::Accumulate, {accumulate.getAccumulatorAttr()},
                              accumulate.getGrad(), {})))
          return failure();
        // Under loss scaling the accumulation also divides by the scale and raises found_nonfinite
        // when an unscaled value is inf or NaN; the flag is an operand and a result because it is
        // only ever set, never cleared, within an optimizer step.
        if (accumulate.getUnscale()) {
          // (acc, g, scale, found) -> (acc, found)
          plan::Instruction &added = instructions->back();
          added.operands.push_back(result.lossScaling.scale);
          added.operands.push_back(result.lossScaling.foundNonFinite);
          added.results.push_back(result.lossScaling.foundNonFinite);
        }
        return success();
      })
      // Reading the scale aliases the scaler's state buffer, like a symbol read.
      .Case([&](GetLossScaleOp read) {
        bufferOf[read.getResult()] = result.lossScaling.scale;
        return success();
      })
      // The scaler's four state buffers are read and updated in place; floor_hits is not an
      // operand (see emitLossScaler). The settings travel as attributes so the instruction is
      // self-contained for the CPU executor.
      .Case([&](UpdateLossScaleOp) {
        const plan::LossScaling &scaling = result.lossScaling;
        plan::Instruction update;
        update.op = OpCode::UpdateLossScale;
        update.location = formatLocation(op->getLoc());
        update.operands = {scaling.scale, scaling.growthTracker, scaling.foundNonFinite,
                           scaling.appliedSteps};
        update.results = update.operands;
        update.attrs = {plan::attr::dynamic(int64_t(scaling.mode == plan::LossScaleMode::Dynamic)),
                        plan::attr::growthFactor(double(scaling.growthFactor)),
                        plan::attr::backoffFactor(double(scaling.backoffFactor)),
                        plan::attr::growthInterval(scaling.growthInterval),
                        plan::attr::minScale(double(scaling.minScale))};
        instructions->push_back(std::move(update));
        return success();
      })
      // The global norm reads the gradient accumulators by symbol (not SSA values) and produces one
      // f32 scalar: sqrt of the sum of squares over all of them. It cannot use addInstruction,
      // whose operands must be SSA values.
      .Case([&](GlobalNormOp norm) {
        plan::Instruction instruction;
        instruction.op = OpCode::GlobalNorm;
        instruction.location = formatLocation(op->getLoc());
        for (Attribute state : norm.getStates())
          instruction.operands.push_back(
              symbolBuffer.lookup(llvm::cast<FlatSymbolRefAttr>(state).getValue()));
        auto buffer =
            addBuffer(op->getLoc(), "o" + std::to_string(instructions->size()) + ".global_norm",
                      norm.getType(), plan::BufferRole::Temporary);
        if (failed(buffer))
          return failure();
        instruction.results.push_back(*buffer);
        bufferOf[norm.getResult()] = *buffer;
        instructions->push_back(std::move(instruction));
        return success();
      })
      .Case([&](LrScheduleOp schedule) {
        return addInstruction(op, OpCode::LrSchedule, {}, op->getResults(),
                              {plan::attr::kind(int64_t(schedule.getKind())),
                               plan::attr::lr(real(schedule.getLr())),
                               plan::attr::minLr(real(schedule.getMinLr())),
                               plan::attr::warmupSteps(int64_t(schedule.getWarmupSteps())),
                               plan::attr::decaySteps(int64_t(schedule.getDecaySteps()))});
      })
      // (param, grad, m, v) are updated in place; the gradient accumulator is among them because
      // the update zeroes it for the next step's accumulation.
      .Case([&](AdamWOp adamw) {
        if (failed(addInPlace(op, OpCode::AdamW,
                              {adamw.getParamAttr(), adamw.getGradAttr(),
                               adamw.getFirstMomentAttr(), adamw.getSecondMomentAttr()},
                              {adamw.getLr(), adamw.getGradNorm()},
                              {plan::attr::beta1(real(adamw.getBeta1())),
                               plan::attr::beta2(real(adamw.getBeta2())),
                               plan::attr::eps(real(adamw.getEps())),
                               plan::attr::weightDecay(real(adamw.getWeightDecay())),
                               plan::attr::clipNorm(real(adamw.getClipNorm()))})))
          return failure();
        return addSkipAndCopy(adamw.getSkipNonfinite().has_value(), adamw.getCopyAttr());
      })
      .Case([&](SgdOp sgd) {
        if (failed(addInPlace(op, OpCode::Sgd,
                              {sgd.getParamAttr(), sgd.getGradAttr(), sgd.getMomentumBufferAttr()},
                              {sgd.getLr(), sgd.getGradNorm()},
                              {plan::attr::momentum(real(sgd.getMomentum())),
                               plan::attr::weightDecay(real(sgd.getWeightDecay())),
                               plan::attr::clipNorm(real(sgd.getClipNorm()))})))
          return failure();
        return addSkipAndCopy(sgd.getSkipNonfinite().has_value(), sgd.getCopyAttr());
      })
      .Default([&](Operation *other) {
        return other->emitError("'") << other->getName() << "' cannot be lowered to a plan";
      });
}

/// One line for logs: the optimizer, its hyper-parameters and the schedule, read from the
/// first update and the schedule op of the optimizer step.
void Emitter::describeTraining() {
  std::string text;
  llvm::raw_string_ostream os(text);
  // Every update of a step shares the optimizer settings, so the first one found describes them;
  // the schedule op is unique.
  auto fmt = [](llvm::APFloat value) { return formatReal(value.convertToDouble()); };
  AdamWOp adamw;
  SgdOp sgd;
  LrScheduleOp schedule;
  model.walk([&](Operation *op) {
    if (auto found = llvm::dyn_cast<AdamWOp>(op); found && !adamw)
      adamw = found;
    if (auto found = llvm::dyn_cast<SgdOp>(op); found && !sgd)
      sgd = found;
    if (auto found = llvm::dyn_cast<LrScheduleOp>(op))
      schedule = found;
  });
  if (adamw)
    os << "adamw betas=(" << fmt(adamw.getBeta1()) << ", " << fmt(adamw.getBeta2())
       << ") eps=" << fmt(adamw.getEps()) << " clip_norm=" << fmt(adamw.getClipNorm());
  if (sgd)
    os << "sgd momentum=" << fmt(sgd.getMomentum()) << " clip_norm=" << fmt(sgd.getClipNorm());
  if (schedule) {
    os << " lr=" << fmt(schedule.getLr()) << " schedule=" << stringifyLrSchedule(schedule.getKind())
       << " warmup=" << schedule.getWarmupSteps();
    if (schedule.getKind() == LrSchedule::cosine)
      os << " min_lr=" << fmt(schedule.getMinLr()) << " decay_steps="
         << (schedule.getDecaySteps() ? std::to_string(schedule.getDecaySteps())
                                      : std::string("run length"));
  }
  // Weight decay differs per parameter (none for biases and gains): report the decayed value.
  double decay = 0;
  model.walk([&](AdamWOp op) { decay = std::max(decay, op.getWeightDecay().convertToDouble()); });
  model.walk([&](SgdOp op) { decay = std::max(decay, op.getWeightDecay().convertToDouble()); });
  os << " weight_decay=" << formatReal(decay) << " accum_steps=" << result.accumulationSteps;
  auto precision = model->getAttrOfType<StringAttr>(graph::GraphDialect::kPrecisionModeAttrName);
  os << " precision=" << (precision ? precision.getValue() : llvm::StringRef("fp32"));
  // Growth and backoff apply only to dynamic scaling; a static scale is just its initial value.
  if (result.lossScaling.mode != plan::LossScaleMode::None) {
    const plan::LossScaling &scaling = result.lossScaling;
    os << " loss_scaling=" << (scaling.mode == plan::LossScaleMode::Dynamic ? "dynamic" : "static")
       << "(initial=" << formatReal(scaling.initialScale);
    if (scaling.mode == plan::LossScaleMode::Dynamic)
      os << " growth=" << formatReal(scaling.growthFactor) << "/" << scaling.growthInterval
         << " backoff=" << formatReal(scaling.backoffFactor)
         << " floor=" << formatReal(scaling.minScale);
    os << ")";
  }
  result.trainingSummary = text;
}

} // namespace ampc::planemitter
