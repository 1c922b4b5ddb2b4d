//===- GraphOps.cpp - graph dialect operations ----------------------------===//
//
// Verifiers and result-type inference of the graph ops (those of the training state and the
// optimizer step are in GraphTrainingOps.cpp, those of the attention ops in
// GraphAttentionOps.cpp). Shape arithmetic lives in
// ShapeRules.cpp; this file turns its verdicts into located diagnostics and checks what only
// the IR can tell (symbols, element types, where the loss is).
//
//===--------------------------------------------------------------------------===//

#include "dialects/Graph/GraphDialect.h"
#include "dialects/Graph/GraphOpHelpers.h"
#include "runtime/plan/Plan.h"
#include "runtime/plan/ShapeRules.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
using namespace ampc;
using namespace ampc::graph;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

//===----------------------------------------------------------------------===//
// ModelOp
//===----------------------------------------------------------------------===//

LossOp ModelOp::getLossOp() {
  LossOp found;
  walk([&](LossOp loss) {
    found = loss;
    return WalkResult::interrupt();
  });
  return found;
}

func::FuncOp ModelOp::getEntryFunction() {
  LossOp loss = getLossOp();
  return loss ? loss->getParentOfType<func::FuncOp>() : func::FuncOp();
}

/// Reports a call cycle reachable from `func` in the call graph `callees`.
static LogicalResult
checkNoRecursion(func::FuncOp func,
                 const llvm::DenseMap<Operation *, llvm::SmallVector<func::CallOp>> &calls,
                 mlir::SymbolTable &symbols, llvm::DenseSet<Operation *> &onStack,
                 llvm::DenseSet<Operation *> &done) {
  if (done.contains(func))
    return success();
  onStack.insert(func);
  // Look up without inserting: the map must not grow while a caller iterates its calls.
  auto found = calls.find(func);
  llvm::ArrayRef<func::CallOp> callOps;
  if (found != calls.end())
    callOps = found->second;
  for (func::CallOp call : callOps) {
    auto callee = symbols.lookup<func::FuncOp>(call.getCallee());
    if (!callee)
      continue; // func.call's own verifier reports unknown callees.
    if (onStack.contains(callee))
      return call.emitOpError("makes a recursive call to @")
             << call.getCallee() << "; a model's functions may not recurse";
    if (failed(checkNoRecursion(callee, calls, symbols, onStack, done)))
      return failure();
  }
  onStack.erase(func);
  done.insert(func);
  return success();
}

/// Whether \p type has at most 2^50 elements, the plan's limit for one tensor: extents whose
/// product would wrap 64 bits are compared, never multiplied past the limit.
static bool withinElementLimit(Type type) {
  auto tensor = llvm::dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return true;
  constexpr int64_t kLimit = int64_t(1) << 50;
  int64_t elements = 1;
  for (int64_t extent : tensor.getShape()) {
    if (extent > 0 && elements > kLimit / extent)
      return false;
    elements *= std::max<int64_t>(extent, 0);
  }
  return true;
}

