//===- PlanEmitter.cpp - lower a graph model to a runtime plan ------------===//

#include "compiler/lowering/PlanEmitter.h"
#include "compiler/support/Format.h"
#include "runtime/plan/PlanAttrs.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>
#include <cstring>

using namespace mlir;
using namespace ampc::graph;
namespace plan = ampc::plan;

namespace ampc {

namespace {

/// The plan's element type for an MLIR element type, if it has one.
std::optional<plan::DType> toDType(Type element) {
  if (element.isF32())
    return plan::DType::F32;
  if (element.isBF16())
    return plan::DType::BF16;
  if (element.isF16())
    return plan::DType::F16;
  if (element.isInteger(32))
    return plan::DType::I32;
  if (element.isInteger(64))
    return plan::DType::I64;
  return std::nullopt;
}

/// A shape or an i64-array attribute as the plan stores it (owned, unlike MLIR's views).
std::vector<int64_t> toVector(llvm::ArrayRef<int64_t> values) {
  return std::vector<int64_t>(values.begin(), values.end());
}

/// Builds the plan op by op, keeping the buffer of every SSA value.
///
/// The model's symbols (parameters, inputs, training state, parameter copies, the loss scaler)
/// become the first buffers, in declaration order; every op result after that gets a fresh
/// temporary buffer, except where the op only names an existing buffer (a symbol read, the loss
/// scale) or updates one in place (gradient accumulation, the optimizer updates). Buffer ids are
/// therefore indices into `result.buffers` and never change once handed out.
class Emitter {
public:
  Emitter(ModelOp model, PlanProvenance *provenance, const GivenValues *given)
      : model(model), provenance(provenance), given(given) {
    result.modelName = model.getSymName().str();
  }

  /// Lowers the whole model: symbols, then the micro step, then the optimizer step if any.
  FailureOr<plan::Plan> run();

private:
  /// Declares a buffer of a ranked tensor type; fails for element types the plan cannot hold.
  FailureOr<uint32_t> addBuffer(Location loc, const std::string &name, Type type,
                                plan::BufferRole role);
  /// Appends an instruction whose results are new temporaries for `values`.
  LogicalResult addInstruction(Operation *op, plan::OpCode code, ValueRange operands,
                               ValueRange values,
                               std::map<std::string, plan::AttrValue> attrs = {});
  /// Appends an instruction that reads `operands` and updates the symbols' buffers in place:
  /// the symbols' buffers come first among the operands and are the results.
  LogicalResult addInPlace(Operation *op, plan::OpCode code,
                           llvm::ArrayRef<FlatSymbolRefAttr> updated, ValueRange operands,
                           std::map<std::string, plan::AttrValue> attrs);
  /// Lowers the ops of a single-block function into `target`, recording their provenance.
  LogicalResult emitFunction(func::FuncOp func, std::vector<plan::Instruction> &target);
  /// Lowers the ops that `emitOp` leaves: gradients, accumulation, the optimizer step's ops.
  LogicalResult emitTrainingOp(Operation *op);
  /// Fills the plan's one-line training summary.
  void describeTraining();
  /// Declares the loss scaler's settings and state buffers.
  LogicalResult emitLossScaler(LossScaleOp scaler);
  /// Lowers one forward-pass op (or hands it to `emitTrainingOp`).
  LogicalResult emitOp(Operation *op);
  /// Copies a dense constant's data into the plan's constant section.
  LogicalResult emitConstant(ConstantOp op);
  /// Lowers a split into one slice per piece (the plan has no multi-result split).
  LogicalResult emitSplit(SplitOp op);
  /// Lowers a clip or its gradient: an infinite bound is no attribute.
  LogicalResult emitClip(Operation *op, plan::OpCode code, llvm::APFloat min, llvm::APFloat max);
  /// Lowers a convolution or one of its gradients with the window's attributes.
  template <typename ConvOp> LogicalResult emitConv2d(Operation *op, plan::OpCode code, ConvOp conv);
  /// Lowers a pooling or its gradient with the window's attributes.
  template <typename PoolOp> LogicalResult emitPool2d(Operation *op, plan::OpCode code, PoolOp pool);
  /// Derives the valid range of integer inputs from the ops that index with them.
  void inferInputBounds();

