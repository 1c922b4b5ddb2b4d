//===- PlanEmitter.cpp - lower a graph model to a runtime plan ------------===//

#include "compiler/PlanEmitter.h"

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

std::string formatLocation(Location loc) {
  if (auto file = llvm::dyn_cast<FileLineColLoc>(loc))
    return (file.getFilename().str() + ":" + std::to_string(file.getLine()) + ":" +
            std::to_string(file.getColumn()));
  if (auto call = llvm::dyn_cast<CallSiteLoc>(loc))
    return formatLocation(call.getCallee()) + " (called from " +
           formatLocation(call.getCaller()) + ")";
  if (auto name = llvm::dyn_cast<NameLoc>(loc))
    return formatLocation(name.getChildLoc());
  if (auto fused = llvm::dyn_cast<FusedLoc>(loc))
    if (!fused.getLocations().empty())
      return formatLocation(fused.getLocations().front());
  return "unknown location";
}

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

std::vector<int64_t> toVector(llvm::ArrayRef<int64_t> values) {
  return std::vector<int64_t>(values.begin(), values.end());
}

/// Builds the plan op by op, keeping the buffer of every SSA value.
class Emitter {
public:
  explicit Emitter(ModelOp model) : model(model) { result.modelName = model.getSymName().str(); }

  FailureOr<plan::Plan> run();

private:
  FailureOr<uint32_t> addBuffer(Location loc, const std::string &name, Type type,
                                plan::BufferRole role);
  /// Appends an instruction whose single result is a new temporary for `value`.
  LogicalResult addInstruction(Operation *op, plan::OpCode code, ValueRange operands,
                               Value value, std::map<std::string, plan::AttrValue> attrs = {});
  LogicalResult emitOp(Operation *op);
  LogicalResult emitConstant(ConstantOp op);
  LogicalResult emitSplit(SplitOp op);
  void inferInputBounds();

  ModelOp model;
  plan::Plan result;
  llvm::DenseMap<Value, uint32_t> bufferOf;
  llvm::StringMap<uint32_t> symbolBuffer;
  uint32_t dropoutCount = 0;
};

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
                                      Value value, std::map<std::string, plan::AttrValue> attrs) {
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
  std::string name = "t" + std::to_string(result.instructions.size()) + "." +
                     op->getName().stripDialect().str();
  auto buffer = addBuffer(op->getLoc(), name, value.getType(), plan::BufferRole::Temporary);
  if (failed(buffer))
    return failure();
  instruction.results.push_back(*buffer);
  bufferOf[value] = *buffer;
  result.instructions.push_back(std::move(instruction));
  return success();
}

