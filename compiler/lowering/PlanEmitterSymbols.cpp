//===- PlanEmitterSymbols.cpp - the model's symbols in the plan -----------===//
//
// The model's symbols become the plan's first buffers, in declaration order: parameters with
// their initialisers (or the given values of the weights file), inputs, training state,
// parameter copies and the loss scaler's settings and state. Once the instructions exist, the
// integer inputs get the range of values the ops that index with them accept.
//
//===--------------------------------------------------------------------------===//

#include "compiler/lowering/PlanEmitterImpl.h"

#include <algorithm>
#include <functional>

using namespace mlir;
using namespace ampc::graph;
namespace plan = ampc::plan;

namespace ampc::planemitter {

/// Parameters, inputs, training state, parameter copies and the loss scaler, in the order the
/// model declares them.
LogicalResult Emitter::declareSymbols() {
  for (Operation &op : model.getBodyBlock()) {
    if (auto param = llvm::dyn_cast<ParamOp>(op)) {
      auto buffer = addBuffer(param.getLoc(), param.getSymName().str(), param.getType(),
                              plan::BufferRole::Parameter);
      if (failed(buffer))
        return failure();
      // a and b are the initialiser's two numbers: (mean, std) for normal, (low, high) for uniform.
      plan::Parameter parameter{param.getSymName().str(), *buffer, plan::InitKind::Zeros};
      Attribute init = param.getInit();
      if (llvm::isa<OnesInitAttr>(init))
        parameter.init = plan::InitKind::Ones;
      if (auto normal = llvm::dyn_cast<NormalInitAttr>(init)) {
        parameter.init = plan::InitKind::Normal;
        parameter.a = normal.getMean().convertToDouble();
        parameter.b = normal.getStd().convertToDouble();
      }
      if (auto uniform = llvm::dyn_cast<UniformInitAttr>(init)) {
        parameter.init = plan::InitKind::Uniform;
        parameter.a = uniform.getLow().convertToDouble();
        parameter.b = uniform.getHigh().convertToDouble();
      }
      if (llvm::isa<GivenInitAttr>(init)) {
        // The loader has matched the weights file against the parameters' shapes.
        auto values = given ? given->find(parameter.name) : GivenValues::const_iterator();
        if (!given || values == given->end())
          return param.emitError("parameter @")
                 << parameter.name << " is initialised #graph.given, but no value was given "
                 << "for it (the model's weights file has no tensor '" << parameter.name << "')";
        parameter.init = plan::InitKind::Given;
        parameter.values = values->second;
      }
      parameter.weightDecay = param.decays() && !param.getUntrained();
      parameter.trained = !param.getUntrained();
      result.parameters.push_back(parameter);
      symbolBuffer[param.getSymName()] = *buffer;
    } else if (auto input = llvm::dyn_cast<InputOp>(op)) {
      auto buffer = addBuffer(input.getLoc(), input.getSymName().str(), input.getType(),
                              plan::BufferRole::Input);
      if (failed(buffer))
        return failure();
      // The bound (0: unconstrained) is filled in by inferInputBounds once the instructions exist.
      result.inputs.push_back({input.getSymName().str(), *buffer, 0});
      symbolBuffer[input.getSymName()] = *buffer;
    } else if (auto state = llvm::dyn_cast<StateOp>(op)) {
      auto buffer = addBuffer(state.getLoc(), state.getSymName().str(), state.getType(),
                              plan::BufferRole::State);
      if (failed(buffer))
        return failure();
      symbolBuffer[state.getSymName()] = *buffer;
    } else if (auto copy = llvm::dyn_cast<ParamCopyOp>(op)) {
      auto buffer = addBuffer(copy.getLoc(), copy.getSymName().str(), copy.getType(),
                              plan::BufferRole::ParameterCopy);
      if (failed(buffer))
        return failure();
      symbolBuffer[copy.getSymName()] = *buffer;
      // The source parameter is declared before its copy, so the lookup finds it.
      result.parameterCopies.push_back({*buffer, symbolBuffer.lookup(copy.getSource())});
    } else if (auto scaler = llvm::dyn_cast<LossScaleOp>(op)) {
      if (failed(emitLossScaler(scaler)))
        return failure();
    }
  }
  return success();
}

/// The scaler's settings and its five f32 scalar state buffers (the fifth, the floor-hit count,
/// is kept by the device program's update_loss_scale kernel only).
LogicalResult Emitter::emitLossScaler(LossScaleOp scaler) {
  plan::LossScaling &scaling = result.lossScaling;
  scaling.mode = scaler.getMode() == LossScaleMode::dynamic ? plan::LossScaleMode::Dynamic
                                                            : plan::LossScaleMode::Static;
  scaling.initialScale = static_cast<float>(scaler.getInitialScale().convertToDouble());
  scaling.growthFactor = static_cast<float>(scaler.getGrowthFactor().convertToDouble());
  scaling.backoffFactor = static_cast<float>(scaler.getBackoffFactor().convertToDouble());
  scaling.growthInterval = scaler.getGrowthIntervalAttr().getInt();
  scaling.minScale = static_cast<float>(scaler.getMinScale().convertToDouble());
  auto scalarType = RankedTensorType::get({}, Float32Type::get(scaler.getContext()));
  // The order of the five buffers is the order of the plan's PREC section, and `names` must
  // follow it.
  uint32_t *fields[] = {&scaling.scale, &scaling.growthTracker, &scaling.foundNonFinite,
                        &scaling.appliedSteps, &scaling.floorHits};
  const char *names[] = {"scale", "growth_tracker", "found_nonfinite", "applied_steps",
                         "floor_hits"};
  for (int i = 0; i < 5; ++i) {
    auto buffer = addBuffer(scaler.getLoc(), scaler.getSymName().str() + "." + names[i], scalarType,
                            plan::BufferRole::State);
    if (failed(buffer))
      return failure();
    *fields[i] = *buffer;
  }
  // Referring to the scaler by symbol means its current scale.
  symbolBuffer[scaler.getSymName()] = scaling.scale;
  return success();
}

/// Integer inputs that index a table or name a class get the range of valid values, so the
/// runtime can check given data and draw random batches: the smallest range over all uses.
void Emitter::inferInputBounds() {
  // The instruction that writes each buffer; -1 for buffers no instruction writes (symbols).
  std::vector<int> producer(result.buffers.size(), -1);
  for (size_t i = 0; i < result.instructions.size(); ++i)
    for (uint32_t produced : result.instructions[i].results)
      producer[produced] = static_cast<int>(i);
  std::vector<int64_t> bound(result.buffers.size(), 0);
  std::vector<plan::InputUse> use(result.buffers.size(), plan::InputUse::None);
  plan::InputUse currentUse = plan::InputUse::None;
  // Follows ops that move values without changing them back to the buffers they came from.
  std::function<void(uint32_t, int64_t)> constrain = [&](uint32_t buffer, int64_t limit) {
    int index = producer[buffer];
    // Reached a buffer nothing computes, normally an input (only inputs' bounds are kept).
    // Several uses keep the tightest bound; the first use names what the input feeds.
    if (index < 0) {
      bound[buffer] = bound[buffer] ? std::min(bound[buffer], limit) : limit;
      if (use[buffer] == plan::InputUse::None)
        use[buffer] = currentUse;
      return;
    }
    const plan::Instruction &instruction = result.instructions[index];
    switch (instruction.op) {
#define AMPC_LAYOUT_OP(Name, ...) case plan::OpCode::Name:
#include "runtime/plan/OpCodes.def"
    case plan::OpCode::Cast:
      for (uint32_t operand : instruction.operands)
        constrain(operand, limit);
      break;
    default:
      break;
    }
  };
  for (const plan::Instruction &instruction : result.instructions) {
    // embedding(table, ids): ids index the table's rows, so they must lie in [0, rows).
    // cross_entropy(logits, labels): labels name a class, in [0, classes) (the last axis).
    if (instruction.op == plan::OpCode::Embedding) {
      currentUse = plan::InputUse::Indices;
      constrain(instruction.operands[1], result.buffers[instruction.operands[0]].shape[0]);
    }
    if (instruction.op == plan::OpCode::CrossEntropy) {
      currentUse = plan::InputUse::Labels;
      constrain(instruction.operands[1], result.buffers[instruction.operands[0]].shape.back());
    }
  }
  for (plan::Input &input : result.inputs) {
    input.bound = bound[input.buffer];
    input.use = use[input.buffer];
  }
}

} // namespace ampc::planemitter