LogicalResult ModelOp::verifyRegions() {
  // Sizes are checked before anything multiplies them: every declared and computed tensor.
  WalkResult sizes = walk([&](Operation *op) {
    llvm::SmallVector<Type> types(op->getResultTypes());
    if (auto param = llvm::dyn_cast<ParamOp>(op))
      types.push_back(param.getType());
    else if (auto input = llvm::dyn_cast<InputOp>(op))
      types.push_back(input.getType());
    for (Type type : types)
      if (!withinElementLimit(type)) {
        op->emitOpError() << type << " has more than 2^50 elements, ampc's limit for one tensor";
        return WalkResult::interrupt();
      }
    return WalkResult::advance();
  });
  if (sizes.wasInterrupted())
    return failure();
  llvm::DenseMap<Operation *, llvm::SmallVector<func::CallOp>> calls;
  for (Operation &op : getBodyBlock()) {
    auto param = llvm::dyn_cast<ParamOp>(op);
    if (param && llvm::isa<GivenInitAttr>(param.getInit()) && !getWeights())
      return param.emitOpError("parameter @")
             << param.getSymName()
             << " is initialised #graph.given, but the model names no weights file: add "
                "attributes {weights = \"FILE.safetensors\"} to graph.model";
    if (!llvm::isa<ParamOp, InputOp, StateOp, ParamCopyOp, LossScaleOp, func::FuncOp>(op))
      return op.emitOpError("cannot appear directly in a graph.model, which holds only "
                            "graph.param, graph.input, graph.state and func.func (and the "
                            "graph.param_copy and graph.loss_scale of mixed precision)");
    if (auto func = llvm::dyn_cast<func::FuncOp>(op))
      func.walk([&](func::CallOp call) { calls[func].push_back(call); });
  }

  llvm::SmallVector<LossOp> losses;
  walk([&](LossOp loss) { losses.push_back(loss); });
  if (losses.empty())
    return emitOpError("has no graph.loss: mark the model's scalar loss with graph.loss in "
                       "its entry function");
  if (losses.size() > 1)
    return losses[1]
               .emitOpError("is a second loss; a model has exactly one graph.loss")
               .attachNote(losses[0].getLoc())
           << "the first graph.loss is here";

  mlir::SymbolTable symbols(getOperation());
  auto entry = losses[0]->getParentOfType<func::FuncOp>();
  for (auto &[caller, callOps] : calls)
    for (func::CallOp call : callOps)
      if (entry && call.getCallee() == entry.getSymName())
        return call.emitOpError("calls the entry function @")
               << entry.getSymName() << ", which holds the graph.loss and may not be called";

  llvm::DenseSet<Operation *> onStack, done;
  for (Operation &op : getBodyBlock())
    if (auto func = llvm::dyn_cast<func::FuncOp>(op))
      if (failed(checkNoRecursion(func, calls, symbols, onStack, done)))
        return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// ParamOp, GetParamOp, GetInputOp, LossOp
//===----------------------------------------------------------------------===//

LogicalResult ParamOp::verify() {
  for (int64_t extent : getTensorType().getShape())
    if (extent <= 0)
      return emitOpError("parameter @")
             << getSymName() << " has an empty dimension in " << getType();
  if (getUntrained() && getWeightDecay().value_or(false))
    return emitOpError("parameter @")
           << getSymName() << " is untrained, so the optimizer cannot decay it";
  return success();
}

// Empty tensors are refused where they enter a model (parameters, inputs, constants): no op is
// defined on them (a batch of 0 rows has no mean loss), so every shape after them has elements.
LogicalResult InputOp::verify() {
  for (int64_t extent : llvm::cast<RankedTensorType>(getType()).getShape())
    if (extent <= 0)
      return emitOpError("input @")
             << getSymName() << " has an empty dimension in " << getType()
             << ": a batch needs at least one element along every dimension";
  return success();
}

LogicalResult ConstantOp::verify() {
  auto type = llvm::dyn_cast<RankedTensorType>(getResult().getType());
  if (type && type.getNumElements() == 0)
    return emitOpError("constant ") << type << " has no elements";
  return success();
}

/// Resolves `name` to an op of type `T` in the enclosing model and checks its type.
template <typename T>
static LogicalResult verifyModelSymbol(Operation *user, FlatSymbolRefAttr name, Type readType,
                                       llvm::StringRef what, llvm::StringRef article,
                                       SymbolTableCollection &symbolTable) {
  Operation *symbol = symbolTable.lookupNearestSymbolFrom(user, name);
  if (!symbol)
    return user->emitOpError("refers to an unknown ") << what << " " << name;
  auto decl = llvm::dyn_cast<T>(symbol);
  if (!decl)
    return user->emitOpError() << name << " is a '" << symbol->getName() << "', not " << article
                               << " " << what;
  if (decl.getType() != readType)
    return user->emitOpError() << what << " " << name << " is declared as " << decl.getType()
                               << " but read as " << readType;
  return success();
}

/// Names a value read from a parameter or input after it (`%wte`, `%h0.attn.qkv.w`), so printed
/// IR stays readable after inlining.
void GetParamOp::getAsmResultNames(OpAsmSetValueNameFn setNameFn) {
  setNameFn(getResult(), getName());
}

void GetInputOp::getAsmResultNames(OpAsmSetValueNameFn setNameFn) {
  setNameFn(getResult(), getName());
}

LogicalResult GetParamOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  // The reduced-precision copy of a parameter is read like the parameter.
  if (auto copy = llvm::dyn_cast_or_null<ParamCopyOp>(
          symbolTable.lookupNearestSymbolFrom(*this, getNameAttr())))
    return verifyModelSymbol<ParamCopyOp>(*this, getNameAttr(), getType(), "parameter copy", "a",
                                          symbolTable);
  return verifyModelSymbol<ParamOp>(*this, getNameAttr(), getType(), "parameter", "a", symbolTable);
}