LogicalResult Emitter::emitConstant(ConstantOp op) {
  auto dense = llvm::dyn_cast<DenseElementsAttr>(op.getValue());
  if (!dense)
    return op.emitError("only dense constants can be lowered to a plan");
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
  if (llvm::isa<FloatType>(dense.getElementType())) {
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
  int64_t offset = 0;
  for (Value piece : op.getResults()) {
    std::vector<int64_t> starts(inputType.getRank(), 0);
    starts[op.getAxis()] = offset;
    offset += llvm::cast<RankedTensorType>(piece.getType()).getShape()[op.getAxis()];
    if (failed(addInstruction(op, plan::OpCode::Slice, op.getInput(), piece,
                              {{"starts", starts}})))
      return failure();
  }
  return success();
}

LogicalResult Emitter::emitOp(Operation *op) {
  using plan::OpCode;
  auto flag = [](bool value) { return plan::AttrValue(int64_t(value)); };
  auto unary = [&](OpCode code) {
    return addInstruction(op, code, op->getOperands(), op->getResult(0));
  };
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](GetParamOp read) {
        bufferOf[read.getResult()] = symbolBuffer.lookup(read.getName());
        return success();
      })
      .Case([&](GetInputOp read) {
        bufferOf[read.getResult()] = symbolBuffer.lookup(read.getName());
        return success();
      })
      .Case([&](ConstantOp constant) { return emitConstant(constant); })
      .Case([&](LossOp loss) {
        result.loss = bufferOf.lookup(loss.getLoss());
        return success();
      })
      .Case([&](func::ReturnOp) { return success(); })
      .Case([&](func::CallOp call) {
        return call.emitError("calls must be inlined before lowering to a plan (run "
                              "--graph-inline-calls)");
      })
      .Case([&](AddOp) { return unary(OpCode::Add); })
      .Case([&](SubOp) { return unary(OpCode::Sub); })
      .Case([&](MulOp) { return unary(OpCode::Mul); })
      .Case([&](DivOp) { return unary(OpCode::Div); })
      .Case([&](NegOp) { return unary(OpCode::Neg); })
      .Case([&](ReluOp) { return unary(OpCode::Relu); })
      .Case([&](SiluOp) { return unary(OpCode::Silu); })
      .Case([&](TanhOp) { return unary(OpCode::Tanh); })
      .Case([&](ExpOp) { return unary(OpCode::Exp); })
      .Case([&](LogOp) { return unary(OpCode::Log); })
      .Case([&](SqrtOp) { return unary(OpCode::Sqrt); })
      .Case([&](RsqrtOp) { return unary(OpCode::Rsqrt); })
      .Case([&](ReshapeOp) { return unary(OpCode::Reshape); })
      .Case([&](BroadcastOp) { return unary(OpCode::Broadcast); })
      .Case([&](CastOp) { return unary(OpCode::Cast); })
      .Case([&](EmbeddingOp) { return unary(OpCode::Embedding); })
      .Case([&](MseLossOp) { return unary(OpCode::MseLoss); })
      .Case([&](GeluOp gelu) {
        int64_t tanhForm = gelu.getApproximation() == GeluApproximation::tanh;
        return addInstruction(op, OpCode::Gelu, op->getOperands(), gelu.getResult(),
                              {{"approximate", tanhForm}});
      })
      .Case([&](MatmulOp matmul) {
        return addInstruction(op, OpCode::MatMul, op->getOperands(), matmul.getResult(),
                              {{"transpose_a", flag(matmul.getTransposeLhs())},
                               {"transpose_b", flag(matmul.getTransposeRhs())}});
      })
      .Case([&](TransposeOp transpose) {
        return addInstruction(op, OpCode::Transpose, op->getOperands(), transpose.getResult(),
                              {{"permutation", toVector(transpose.getPermutation())}});
      })
      .Case([&](SliceOp slice) {
        return addInstruction(op, OpCode::Slice, op->getOperands(), slice.getResult(),
                              {{"starts", toVector(slice.getStarts())}});
      })
      .Case([&](SplitOp split) { return emitSplit(split); })
      .Case([&](ConcatOp concat) {
        return addInstruction(op, OpCode::Concat, op->getOperands(), concat.getResult(),
                              {{"axis", int64_t(concat.getAxis())}});
      })
      .Case<SumOp, MeanOp, MaxOp>([&](auto reduce) {
        OpCode code = llvm::isa<SumOp>(op)    ? OpCode::Sum
                      : llvm::isa<MeanOp>(op) ? OpCode::Mean
                                              : OpCode::Max;
        return addInstruction(op, code, op->getOperands(), reduce.getResult(),
                              {{"axes", toVector(reduce.getAxes())},
                               {"keepdims", flag(reduce.getKeepdims())}});
      })
      .Case([&](LayerNormOp norm) {
        return addInstruction(op, OpCode::LayerNorm, op->getOperands(), norm.getResult(),
                              {{"epsilon", norm.getEpsilon().convertToDouble()}});
      })
      .Case([&](RmsNormOp norm) {
        return addInstruction(op, OpCode::RmsNorm, op->getOperands(), norm.getResult(),
                              {{"epsilon", norm.getEpsilon().convertToDouble()}});
      })
      .Case([&](SoftmaxOp softmax) {
        return addInstruction(op, OpCode::Softmax, op->getOperands(), softmax.getResult(),
                              {{"causal", flag(softmax.getCausal())}});
      })
      .Case([&](AttentionOp attention) {
        return addInstruction(op, OpCode::Attention, op->getOperands(), attention.getResult(),
                              {{"causal", flag(attention.getCausal())},
                               {"scale", attention.getEffectiveScale()}});
      })
      .Case([&](DropoutOp dropout) {
        // Each dropout gets its own random stream; a recomputation reuses the stream.
        return addInstruction(op, OpCode::Dropout, op->getOperands(), dropout.getResult(),
                              {{"p", dropout.getP().convertToDouble()},
                               {"stream", int64_t(dropoutCount++)}});
      })
      .Case([&](CrossEntropyOp loss) {
        return addInstruction(op, OpCode::CrossEntropy, op->getOperands(), loss.getResult(),
                              {{"ignore_index", int64_t(loss.getIgnoreIndex())},
                               {"reduction", int64_t(loss.getReduction())}});
      })
      .Default([&](Operation *other) {
        return other->emitError("'") << other->getName() << "' cannot be lowered to a plan";
      });
}

