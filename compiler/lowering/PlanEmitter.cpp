//===- PlanEmitter.cpp - lower a graph model to a runtime plan ------------===//
//
// The emitter's buffers and instructions, the forward ops' lowering and the walk over the
// model: its symbols (PlanEmitterSymbols.cpp), the micro step, the optimizer step (whose
// gradient and training-state ops PlanEmitterTraining.cpp lowers), then the runtime's own check
// of the plan.
//
//===--------------------------------------------------------------------------===//

#include "compiler/lowering/PlanEmitterImpl.h"
#include "compiler/support/Format.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>

using namespace mlir;
using namespace ampc::graph;
namespace plan = ampc::plan;

namespace ampc {

namespace planemitter {

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

} // namespace

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

FailureOr<plan::Plan> Emitter::run() {
  // Symbols first, in declaration order, so parameters and inputs get the lowest buffer ids and
  // every function below can resolve them by name.
  if (failed(declareSymbols()))
    return failure();
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

} // namespace planemitter

FailureOr<plan::Plan> emitPlan(ModelOp model, PlanProvenance *provenance,
                               const GivenValues *given) {
  return planemitter::Emitter(model, provenance, given).run();
}

} // namespace ampc