LogicalResult GetInputOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyModelSymbol<InputOp>(*this, getNameAttr(), getType(), "input", "an", symbolTable);
}

LogicalResult LossOp::verify() {
  auto type = llvm::dyn_cast<RankedTensorType>(getLoss().getType());
  Type element = type ? type.getElementType() : Type();
  if (!type || type.getRank() != 0 || !(element.isF32() || element.isBF16() || element.isF16()))
    return emitOpError("the loss must be a scalar float tensor such as tensor<f32>, got ")
           << getLoss().getType();
  if (!(*this)->getParentOfType<ModelOp>())
    return emitOpError("must be inside a graph.model");
  auto func = (*this)->getParentOfType<func::FuncOp>();
  if (!func || func.getNumArguments() != 0 || func.getNumResults() != 0)
    return emitOpError("must be in the model's entry function, which takes no arguments and "
                       "returns nothing (read parameters and inputs with graph.get_param and "
                       "graph.get_input)");
  return success();
}

//===----------------------------------------------------------------------===//
// ConstantOp, ReshapeOp, BroadcastOp, DropoutOp, SoftmaxOp
//===----------------------------------------------------------------------===//

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

LogicalResult ReshapeOp::verify() {
  auto in = llvm::cast<RankedTensorType>(getInput().getType());
  auto out = llvm::cast<RankedTensorType>(getType());
  if (in.getElementType() != out.getElementType())
    return emitOpError("cannot change the element type (")
           << in.getElementType() << " to " << out.getElementType() << "); use graph.cast";
  if (in.getNumElements() != out.getNumElements())
    return emitOpError("cannot reshape ") << in << " (" << in.getNumElements() << " elements) to "
                                          << out << " (" << out.getNumElements() << " elements)";
  return success();
}

LogicalResult BroadcastOp::verify() {
  auto in = llvm::cast<RankedTensorType>(getInput().getType());
  auto out = llvm::cast<RankedTensorType>(getType());
  if (in.getElementType() != out.getElementType())
    return emitOpError("cannot change the element type (")
           << in.getElementType() << " to " << out.getElementType() << "); use graph.cast";
  std::string error;
  if (!plan::broadcastsTo(toVector(in.getShape()), toVector(out.getShape()), &error))
    return emitOpError(error);
  return success();
}

LogicalResult DropoutOp::verify() {
  double p = getP().convertToDouble();
  if (!(p >= 0.0 && p < 1.0))
    return emitOpError("dropout probability must be in [0, 1), got ") << formatReal(p);
  if (auto stream = getStreamAttr(); stream && stream.getInt() < 0)
    return emitOpError("dropout stream must not be negative, got ") << stream.getInt();
  return success();
}

LogicalResult SoftmaxGradOp::verify() {
  if (llvm::cast<RankedTensorType>(getType()).getRank() < 1)
    return emitOpError("softmax_grad needs a tensor of rank >= 1");
  return success();
}

LogicalResult StateOp::verify() {
  for (int64_t extent : getTensorType().getShape())
    if (extent <= 0)
      return emitOpError("state @") << getSymName() << " has an empty dimension in " << getType();
  return success();
}

LogicalResult SoftmaxOp::verify() {
  auto type = llvm::cast<RankedTensorType>(getType());
  if (type.getRank() < 1)
    return emitOpError("softmax needs a tensor of rank >= 1");
  std::string error;
  if (getCausal() && !plan::checkCausalScores(toVector(type.getShape()), error))
    return emitOpError(error);
  return success();
}

//===----------------------------------------------------------------------===//
// Result-type inference
//===----------------------------------------------------------------------===//

/// Shared inference of the broadcasting binary ops.
static LogicalResult inferBinary(std::optional<Location> loc, llvm::StringRef op, Value lhs,
                                 Value rhs, llvm::SmallVectorImpl<Type> &results) {
  llvm::SmallVector<plan::Shape> shapes;
  if (failed(operandShapes(loc, op, {lhs, rhs}, shapes)) ||
      failed(sameElementType(loc, op, {lhs, rhs})))
    return failure();
  std::string error;
  auto result = plan::broadcastShapes(shapes[0], shapes[1], &error);
  if (!result)
    return emitOptionalError(loc, "'", op, "' ", error);
  results.push_back(tensorOf(*result, elementType(lhs)));
  return success();
}