  ModelOp model;
  PlanProvenance *provenance;
  const GivenValues *given;
  plan::Plan result;
  /// The buffer holding each SSA value lowered so far.
  llvm::DenseMap<Value, uint32_t> bufferOf;
  /// The buffer of each model symbol (parameter, input, state, copy, loss scaler's scale).
  llvm::StringMap<uint32_t> symbolBuffer;
  /// Where instructions go: the forward / micro step, or the optimizer step.
  std::vector<plan::Instruction> *instructions = &result.instructions;
  /// Streams of dropouts that name none (models not built for training): numbered after the
  /// largest explicit stream.
  int64_t nextDropoutStream = 0;
};

/// Every buffer is a dense row-major tensor; the shape is copied as is (scalars: rank 0).
FailureOr<uint32_t> Emitter::addBuffer(Location loc, const std::string &name, Type type,
                                       plan::BufferRole role) {
  auto tensor = llvm::cast<RankedTensorType>(type);
  auto dtype = toDType(tensor.getElementType());
  if (!dtype)
    return emitError(loc, "the plan has no element type for ") << tensor.getElementType();
  result.buffers.push_back({name, *dtype, toVector(tensor.getShape()), role});
  return static_cast<uint32_t>(result.buffers.size() - 1);
}

LogicalResult Emitter::addInstruction(Operation *op, plan::OpCode code, ValueRange operands,
                                      ValueRange values,
                                      std::map<std::string, plan::AttrValue> attrs) {
  plan::Instruction instruction;
  instruction.op = code;
  instruction.attrs = std::move(attrs);
  instruction.location = formatLocation(op->getLoc());
  for (Value operand : operands) {
    auto it = bufferOf.find(operand);
    if (it == bufferOf.end())
      return op->emitError("operand is not produced by an op the plan knows");
    instruction.operands.push_back(it->second);
  }
  // Temporaries are named after the instruction that writes them: `t<index>.<op>` in the micro
  // step, `o<index>.<op>` in the optimizer step, with a `.<result>` suffix for multi-result ops,
  // so a diagnostic or a memory report names the op without a lookup.
  std::string prefix = instructions == &result.instructions ? "t" : "o";
  std::string name =
      prefix + std::to_string(instructions->size()) + "." + op->getName().stripDialect().str();
  for (auto [i, value] : llvm::enumerate(values)) {
    auto buffer =
        addBuffer(op->getLoc(), values.size() == 1 ? name : name + "." + std::to_string(i),
                  value.getType(), plan::BufferRole::Temporary);
    if (failed(buffer))
      return failure();
    instruction.results.push_back(*buffer);
    bufferOf[value] = *buffer;
  }
  instructions->push_back(std::move(instruction));
  return success();
}

LogicalResult Emitter::addInPlace(Operation *op, plan::OpCode code,
                                  llvm::ArrayRef<FlatSymbolRefAttr> updated, ValueRange operands,
                                  std::map<std::string, plan::AttrValue> attrs) {
  plan::Instruction instruction;
  instruction.op = code;
  instruction.attrs = std::move(attrs);
  instruction.location = formatLocation(op->getLoc());
  // An in-place update reads and writes the same buffer: it is both an operand and a result,
  // which is how the plan (and the memory planner) tells a state update from a new value.
  for (FlatSymbolRefAttr symbol : updated) {
    auto it = symbolBuffer.find(symbol.getValue());
    if (it == symbolBuffer.end())
      return op->emitError("refers to ") << symbol << ", which the plan does not know";
    instruction.operands.push_back(it->second);
    instruction.results.push_back(it->second);
  }
  for (Value operand : operands) {
    auto it = bufferOf.find(operand);
    if (it == bufferOf.end())
      return op->emitError("operand is not produced by an op the plan knows");
    instruction.operands.push_back(it->second);
  }
  instructions->push_back(std::move(instruction));
  return success();
}

LogicalResult Emitter::emitConstant(ConstantOp op) {
  auto dense = llvm::dyn_cast<DenseElementsAttr>(op.getValue());
  if (!dense)
    return op.emitError("only dense constants can be lowered to a plan");
  // Constants are numbered in the order they appear, independent of the buffer ids.
  std::string name = "c" + std::to_string(result.constants.size());
  auto buffer = addBuffer(op.getLoc(), name, op.getType(), plan::BufferRole::Constant);
  if (failed(buffer))
    return failure();
  plan::Constant constant{*buffer, {}};
  size_t bytes = plan::dtypeBytes(result.buffers[*buffer].dtype);
  // Both integers and floats are written as their little-endian bit patterns.
  auto append = [&](const llvm::APInt &bits) {
    uint64_t word = bits.getZExtValue();
    for (size_t i = 0; i < bytes; ++i)
      constant.bytes.push_back(static_cast<uint8_t>(word >> (8 * i)));
  };
  // A splat is written once (the plan's splat constants), however large the tensor.
  if (dense.isSplat()) {
    if (llvm::isa<FloatType>(dense.getElementType()))
      append(dense.getSplatValue<llvm::APFloat>().bitcastToAPInt());
    else
      append(dense.getSplatValue<llvm::APInt>());
  } else if (llvm::isa<FloatType>(dense.getElementType())) {
    for (const llvm::APFloat &value : dense.getValues<llvm::APFloat>())
      append(value.bitcastToAPInt());
  } else {
    for (const llvm::APInt &value : dense.getValues<llvm::APInt>())
      append(value);
  }
  bufferOf[op.getResult()] = *buffer;
  result.constants.push_back(std::move(constant));
  return success();
}

LogicalResult Emitter::emitSplit(SplitOp op) {
  auto inputType = llvm::cast<RankedTensorType>(op.getInput().getType());
  // Piece k starts where pieces 0..k-1 end along the split axis; every other axis starts at 0,
  // and the slice's extent is the piece's own shape.
  int64_t offset = 0;
  for (Value piece : op.getResults()) {
    std::vector<int64_t> starts(inputType.getRank(), 0);
    starts[op.getAxis()] = offset;
    offset += llvm::cast<RankedTensorType>(piece.getType()).getShape()[op.getAxis()];
    if (failed(addInstruction(op, plan::OpCode::Slice, op.getInput(), piece,
                              {plan::attr::starts(starts)})))
      return failure();
  }
  return success();
}

LogicalResult Emitter::emitClip(Operation *op, plan::OpCode code, llvm::APFloat min,
                                llvm::APFloat max) {
  std::map<std::string, plan::AttrValue> attrs;
  if (!min.isInfinity())
    attrs.insert(plan::attr::lower(min.convertToDouble()));
  if (!max.isInfinity())
    attrs.insert(plan::attr::upper(max.convertToDouble()));
  return addInstruction(op, code, op->getOperands(), op->getResults(), std::move(attrs));
}

template <typename ConvOp>
LogicalResult Emitter::emitConv2d(Operation *op, plan::OpCode code, ConvOp conv) {
  return addInstruction(op, code, op->getOperands(), op->getResults(),
                        {plan::attr::strides(toVector(conv.getStrides())),
                         plan::attr::pads(toVector(conv.getPadding())),
                         plan::attr::dilations(toVector(conv.getDilations())),
                         plan::attr::groups(static_cast<int64_t>(conv.getGroups()))});
}

template <typename PoolOp>
LogicalResult Emitter::emitPool2d(Operation *op, plan::OpCode code, PoolOp pool) {
  std::map<std::string, plan::AttrValue> attrs = {
      plan::attr::kernelShape(toVector(pool.getKernelSize())),
      plan::attr::strides(toVector(pool.getStrides())),
      plan::attr::pads(toVector(pool.getPadding())),
      plan::attr::ceilMode(int64_t(pool.getCeilMode()))};
  if constexpr (std::is_same_v<PoolOp, MaxPool2dOp> || std::is_same_v<PoolOp, MaxPool2dGradOp>)
    attrs.insert(plan::attr::dilations(toVector(pool.getDilations())));
  else
    attrs.insert(plan::attr::countIncludePad(int64_t(pool.getCountIncludePad())));
  return addInstruction(op, code, op->getOperands(), op->getResults(), std::move(attrs));
}

LogicalResult Emitter::emitOp(Operation *op) {
  using plan::OpCode;
  // The plan has no boolean attributes: flags are i64 0 or 1.
  auto flag = [](bool value) { return int64_t(value); };
  auto plain = [&](OpCode code) {
    return addInstruction(op, code, op->getOperands(), op->getResult(0));
  };
  auto reduction = [&](OpCode code, llvm::ArrayRef<int64_t> axes, bool keepdims) {
    return addInstruction(op, code, op->getOperands(), op->getResult(0),
                          {plan::attr::axes(toVector(axes)), plan::attr::keepdims(flag(keepdims))});
  };
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      // Symbol reads emit nothing: the value *is* the symbol's buffer, so later instructions read
      // the parameter or input in place.
      .Case([&](GetParamOp read) {
        bufferOf[read.getResult()] = symbolBuffer.lookup(read.getName());
        return success();
      })
      .Case([&](GetInputOp read) {
        bufferOf[read.getResult()] = symbolBuffer.lookup(read.getName());
        return success();
      })
      .Case([&](ConstantOp constant) { return emitConstant(constant); })
      // The loss marker only names the buffer the runtime reports; it computes nothing.
      .Case([&](LossOp loss) {
        result.loss = bufferOf.lookup(loss.getLoss());
        return success();
      })
      .Case([&](func::ReturnOp) { return success(); })
      .Case([&](func::CallOp call) {
        return call.emitError("calls must be inlined before lowering to a plan (run "
                              "--graph-inline-calls)");
      })
  // Each elementwise and reduction opcode is lowered from the graph op of its name.
#define AMPC_BINARY_OP(Name, ...) .Case([&](Name##Op) { return plain(OpCode::Name); })
#define AMPC_UNARY_OP(Name, ...) .Case([&](Name##Op) { return plain(OpCode::Name); })
#define AMPC_REDUCTION_OP(Name, ...)                                                               \
  .Case([&](Name##Op reduce) {                                                                     \
    return reduction(OpCode::Name, reduce.getAxes(), reduce.getKeepdims());                        \
  })
#include "runtime/plan/OpCodes.def"
      .Case([&](ReshapeOp) { return plain(OpCode::Reshape); })
      .Case([&](BroadcastOp) { return plain(OpCode::Broadcast); })
      .Case([&](CastOp) { return plain(OpCode::Cast); })
      .Case([&](EmbeddingOp) { return plain(OpCode::Embedding); })
      .Case([&](MseLossOp) { return plain(OpCode::MseLoss); })
      // approximate = 1 selects the tanh form, 0 the exact erf form (the backends' two formulas).
      .Case([&](GeluOp gelu) {
        int64_t tanhForm = gelu.getApproximation() == GeluApproximation::tanh;
        return addInstruction(op, OpCode::Gelu, op->getOperands(), gelu.getResult(),
                              {plan::attr::approximate(tanhForm)});
      })
      .Case([&](MatmulOp matmul) {
        return addInstruction(op, OpCode::MatMul, op->getOperands(), matmul.getResult(),
                              {plan::attr::transposeA(flag(matmul.getTransposeLhs())),
                               plan::attr::transposeB(flag(matmul.getTransposeRhs()))});
      })
      .Case([&](TransposeOp transpose) {
        return addInstruction(op, OpCode::Transpose, op->getOperands(), transpose.getResult(),
                              {plan::attr::permutation(toVector(transpose.getPermutation()))});
      })
      .Case([&](SliceOp slice) {
        return addInstruction(op, OpCode::Slice, op->getOperands(), slice.getResult(),
                              {plan::attr::starts(toVector(slice.getStarts()))});
      })
      .Case([&](SplitOp split) { return emitSplit(split); })
      .Case([&](ConcatOp concat) {
        return addInstruction(op, OpCode::Concat, op->getOperands(), concat.getResult(),
                              {plan::attr::axis(int64_t(concat.getAxis()))});
      })
      .Case([&](LayerNormOp norm) {
        return addInstruction(op, OpCode::LayerNorm, op->getOperands(), norm.getResult(),
                              {plan::attr::epsilon(norm.getEpsilon().convertToDouble())});
      })
      .Case([&](RmsNormOp norm) {
        return addInstruction(op, OpCode::RmsNorm, op->getOperands(), norm.getResult(),
                              {plan::attr::epsilon(norm.getEpsilon().convertToDouble())});
      })
      .Case([&](SoftmaxOp softmax) {
        return addInstruction(op, OpCode::Softmax, op->getOperands(), softmax.getResult(),
                              {plan::attr::causal(flag(softmax.getCausal()))});
      })
      // The effective scale is the op's explicit scale or 1/sqrt(head_dim), resolved here so the
      // backends never recompute the default.
      .Case([&](AttentionOp attention) {
        return addInstruction(op, OpCode::Attention, op->getOperands(), op->getResults(),
                              {plan::attr::causal(flag(attention.getCausal())),
                               plan::attr::scale(attention.getEffectiveScale())});
      })
      .Case([&](QkvAttentionOp attention) {
        return addInstruction(op, OpCode::QkvAttention, op->getOperands(), op->getResults(),
                              {plan::attr::heads(static_cast<int64_t>(attention.getHeads())),
                               plan::attr::causal(flag(attention.getCausal())),
                               plan::attr::scale(attention.getEffectiveScale())});
      })
      .Case([&](DropoutOp dropout) {
        // Each dropout has its own random stream; its backward and any recomputation reuse it.
        int64_t stream = dropout.getStream() ? int64_t(*dropout.getStream()) : nextDropoutStream++;
        return addInstruction(
            op, OpCode::Dropout, op->getOperands(), dropout.getResult(),
            {plan::attr::p(dropout.getP().convertToDouble()), plan::attr::stream(stream)});
      })
      .Case([&](BatchNormOp norm) {
        return addInstruction(op, OpCode::BatchNorm, op->getOperands(), norm.getResult(),
                              {plan::attr::epsilon(norm.getEpsilon().convertToDouble())});
      })
      // The running statistics are updated in place: (mean, var[, count], x).
      .Case([&](UpdateRunningStatsOp update) {
        llvm::SmallVector<FlatSymbolRefAttr, 3> updated = {update.getMeanAttr(),
                                                           update.getVarAttr()};
        if (update.getCountAttr())
          updated.push_back(update.getCountAttr());
        return addInPlace(op, OpCode::UpdateRunningStats, updated, update.getInput(),
                          {plan::attr::momentum(update.getMomentum().convertToDouble())});
      })
      .Case([&](ClipOp clip) { return emitClip(op, OpCode::Clip, clip.getMin(), clip.getMax()); })
      .Case([&](Conv2dOp conv) { return emitConv2d(op, OpCode::Conv2d, conv); })
      .Case([&](MaxPool2dOp pool) { return emitPool2d(op, OpCode::MaxPool2d, pool); })
      .Case([&](AvgPool2dOp pool) { return emitPool2d(op, OpCode::AvgPool2d, pool); })
      .Case([&](CrossEntropyOp loss) {
        return addInstruction(op, OpCode::CrossEntropy, op->getOperands(), loss.getResult(),
                              {plan::attr::ignoreIndex(int64_t(loss.getIgnoreIndex())),
                               plan::attr::reduction(int64_t(loss.getReduction()))});
      })
      .Default([&](Operation *other) { return emitTrainingOp(other); });
}

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
      .Case([&](Conv2dGradWeightOp conv) {
        return emitConv2d(op, OpCode::Conv2dGradWeight, conv);
      })
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

/// One graph op may lower to several instructions (a split) or none (a symbol read): the
/// provenance maps each op to the exact range it produced, for the reports.
LogicalResult Emitter::emitFunction(func::FuncOp func, std::vector<plan::Instruction> &target) {
  instructions = &target;
  for (Operation &op : func.getBody().front()) {
    const size_t before = target.size();
    if (failed(emitOp(&op)))
      return failure();
    if (provenance)
      for (size_t index = before; index < target.size(); ++index)
        provenance->instructionsOf[&op].push_back(static_cast<uint32_t>(index));
  }
  instructions = &result.instructions;
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

FailureOr<plan::Plan> Emitter::run() {
  // Symbols first, in declaration order, so parameters and inputs get the lowest buffer ids and
  // every function below can resolve them by name.
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
  result.debugNonFinite = model->hasAttr(graph::GraphDialect::kDebugNonfiniteAttrName);
  // Dropouts without an explicit stream are numbered after the largest explicit one, so no two
  // dropouts share a random stream.
  model.walk([&](DropoutOp dropout) {
    if (auto stream = dropout.getStream())
      nextDropoutStream = std::max(nextDropoutStream, static_cast<int64_t>(*stream) + 1);
  });

  func::FuncOp entry = model.getEntryFunction();
  if (!entry)
    return model.emitError("has no entry function holding a graph.loss");
  if (failed(emitFunction(entry, result.instructions)))
    return failure();
  // A training model has a second function, the optimizer step, run once every accumulation
  // steps; it returns (grad_norm, lr), which the plan records for logging.
  if (auto step = llvm::dyn_cast_or_null<func::FuncOp>(
          mlir::SymbolTable::lookupSymbolIn(model, "optimizer_step"))) {
    if (failed(emitFunction(step, result.optimizerInstructions)))
      return failure();
    auto ret = llvm::cast<func::ReturnOp>(step.getBody().front().getTerminator());
    if (ret.getNumOperands() != 2)
      return step.emitError("must return the gradient norm and the learning rate");
    result.gradNorm = bufferOf.lookup(ret.getOperand(0));
    result.learningRate = bufferOf.lookup(ret.getOperand(1));
    describeTraining();
  }
  // Bounds are inferred from the micro step only: the optimizer step never reads inputs.
  inferInputBounds();

  // validatePlan is the runtime's own check; failing it here is a compiler bug, not a user error.
  try {
    plan::validatePlan(result);
  } catch (const plan::PlanError &error) {
    return model.emitError("internal error: the emitted plan is invalid: ") << error.what();
  }
  if (provenance)
    provenance->bufferOf = bufferOf;
  return std::move(result);
}

} // namespace

FailureOr<plan::Plan> emitPlan(ModelOp model, PlanProvenance *provenance,
                               const GivenValues *given) {
  return Emitter(model, provenance, given).run();
}

} // namespace ampc