/// Integer inputs that index a table or name a class get the range of valid values, so the
/// runtime can check given data and draw random batches: the smallest range over all uses.
void Emitter::inferInputBounds() {
  std::vector<int> producer(result.buffers.size(), -1);
  for (size_t i = 0; i < result.instructions.size(); ++i)
    producer[result.instructions[i].results[0]] = static_cast<int>(i);
  std::vector<int64_t> bound(result.buffers.size(), 0);
  // Follows ops that move values without changing them back to the buffers they came from.
  std::function<void(uint32_t, int64_t)> constrain = [&](uint32_t buffer, int64_t limit) {
    int index = producer[buffer];
    if (index < 0) {
      bound[buffer] = bound[buffer] ? std::min(bound[buffer], limit) : limit;
      return;
    }
    const plan::Instruction &instruction = result.instructions[index];
    switch (instruction.op) {
    case plan::OpCode::Reshape:
    case plan::OpCode::Transpose:
    case plan::OpCode::Slice:
    case plan::OpCode::Broadcast:
    case plan::OpCode::Concat:
    case plan::OpCode::Cast:
      for (uint32_t operand : instruction.operands)
        constrain(operand, limit);
      break;
    default:
      break;
    }
  };
  for (const plan::Instruction &instruction : result.instructions) {
    if (instruction.op == plan::OpCode::Embedding)
      constrain(instruction.operands[1], result.buffers[instruction.operands[0]].shape[0]);
    if (instruction.op == plan::OpCode::CrossEntropy)
      constrain(instruction.operands[1], result.buffers[instruction.operands[0]].shape.back());
  }
  for (plan::Input &input : result.inputs)
    input.bound = bound[input.buffer];
}

FailureOr<plan::Plan> Emitter::run() {
  for (Operation &op : model.getBodyBlock()) {
    if (auto param = llvm::dyn_cast<ParamOp>(op)) {
      auto buffer = addBuffer(param.getLoc(), param.getSymName().str(), param.getType(),
                              plan::BufferRole::Parameter);
      if (failed(buffer))
        return failure();
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
      parameter.weightDecay = param.decays();
      result.parameters.push_back(parameter);
      symbolBuffer[param.getSymName()] = *buffer;
    } else if (auto input = llvm::dyn_cast<InputOp>(op)) {
      auto buffer = addBuffer(input.getLoc(), input.getSymName().str(), input.getType(),
                              plan::BufferRole::Input);
      if (failed(buffer))
        return failure();
      result.inputs.push_back({input.getSymName().str(), *buffer, 0});
      symbolBuffer[input.getSymName()] = *buffer;
    }
  }

  func::FuncOp entry = model.getEntryFunction();
  if (!entry)
    return model.emitError("has no entry function holding a graph.loss");
  for (Operation &op : entry.getBody().front())
    if (failed(emitOp(&op)))
      return failure();
  inferInputBounds();

  try {
    plan::validatePlan(result);
  } catch (const plan::PlanError &error) {
    return model.emitError("internal error: the emitted plan is invalid: ") << error.what();
  }
  return std::move(result);
}

} // namespace

FailureOr<plan::Plan> emitPlan(ModelOp model) { return Emitter(model).run(); }

} // namespace ampc