#define AMPC_INFER_BINARY(OpClass, name)                                                           \
  LogicalResult OpClass::inferReturnTypes(MLIRContext *, std::optional<Location> loc,              \
                                          Adaptor adaptor, llvm::SmallVectorImpl<Type> &results) { \
    return inferBinary(loc, name, adaptor.getLhs(), adaptor.getRhs(), results);                    \
  }
AMPC_INFER_BINARY(AddOp, "graph.add")
AMPC_INFER_BINARY(SubOp, "graph.sub")
AMPC_INFER_BINARY(MulOp, "graph.mul")
AMPC_INFER_BINARY(DivOp, "graph.div")
#undef AMPC_INFER_BINARY

LogicalResult MatmulOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, llvm::SmallVectorImpl<Type> &results) {
  llvm::SmallVector<plan::Shape> shapes;
  if (failed(operandShapes(loc, "graph.matmul", {adaptor.getLhs(), adaptor.getRhs()}, shapes)) ||
      failed(sameElementType(loc, "graph.matmul", {adaptor.getLhs(), adaptor.getRhs()})))
    return failure();
  std::string error;
  auto result = plan::matMulShape(shapes[0], shapes[1], adaptor.getTransposeLhs(),
                                  adaptor.getTransposeRhs(), error);
  if (!result)
    return emitOptionalError(loc, "'graph.matmul' ", error);
  Type element = elementType(adaptor.getLhs());
  if (auto out = adaptor.getResultElement()) {
    if (!out->isF32() || !(element.isBF16() || element.isF16() || element.isF32()))
      return emitOptionalError(loc,
                               "'graph.matmul' can write f32 from bf16 or f16 operands "
                               "(-> f32), not ",
                               *out, " from ", element);
    element = *out;
  }
  results.push_back(tensorOf(*result, element));
  return success();
}

/// Infers the result of an op with one tensor input whose result shape `rule` computes.
template <typename Rule>
static LogicalResult inferFromInput(std::optional<Location> loc, llvm::StringRef op, Value input,
                                    llvm::SmallVectorImpl<Type> &results, Rule rule) {
  llvm::SmallVector<plan::Shape> shapes;
  if (failed(operandShapes(loc, op, input, shapes)))
    return failure();
  std::string error;
  std::optional<plan::Shape> result = rule(shapes[0], error);
  if (!result)
    return emitOptionalError(loc, "'", op, "' ", error);
  results.push_back(tensorOf(*result, elementType(input)));
  return success();
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, llvm::SmallVectorImpl<Type> &results) {
  return inferFromInput(loc, "graph.transpose", adaptor.getInput(), results,
                        [&](const plan::Shape &input, std::string &error) {
                          return plan::transposeShape(input, toVector(adaptor.getPermutation()),
                                                      error);
                        });
}

LogicalResult SliceOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                        llvm::SmallVectorImpl<Type> &results) {
  return inferFromInput(loc, "graph.slice", adaptor.getInput(), results,
                        [&](const plan::Shape &input, std::string &error) {
                          return plan::sliceShape(input, toVector(adaptor.getStarts()),
                                                  toVector(adaptor.getSizes()), error);
                        });
}

LogicalResult SplitOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                        llvm::SmallVectorImpl<Type> &results) {
  llvm::SmallVector<plan::Shape> shapes;
  if (failed(operandShapes(loc, "graph.split", adaptor.getInput(), shapes)))
    return failure();
  std::string error;
  auto pieces =
      plan::splitShapes(shapes[0], adaptor.getAxis(), toVector(adaptor.getSizes()), error);
  if (!pieces)
    return emitOptionalError(loc, "'graph.split' ", error);
  for (const plan::Shape &piece : *pieces)
    results.push_back(tensorOf(piece, elementType(adaptor.getInput())));
  return success();
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, llvm::SmallVectorImpl<Type> &results) {
  llvm::SmallVector<plan::Shape> shapes;
  if (adaptor.getInputs().empty())
    return emitOptionalError(loc, "'graph.concat' needs at least one operand");
  if (failed(operandShapes(loc, "graph.concat", adaptor.getInputs(), shapes)) ||
      failed(sameElementType(loc, "graph.concat", adaptor.getInputs())))
    return failure();
  std::string error;
  auto result = plan::concatShape(std::vector<plan::Shape>(shapes.begin(), shapes.end()),
                                  adaptor.getAxis(), error);
  if (!result)
    return emitOptionalError(loc, "'graph.concat' ", error);
  results.push_back(tensorOf(*result, elementType(adaptor.getInputs().front())));
  return success();
}

