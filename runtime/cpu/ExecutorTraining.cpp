//===- ExecutorTraining.cpp - The CPU executor's training step ------------===//
//
// The parts of TypedExecutor<T> (TypedExecutor.h) that only training plans
// use: the optimizer step, the loss-scale state, parameter copies, non-finite
// tracking, and the gradient, optimizer and loss-scaling instructions
// (executeTraining).
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/TypedExecutor.h"

namespace ampc::cpu::detail {

template <typename T> double TypedExecutor<T>::runOptimizerStep(const RunOptions &options) {
  requireTrainingPlan("runOptimizerStep");
  requireParameters();
  runList(plan.optimizerInstructions, optimizerLastUse, options, "optimizer step ", false);
  clearNonFinite = true;
  return static_cast<double>(slots[plan.gradNorm].real.at(0));
}

template <typename T> double TypedExecutor<T>::learningRate() const {
  requireTrainingPlan("learningRate");
  return values(plan.learningRate).at(0);
}

template <typename T> void TypedExecutor<T>::resetState() {
  for (size_t id = 0; id < slots.size(); ++id) {
    if (plan.buffers[id].role != BufferRole::State)
      continue;
    slots[id].real.assign(plan::numElements(plan.buffers[id]), T(0));
    slots[id].ready = true;
  }
  if (scaled())
    slots[plan.lossScaling.scale].real[0] = static_cast<T>(plan.lossScaling.initialScale);
  status = LossScaleStatus();
}

template <typename T> LossScaleStatus TypedExecutor<T>::lossScaleStatus() const {
  LossScaleStatus result = status;
  result.enabled = scaled();
  result.scale = scaled() ? static_cast<double>(slots[plan.lossScaling.scale].real[0]) : 0.0;
  return result;
}

/// Sets the copy of parameter \p source to its values rounded to the
/// copy's dtype (nearest even).
template <typename T> void TypedExecutor<T>::refreshCopy(uint32_t source) {
  const uint32_t id = static_cast<uint32_t>(copyOf[source]);
  const DType dtype = plan.buffers[id].dtype;
  const std::vector<T> &from = slots[source].real;
  std::vector<T> &to = slots[id].real;
  to.resize(from.size());
  for (size_t i = 0; i < from.size(); ++i)
    to[i] = storedValue<T>(static_cast<double>(from[i]), dtype);
  slots[id].ready = slots[source].ready;
}

template <typename T> void TypedExecutor<T>::requireTrainingPlan(const char *what) const {
  if (plan.optimizerInstructions.empty())
    throw plan::PlanError(std::string(what) + ": plan '" + plan.modelName +
                          "' is not a training plan (it has no optimizer "
                          "step)");
}

/// Whether any float result of \p instruction holds an inf or NaN.
template <typename T>
bool TypedExecutor<T>::producesNonFinite(const Instruction &instruction) const {
  for (uint32_t result : instruction.results) {
    if (!plan::isFloatDType(plan.buffers[result].dtype))
      continue;
    for (T value : slots[result].real)
      if (!std::isfinite(value))
        return true;
  }
  return false;
}

/// Copies parameter \p source into its copy \p copy unrounded: the copy
/// is an instruction result, so runList rounds it to its dtype.
template <typename T> void TypedExecutor<T>::copyForRounding(uint32_t source, uint32_t copy) {
  const std::vector<T> &from = slots[source].real;
  slots[copy].real.assign(from.begin(), from.end());
}

template <typename T>
void TypedExecutor<T>::executeTraining(const Instruction &instruction, const RunOptions &options) {
  const std::vector<uint32_t> &operands = instruction.operands;
  const Shape &outShape = shapeOf(instruction.results[0]);
  /// Rows and width of a tensor normalised over its last axis.
  auto rowsOf = [](const Shape &shape, int64_t width) {
    return width == 0 ? int64_t(0) : plan::numElements(shape) / width;
  };
  auto unaryGrad = [&](kernels::UnaryGradOp op) {
    kernels::unaryGrad(op, real(operands[0]), real(operands[1]), realResult(instruction),
                       plan::numElements(outShape));
  };
  switch (instruction.op) {
#define AMPC_UNARY_GRAD_OP(Name, ...)                                                              \
  case OpCode::Name:                                                                               \
    return unaryGrad(kernels::UnaryGradOp::Name);
#include "runtime/plan/OpCodes.def"
  case OpCode::GeluGrad:
    return unaryGrad(plan::get(instruction, plan::attr::approximate)
                         ? kernels::UnaryGradOp::GeluTanhGrad
                         : kernels::UnaryGradOp::GeluErfGrad);
  case OpCode::ClipGrad: {
    const T lo = clipBound<T>(instruction, plan::attr::lower, -1),
            hi = clipBound<T>(instruction, plan::attr::upper, 1);
    const T *x = real(operands[0]), *dy = real(operands[1]);
    T *dx = realResult(instruction);
    for (int64_t e = 0, count = plan::numElements(outShape); e < count; ++e)
      dx[e] = numerics::ops::ClipGrad::apply(x[e], dy[e], lo, hi);
    return;
  }
  case OpCode::BatchNormGrad: {
    const Shape &x = shapeOf(operands[0]);
    kernels::batchNormGrad(real(operands[0]), x[0], x[1], innerExtent(x),
                           real(operands[1]), real(operands[2]),
                           plan::get(instruction, plan::attr::epsilon), realResult(instruction, 0),
                           realResult(instruction, 1), realResult(instruction, 2));
    return;
  }
  case OpCode::UpdateRunningStats: {
    // (mean, var[, count], x), updated in place; nothing while evaluating.
    if (!options.training)
      return;
    const uint32_t input = operands.back();
    const Shape &x = shapeOf(input);
    const bool counts = operands.size() == 4;
    kernels::updateRunningStats(real(input), x[0], x[1], innerExtent(x),
                                plan::get(instruction, plan::attr::momentum),
                                slots[operands[0]].real.data(), slots[operands[1]].real.data(),
                                counts ? slots[operands[2]].real.data() : nullptr);
    return;
  }
  case OpCode::Conv2dGradInput: {
    const Shape &w = shapeOf(operands[1]);
    kernels::conv2dGradInput(real(operands[0]), shapeOf(operands[0]), real(operands[1]), w,
                             instructionWindow(instruction, {w[2], w[3]}),
                             plan::get(instruction, plan::attr::groups), realResult(instruction),
                             outShape);
    return;
  }
  case OpCode::Conv2dGradWeight:
    kernels::conv2dGradWeight(real(operands[0]), shapeOf(operands[0]), real(operands[1]),
                              shapeOf(operands[1]),
                              instructionWindow(instruction, {outShape[2], outShape[3]}),
                              plan::get(instruction, plan::attr::groups), realResult(instruction),
                              outShape);
    return;
  case OpCode::MaxPool2dGrad:
    kernels::maxPool2dGrad(real(operands[0]), shapeOf(operands[0]), real(operands[1]),
                           shapeOf(operands[1]), instructionWindow(instruction, {}),
                           realResult(instruction));
    return;
  case OpCode::AvgPool2dGrad:
    kernels::avgPool2dGrad(real(operands[0]), shapeOf(operands[0]),
                           instructionWindow(instruction, {}),
                           plan::get(instruction, plan::attr::countIncludePad) != 0,
                           realResult(instruction), outShape);
    return;
  case OpCode::Pad: {
    const std::vector<int64_t> &low = plan::get(instruction, plan::attr::low);
    if (plan::isIntegerDType(plan.buffers[operands[0]].dtype)) {
      std::vector<int64_t> &out = slots[instruction.results[0]].integer;
      out.resize(plan::numElements(outShape));
      kernels::pad(integer(operands[0]), shapeOf(operands[0]), low, out.data(), outShape);
    } else {
      kernels::pad(real(operands[0]), shapeOf(operands[0]), low, realResult(instruction), outShape);
    }
    return;
  }
  case OpCode::MaxGrad:
    kernels::maxGrad(real(operands[0]), shapeOf(operands[0]),
                     plan::get(instruction, plan::attr::axes), real(operands[1]),
                     realResult(instruction));
    return;
  case OpCode::EmbeddingGrad:
    kernels::embeddingGrad(integer(operands[0]), plan::numElements(shapeOf(operands[0])),
                           real(operands[1]), outShape[0], outShape[1], realResult(instruction));
    return;
  case OpCode::LayerNormGrad:
  case OpCode::RmsNormGrad: {
    const Shape &x = shapeOf(operands[0]);
    const int64_t width = x.back();
    const double epsilon = plan::get(instruction, plan::attr::epsilon);
    T *dx = realResult(instruction, 0), *dgamma = realResult(instruction, 1);
    if (instruction.op == OpCode::LayerNormGrad)
      kernels::layerNormGrad(real(operands[0]), rowsOf(x, width), width, real(operands[1]),
                             real(operands[2]), epsilon, dx, dgamma, realResult(instruction, 2));
    else
      kernels::rmsNormGrad(real(operands[0]), rowsOf(x, width), width, real(operands[1]),
                           real(operands[2]), epsilon, dx, dgamma);
    return;
  }
  case OpCode::SoftmaxGrad: {
    const Shape &y = shapeOf(operands[0]);
    kernels::softmaxGrad(real(operands[0]), real(operands[1]), rowsOf(y, y.back()), y.back(),
                         realResult(instruction));
    return;
  }
  case OpCode::AttentionGrad: {
    const Shape &q = shapeOf(operands[0]), &k = shapeOf(operands[1]), &v = shapeOf(operands[2]);
    const int64_t batch = plan::numElements(Shape(q.begin(), q.end() - 2));
    kernels::attentionGrad(
        real(operands[0]), real(operands[1]), real(operands[2]), real(operands[3]), batch,
        q[q.size() - 2], k[k.size() - 2], q.back(), v.back(),
        plan::get(instruction, plan::attr::scale), plan::get(instruction, plan::attr::causal) != 0,
        realResult(instruction, 0), realResult(instruction, 1), realResult(instruction, 2));
    return;
  }
  case OpCode::QkvAttentionGrad: {
    // The saved o and lse (operands 2 and 3), when given, are not needed: P is recomputed.
    const Shape &qkv = shapeOf(operands[0]);
    const int64_t heads = plan::get(instruction, plan::attr::heads);
    kernels::qkvAttentionGrad(
        real(operands[0]), real(operands[1]), plan::numElements(Shape(qkv.begin(), qkv.end() - 2)),
        qkv[qkv.size() - 2], heads, qkv.back() / (3 * heads),
        plan::get(instruction, plan::attr::scale), plan::get(instruction, plan::attr::causal) != 0,
        realResult(instruction));
    return;
  }
  case OpCode::CrossEntropyGrad: {
    const Shape &logits = shapeOf(operands[0]);
    // In place (adoptOperand): the result's storage holds the logits.
    T *gradient = realResult(instruction);
    kernels::crossEntropyGrad(
        adoptedLogits ? gradient : real(operands[0]), plan::numElements(shapeOf(operands[1])),
        logits.back(), integer(operands[1]), plan::get(instruction, plan::attr::ignoreIndex),
        plan::get(instruction, plan::attr::reduction) == 1, real(operands[2])[0], gradient);
    return;
  }
  case OpCode::GradSeed: {
    // The loss scale (or 1) divided by the micro steps per optimizer step.
    const T scale = operands.empty() ? T(1) : real(operands[0])[0];
    realResult(instruction)[0] =
        scale / static_cast<T>(plan::get(instruction, plan::attr::accumSteps));
    return;
  }
  case OpCode::Accumulate: {
    const int64_t count = plan::numElements(shapeOf(operands[0]));
    if (operands.size() == 2) {
      kernels::accumulate(mutableReal(operands[0]), real(operands[1]), count);
      return;
    }
    // (acc, g, scale, found): unscale, and flag a non-finite gradient.
    if (kernels::accumulateUnscaled(mutableReal(operands[0]), real(operands[1]),
                                    real(operands[2])[0], count))
      mutableReal(operands[3])[0] = T(1);
    return;
  }
  case OpCode::GlobalNorm: {
    double total = 0;
    for (uint32_t operand : operands)
      kernels::addSquares(real(operand), plan::numElements(shapeOf(operand)), total);
    if (options.combineSquares)
      total = options.combineSquares(total);
    realResult(instruction)[0] = static_cast<T>(std::sqrt(total));
    return;
  }
  case OpCode::LrSchedule: {
    kernels::LrSchedule schedule;
    schedule.kind = plan::get(instruction, plan::attr::kind);
    schedule.lr = plan::get(instruction, plan::attr::lr);
    schedule.minLr = plan::get(instruction, plan::attr::minLr);
    schedule.warmupSteps = plan::get(instruction, plan::attr::warmupSteps);
    schedule.decaySteps = plan::get(instruction, plan::attr::decaySteps);
    realResult(instruction)[0] =
        static_cast<T>(kernels::scheduledLearningRate(schedule, options.step, options.totalSteps));
    return;
  }
  case OpCode::AdamW: {
    if (options.ownedParameters && !(*options.ownedParameters)[operands[0]])
      return; // another rank's shard (ZeRO-1)
    kernels::AdamWConfig config;
    config.lr = static_cast<double>(real(operands[4])[0]);
    config.beta1 = plan::get(instruction, plan::attr::beta1);
    config.beta2 = plan::get(instruction, plan::attr::beta2);
    config.eps = plan::get(instruction, plan::attr::eps);
    config.weightDecay = plan::get(instruction, plan::attr::weightDecay);
    config.clip = kernels::clipCoefficient(plan::get(instruction, plan::attr::clipNorm),
                                           static_cast<double>(real(operands[5])[0]));
    // (param, grad, m, v, lr, norm[, found, applied][, copy]).
    const size_t count = operands.size();
    const bool scaledStep = count >= 8;
    // torch counts only the steps it applies.
    config.t = scaledStep ? static_cast<uint64_t>(real(operands[7])[0]) + 1 : options.step + 1;
    const int64_t elements = plan::numElements(shapeOf(operands[0]));
    if (scaledStep && real(operands[6])[0] != T(0))
      std::fill_n(mutableReal(operands[1]), elements, T(0)); // skipped
    else
      kernels::adamW(config, mutableReal(operands[0]), mutableReal(operands[1]),
                     mutableReal(operands[2]), mutableReal(operands[3]), elements);
    if (count == 7 || count == 9)
      copyForRounding(operands[0], operands[count - 1]);
    return;
  }
  case OpCode::Sgd: {
    if (options.ownedParameters && !(*options.ownedParameters)[operands[0]])
      return; // another rank's shard (ZeRO-1)
    kernels::SgdConfig config;
    config.lr = static_cast<double>(real(operands[3])[0]);
    config.momentum = plan::get(instruction, plan::attr::momentum);
    config.weightDecay = plan::get(instruction, plan::attr::weightDecay);
    config.clip = kernels::clipCoefficient(plan::get(instruction, plan::attr::clipNorm),
                                           static_cast<double>(real(operands[4])[0]));
    // (param, grad, buf, lr, norm[, found, applied][, copy]).
    const size_t count = operands.size();
    const int64_t elements = plan::numElements(shapeOf(operands[0]));
    if (count >= 7 && real(operands[5])[0] != T(0))
      std::fill_n(mutableReal(operands[1]), elements, T(0)); // skipped
    else
      kernels::sgd(config, mutableReal(operands[0]), mutableReal(operands[1]),
                   mutableReal(operands[2]), elements);
    if (count == 6 || count == 8)
      copyForRounding(operands[0], operands[count - 1]);
    return;
  }
  case OpCode::UpdateLossScale: {
    // (scale, growth tracker, found, applied steps), in place, in f32.
    T *scale = mutableReal(operands[0]), *tracker = mutableReal(operands[1]),
      *found = mutableReal(operands[2]), *applied = mutableReal(operands[3]);
    const bool overflow = found[0] != T(0);
    if (!overflow)
      applied[0] = static_cast<T>(static_cast<float>(applied[0]) + 1.0f);
    status.floorReachedNow = false;
    if (plan::get(instruction, plan::attr::dynamic)) {
      numerics::LossScaleConfig config;
      config.growthFactor = static_cast<float>(plan::get(instruction, plan::attr::growthFactor));
      config.backoffFactor = static_cast<float>(plan::get(instruction, plan::attr::backoffFactor));
      config.growthInterval =
          static_cast<int32_t>(plan::get(instruction, plan::attr::growthInterval));
      config.minScale = static_cast<float>(plan::get(instruction, plan::attr::minScale));
      // The floor count lives in the plan's fifth loss-scaling buffer, as on
      // the device.
      T &hits = slots[plan.lossScaling.floorHits].real[0];
      numerics::LossScaleState state{static_cast<float>(scale[0]), static_cast<int32_t>(tracker[0]),
                                     static_cast<int32_t>(hits)};
      const numerics::LossScaleUpdate update = numerics::updateLossScale(state, config, overflow);
      scale[0] = static_cast<T>(state.scale);
      tracker[0] = static_cast<T>(state.growthTracker);
      hits = static_cast<T>(state.floorHits);
      status.floorReachedNow = update.floorReached;
    }
    found[0] = T(0);
    status.lastStepSkipped = overflow;
    if (overflow)
      ++status.skippedSteps;
    return;
  }
  default:
    return;
  }
}

// Both compute types; execute() is instantiated in Executor.cpp.
template class TypedExecutor<float>;
template class TypedExecutor<double>;

} // namespace ampc::cpu::detail