/// Shared inference of sum, mean and max.
template <typename AdaptorT>
static LogicalResult inferReduce(std::optional<Location> loc, llvm::StringRef op, AdaptorT adaptor,
                                 llvm::SmallVectorImpl<Type> &results) {
  return inferFromInput(
      loc, op, adaptor.getInput(), results, [&](const plan::Shape &input, std::string &error) {
        return plan::reduceShape(input, toVector(adaptor.getAxes()), adaptor.getKeepdims(), error);
      });
}

#define AMPC_INFER_REDUCE(OpClass, name)                                                           \
  LogicalResult OpClass::inferReturnTypes(MLIRContext *, std::optional<Location> loc,              \
                                          Adaptor adaptor, llvm::SmallVectorImpl<Type> &results) { \
    return inferReduce(loc, name, adaptor, results);                                               \
  }
AMPC_INFER_REDUCE(SumOp, "graph.sum")
AMPC_INFER_REDUCE(MeanOp, "graph.mean")
AMPC_INFER_REDUCE(MaxOp, "graph.max")
#undef AMPC_INFER_REDUCE

LogicalResult EmbeddingOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, llvm::SmallVectorImpl<Type> &results) {
  llvm::SmallVector<plan::Shape> shapes;
  if (failed(operandShapes(loc, "graph.embedding", {adaptor.getTable(), adaptor.getIndices()},
                           shapes)))
    return failure();
  std::string error;
  auto result = plan::embeddingShape(shapes[0], shapes[1], error);
  if (!result)
    return emitOptionalError(loc, "'graph.embedding' ", error);
  results.push_back(tensorOf(*result, elementType(adaptor.getTable())));
  return success();
}

/// Shared inference of layernorm and rmsnorm: the gains (and biases) are [D].
static LogicalResult inferNorm(std::optional<Location> loc, llvm::StringRef op, Value input,
                               ValueRange parameters, llvm::ArrayRef<const char *> names,
                               llvm::SmallVectorImpl<Type> &results) {
  llvm::SmallVector<plan::Shape> shapes;
  if (failed(operandShapes(loc, op, input, shapes)) ||
      failed(operandShapes(loc, op, parameters, shapes)))
    return failure();
  std::string error;
  for (size_t i = 0; i < parameters.size(); ++i)
    if (!plan::checkNormParameter(shapes[0], shapes[i + 1], names[i], error))
      return emitOptionalError(loc, "'", op, "' ", error);
  results.push_back(input.getType());
  return success();
}

LogicalResult LayerNormOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, llvm::SmallVectorImpl<Type> &results) {
  return inferNorm(loc, "graph.layernorm", adaptor.getInput(),
                   {adaptor.getGamma(), adaptor.getBeta()}, {"gamma", "beta"}, results);
}

LogicalResult RmsNormOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                          Adaptor adaptor, llvm::SmallVectorImpl<Type> &results) {
  return inferNorm(loc, "graph.rmsnorm", adaptor.getInput(), adaptor.getGamma(), {"gamma"},
                   results);
}

LogicalResult CrossEntropyOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc,
                                               Adaptor adaptor,
                                               llvm::SmallVectorImpl<Type> &results) {
  llvm::SmallVector<plan::Shape> shapes;
  if (failed(operandShapes(loc, "graph.cross_entropy", {adaptor.getLogits(), adaptor.getLabels()},
                           shapes)))
    return failure();
  std::string error;
  if (!plan::checkCrossEntropy(shapes[0], shapes[1], error))
    return emitOptionalError(loc, "'graph.cross_entropy' ", error);
  results.push_back(RankedTensorType::get({}, Float32Type::get(context)));
  return success();
}

LogicalResult MseLossOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc,
                                          Adaptor adaptor, llvm::SmallVectorImpl<Type> &results) {
  results.push_back(RankedTensorType::get({}, Float32Type::get(context)));
  return success();
}

//===----------------------------------------------------------------------===//
// Gradient ops
//===----------------------------------------------------------------------===//

LogicalResult PadOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
                                      llvm::SmallVectorImpl<Type> &results) {
  return inferFromInput(
      loc, "graph.pad", adaptor.getInput(), results,
      [&](const plan::Shape &input, std::string &error) -> std::optional<plan::Shape> {
        auto low = adaptor.getLow(), high = adaptor.getHigh();
        if (low.size() != input.size() || high.size() != input.size()) {
          error = "needs one low and one high padding per dimension (rank " +
                  std::to_string(input.size()) + ")";
          return std::nullopt;
        }
        plan::Shape result = input;
        for (size_t i = 0; i < input.size(); ++i) {
          if (low[i] < 0 || high[i] < 0) {
            error = "paddings must not be negative";
            return std::nullopt;
          }
          if (__builtin_add_overflow(result[i], low[i], &result[i]) ||
              __builtin_add_overflow(result[i], high[i], &result[i])) {
            error = "padded dimension " + std::to_string(i) + " overflows int64";
            return std::nullopt;
          }
        }
        return result;
      });
}

LogicalResult MaxGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                          Adaptor adaptor, llvm::SmallVectorImpl<Type> &results) {
  llvm::SmallVector<plan::Shape> shapes;
  if (failed(operandShapes(loc, "graph.max_grad", adaptor.getInput(), shapes)))
    return failure();
  std::string error;
  auto reduced =
      plan::reduceShape(shapes[0], toVector(adaptor.getAxes()), adaptor.getKeepdims(), error);
  if (!reduced)
    return emitOptionalError(loc, "'graph.max_grad' ", error);
  if (failed(
          checkGradShape(loc, "graph.max_grad", adaptor.getInput(), adaptor.getGrad(), *reduced)))
    return failure();
  results.push_back(adaptor.getInput().getType());
  return success();
}

LogicalResult EmbeddingGradOp::verify() {
  auto table = llvm::cast<RankedTensorType>(getType());
  auto grad = llvm::cast<RankedTensorType>(getGrad().getType());
  if (table.getElementType() != grad.getElementType())
    return emitOpError("result element type ")
           << table.getElementType() << " differs from the gradient's " << grad.getElementType();
  std::string error;
  auto expected = plan::embeddingShape(
      toVector(table.getShape()),
      toVector(llvm::cast<ShapedType>(getIndices().getType()).getShape()), error);
  if (!expected)
    return emitOpError("result ") << table << ": " << error;
  if (*expected != toVector(grad.getShape()))
    return emitOpError("gradient has shape ")
           << plan::shapeToString(toVector(grad.getShape())) << " but embedding rows of " << table
           << " at these indices have shape " << plan::shapeToString(*expected);
  return success();
}

LogicalResult LayerNormGradOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                                Adaptor adaptor,
                                                llvm::SmallVectorImpl<Type> &results) {
  // AllTypesMatch<["input", "grad"]> already ties the gradient to the input.
  if (failed(inferNorm(loc, "graph.layernorm_grad", adaptor.getInput(), adaptor.getGamma(),
                       {"gamma"}, results)))
    return failure();
  results.push_back(adaptor.getGamma().getType());
  results.push_back(adaptor.getGamma().getType());
  return success();
}

LogicalResult RmsNormGradOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                              Adaptor adaptor,
                                              llvm::SmallVectorImpl<Type> &results) {
  if (failed(inferNorm(loc, "graph.rmsnorm_grad", adaptor.getInput(), adaptor.getGamma(), {"gamma"},
                       results)))
    return failure();
  results.push_back(adaptor.getGamma().getType());
  return success();
}

LogicalResult CrossEntropyGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                   Adaptor adaptor,
                                                   llvm::SmallVectorImpl<Type> &results) {
  llvm::SmallVector<plan::Shape> shapes;
  if (failed(operandShapes(loc, "graph.cross_entropy_grad",
                           {adaptor.getLogits(), adaptor.getLabels()}, shapes)))
    return failure();
  std::string error;
  if (!plan::checkCrossEntropy(shapes[0], shapes[1], error))
    return emitOptionalError(loc, "'graph.cross_entropy_grad' ", error);
  results.push_back(adaptor.getLogits().getType());
  return success();
}

#define GET_OP_CLASSES
#include "dialects/Graph/GraphOps.cpp.inc"
