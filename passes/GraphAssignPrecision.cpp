//===- GraphAssignPrecision.cpp - dtypes per op, casts where types change --===//
//
// Walks the entry function in program order. For each op the policy governs it picks the type
// the op reads its float operands in (the compute type), converts the operands that are not in
// it (one cast per value and type, placed right after the value's definition so every later
// reader shares it), retypes the results, and converts a result whose storage type differs from
// its compute type. Then parameters read in the reduced type get a graph.param_copy, and the
// casts are cleaned up. The op's choice is recorded in a `precision` attribute.
//
//===--------------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/PrecisionPolicy.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/MemoryBuffer.h"

namespace ampc::graph {
#define GEN_PASS_DEF_GRAPHASSIGNPRECISION
#include "passes/Passes.h.inc"
} // namespace ampc::graph

using namespace mlir;
using namespace ampc::graph;

namespace {

RankedTensorType tensorType(Value value) {
  return llvm::dyn_cast<RankedTensorType>(value.getType());
}

bool isFloat(Value value) {
  auto type = tensorType(value);
  return type && llvm::isa<FloatType>(type.getElementType());
}

Type elementOf(Value value) { return tensorType(value).getElementType(); }

/// True when converting `from` to `to` loses nothing (bf16 or f16 to f32, or no change).
/// A parameter's gradient: read only by accumulate_grad, possibly through the adds that sum
/// the gradients of a parameter read several times and the transposes and reshapes that bring
/// it to the parameter's layout. It is kept in f32.
bool isParameterGradient(Value value) {
  return !value.use_empty() && llvm::all_of(value.getUsers(), [](Operation *user) {
    if (llvm::isa<AccumulateGradOp>(user))
      return true;
    return llvm::isa<AddOp, TransposeOp, ReshapeOp>(user) &&
           isParameterGradient(user->getResult(0));
  });
}

bool isExactWidening(Type from, Type to) {
  return from == to || (to.isF32() && (from.isBF16() || from.isF16()));
}

struct GraphAssignPrecisionPass
    : ampc::graph::impl::GraphAssignPrecisionBase<GraphAssignPrecisionPass> {
  using Base::Base;

  void runOnOperation() override;

private:
  LogicalResult buildPolicy(PrecisionPolicy &policy);
  /// `value` converted to `element`, sharing one cast per (value, type).
  Value convert(Value value, Type element);
  void assignOp(Operation *op, PrecisionRule rule, llvm::StringRef ruleName);
  llvm::SmallVector<unsigned, 2> operandsReadReduced(Operation *op, PrecisionRule rule) const;
  void useParameterCopies(ModelOp model, func::FuncOp entry);
  void cleanUpCasts(func::FuncOp entry);

  PrecisionPolicy policy;
  Type reduced, f32;
  llvm::DenseMap<std::pair<Value, Type>, Value> casts;
};

LogicalResult GraphAssignPrecisionPass::buildPolicy(PrecisionPolicy &result) {
  ModelOp model = getOperation();
  result = PrecisionPolicy::defaults();
  std::vector<PrecisionPolicy::Assignment> assignments;
  if (!policyFile.empty()) {
    auto file = llvm::MemoryBuffer::getFile(policyFile);
    if (!file)
      return model.emitError("cannot read the precision policy file '")
             << policyFile << "': " << file.getError().message();
    if (auto error =
            PrecisionPolicy::parseFile(policyFile, (*file)->getBuffer().str(), assignments))
      return model.emitError(*error);
  }
  std::pair<const char *, const std::string *> flags[] = {{"reduced", &reducedOps.getValue()},
                                                          {"fp32", &fp32Ops.getValue()},
                                                          {"follow", &followOps.getValue()},
                                                          {"store_fp32", &storeFp32Ops.getValue()}};
  for (auto [list, kinds] : flags) {
    if (kinds->empty())
      continue;
    std::string flag =
        std::string(list) == "store_fp32" ? "store-fp32-ops" : std::string(list) + "-ops";
    if (auto error = PrecisionPolicy::parseFlag(flag, list, *kinds, assignments))
      return model.emitError(*error);
  }
  if (auto error = result.apply(assignments))
    return model.emitError(*error);
  return success();
}

Value GraphAssignPrecisionPass::convert(Value value, Type element) {
  if (elementOf(value) == element)
    return value;
  Value &cached = casts[{value, element}];
  if (cached)
    return cached;
  OpBuilder b(value.getContext());
  b.setInsertionPointAfterValue(value);
  auto cast = b.create<CastOp>(value.getLoc(),
                               RankedTensorType::get(tensorType(value).getShape(), element), value);
  // A conversion accumulates nothing: its accumulate type is its source type.
  cast->setAttr(
      GraphDialect::kPrecisionAttrName,
      PrecisionAttr::get(value.getContext(), elementOf(value), elementOf(value), element, "cast"));
  cached = cast.getResult();
  return cached;
}

/// The operands of an f32 op that it reads in the reduced type they are already in, converting
/// each element to f32 as it loads it: a bf16 or f16 -> f32 conversion is exact, so the op
/// computes the same f32 values as from a widened copy, and the copy is neither stored nor
/// recomputed. The op's first result then takes the reduced type, which is where it is stored
/// anyway (the op computes in f32 and rounds once as it writes), so this applies only when the
/// policy stores that result in the reduced type.
///   - cross_entropy and cross_entropy_grad read the logits (operand 0): a widened copy of the
///     logits and an f32 gradient would add the two largest tensors of a language model.
///   - layernorm, rmsnorm and batch_norm read x (operand 0), and their gradients x and dy
///     (operands 0 and 2, which the gradient ops require to share one type): x is the residual stream, which
///     the forward norm and its gradient would otherwise keep as an f32 copy of every layer's
///     input from the forward pass to the backward.
/// None under keep_fp32, for the `fp32` rule only, and none where an operand is not already
/// reduced (a policy that keeps the residual stream in f32 changes nothing here).
llvm::SmallVector<unsigned, 2>
GraphAssignPrecisionPass::operandsReadReduced(Operation *op, PrecisionRule rule) const {
  llvm::SmallVector<unsigned, 2> operands;
  if (rule != PrecisionRule::Fp32 || op->hasAttr(GraphDialect::kKeepFp32AttrName))
    return operands;
  if (llvm::isa<CrossEntropyOp, CrossEntropyGradOp, LayerNormOp, RmsNormOp, BatchNormOp>(op))
    operands = {0};
  else if (llvm::isa<LayerNormGradOp, RmsNormGradOp, BatchNormGradOp>(op))
    operands = {0, 2};
  else
    return operands;
  // The first result is stored in the reduced type unless the policy keeps it in f32 (the
  // scalar loss of cross_entropy keeps its own f32 type, whatever its logits).
  std::string kind = op->getName().stripDialect().str();
  if (!llvm::isa<CrossEntropyOp>(op) &&
      (policy.storesFp32(kind) || isParameterGradient(op->getResult(0))))
    operands.clear();
  if (llvm::any_of(operands, [&](unsigned i) { return elementOf(op->getOperand(i)) != reduced; }))
    operands.clear();
  return operands;
}

void GraphAssignPrecisionPass::assignOp(Operation *op, PrecisionRule rule,
                                        llvm::StringRef ruleName) {
  // The compute type: fixed by the rule, or for `follow` the input type that converts the
  // fewest elements (ties go to the reduced type, so activations stay reduced).
  Type compute = rule == PrecisionRule::Reduced ? reduced : f32;
  if (rule == PrecisionRule::Follow) {
    int64_t costReduced = 0, costF32 = 0;
    bool any = false;
    for (Value operand : op->getOperands()) {
      if (!isFloat(operand))
        continue;
      any = true;
      int64_t elements = tensorType(operand).getNumElements();
      if (elementOf(operand) != reduced)
        costReduced += elements;
      if (elementOf(operand) != f32)
        costF32 += elements;
    }
    if (!any) {
      // Integer data movement (token ids): nothing to convert, but still recorded.
      Type element = elementOf(op->getResult(0));
      op->setAttr(GraphDialect::kPrecisionAttrName,
                  PrecisionAttr::get(op->getContext(), element, element, element, ruleName));
      return;
    }
    compute = costReduced <= costF32 ? reduced : f32;
    // Summing a parameter's gradients: in f32, like the accumulator they go to.
    if (op->getNumResults() == 1 && isParameterGradient(op->getResult(0)))
      compute = f32;
  }
  // Operands an f32 op reads in the reduced type they are stored in (readsReduced), widening
  // each element as it loads it; its first result then takes the reduced type it is stored in.
  llvm::SmallVector<unsigned, 2> readsReduced = operandsReadReduced(op, rule);
  for (OpOperand &operand : op->getOpOperands()) {
    // The f32 scalar gradient of cross_entropy_grad is typed f32 by the op itself.
    // So is the saved row log-sum-exp of attention_grad (operand 5) and qkv_attention_grad (3).
    if (!isFloat(operand.get()) ||
        (llvm::isa<CrossEntropyGradOp>(op) && operand.getOperandNumber() == 2) ||
        (llvm::isa<AttentionGradOp>(op) && operand.getOperandNumber() == 5) ||
        (llvm::isa<QkvAttentionGradOp>(op) && operand.getOperandNumber() == 3) ||
        llvm::is_contained(readsReduced, operand.getOperandNumber()))
      continue;
    operand.set(convert(operand.get(), compute));
  }

  // Results take the compute type, except the scalar losses, which are always f32.
  bool keepsResultTypes = llvm::isa<CrossEntropyOp, MseLossOp>(op);
  Type storage = compute;
  OpBuilder b(op->getContext());
  b.setInsertionPointAfter(op);
  for (auto [index, result] : llvm::enumerate(op->getResults())) {
    // Attention's row log-sum-exp is f32 whatever the compute type.
    if (!isFloat(result) || (llvm::isa<AttentionOp, QkvAttentionOp>(op) && index == 1))
      continue;
    if (!keepsResultTypes)
      result.setType(RankedTensorType::get(tensorType(result).getShape(),
                                           !readsReduced.empty() && index == 0 ? reduced
                                                                               : compute));
    // Where the result is stored: f32 for parameter gradients, scalars, kinds the policy
    // stores in f32 and ops kept in f32; the reduced type for every other activation.
    bool parameterGradient = isParameterGradient(result);
    std::string kind = op->getName().stripDialect().str();
    Type stored = reduced;
    if (parameterGradient || tensorType(result).getRank() == 0 || policy.storesFp32(kind) ||
        op->hasAttr(GraphDialect::kKeepFp32AttrName) || keepsResultTypes)
      stored = f32;
    if (rule == PrecisionRule::Follow && !parameterGradient)
      stored = elementOf(result); // follow ops store what they compute
    if (index == 0)
      storage = stored;
    if (stored == elementOf(result))
      continue;
    // A matmul or a convolution's weight gradient writes its f32 accumulation directly
    // instead of rounding it to the reduced type and widening it again (weight gradients stay
    // exact).
    if (auto matmul = llvm::dyn_cast<MatmulOp>(op); matmul && stored == f32) {
      matmul.setResultElementAttr(TypeAttr::get(f32));
      result.setType(RankedTensorType::get(tensorType(result).getShape(), f32));
      continue;
    }
    if (llvm::isa<Conv2dGradWeightOp>(op) && stored == f32) {
      result.setType(RankedTensorType::get(tensorType(result).getShape(), f32));
      continue;
    }
    auto cast = b.create<CastOp>(
        op->getLoc(), RankedTensorType::get(tensorType(result).getShape(), stored), result);
    cast->setAttr(
        GraphDialect::kPrecisionAttrName,
        PrecisionAttr::get(op->getContext(), elementOf(result), elementOf(result), stored, "cast"));
    result.replaceAllUsesExcept(cast.getResult(), cast);
    casts[{result, stored}] = cast.getResult();
  }
  Type accumulate = rule == PrecisionRule::Follow ? compute : f32;
  op->setAttr(GraphDialect::kPrecisionAttrName,
              PrecisionAttr::get(op->getContext(), compute, accumulate, storage, ruleName));
}

/// Replaces casts of an f32 parameter to the reduced type by reads of a graph.param_copy,
/// which the optimizer refreshes once per step.
void GraphAssignPrecisionPass::useParameterCopies(ModelOp model, func::FuncOp entry) {
  mlir::SymbolTable symbols(model);
  llvm::SmallVector<CastOp> toReplace;
  entry.walk([&](CastOp cast) {
    auto read = cast.getInput().getDefiningOp<GetParamOp>();
    if (read && elementOf(cast.getInput()).isF32() && elementOf(cast.getResult()) == reduced)
      toReplace.push_back(cast);
  });
  llvm::StringRef suffix = reduced.isBF16() ? "bf16" : "f16";
  for (CastOp cast : toReplace) {
    auto read = cast.getInput().getDefiningOp<GetParamOp>();
    std::string name = (read.getName() + "." + suffix).str();
    if (!symbols.lookup(name)) {
      auto param = symbols.lookup<ParamOp>(read.getName());
      OpBuilder b(model.getContext());
      b.setInsertionPointAfter(param);
      auto copy = b.create<ParamCopyOp>(param.getLoc(), b.getStringAttr(name),
                                        TypeAttr::get(cast.getType()), read.getNameAttr());
      symbols.insert(copy);
      // The optimizer refreshes the copy when it updates the master weight.
      model.walk([&](Operation *update) {
        if (auto adamw = llvm::dyn_cast<AdamWOp>(update);
            adamw && adamw.getParam() == read.getName())
          adamw.setCopyAttr(FlatSymbolRefAttr::get(copy.getSymNameAttr()));
        if (auto sgd = llvm::dyn_cast<SgdOp>(update); sgd && sgd.getParam() == read.getName())
          sgd.setCopyAttr(FlatSymbolRefAttr::get(copy.getSymNameAttr()));
      });
    }
    OpBuilder b(read);
    b.setInsertionPointAfter(read);
    auto copyRead = b.create<GetParamOp>(read.getLoc(), cast.getType(),
                                         FlatSymbolRefAttr::get(b.getContext(), name));
    cast.getResult().replaceAllUsesWith(copyRead.getResult());
    cast.erase();
    if (read.getResult().use_empty())
      read.erase();
  }
}

void GraphAssignPrecisionPass::cleanUpCasts(func::FuncOp entry) {
  bool changed = true;
  while (changed) {
    changed = false;
    llvm::SmallVector<CastOp> all;
    entry.walk([&](CastOp cast) { all.push_back(cast); });
    llvm::DenseMap<std::pair<Value, Type>, CastOp> first;
    for (CastOp cast : all) {
      Value input = cast.getInput();
      Type to = elementOf(cast.getResult());
      // A cast to the same type, or one that undoes an exact widening: the original value.
      if (elementOf(input) == to) {
        cast.getResult().replaceAllUsesWith(input);
        cast.erase();
        changed = true;
        continue;
      }
      if (auto inner = input.getDefiningOp<CastOp>();
          inner && isFloat(inner.getInput()) &&
          isExactWidening(elementOf(inner.getInput()), elementOf(input))) {
        // x -> wider (exact) -> to: one cast from x, or x itself.
        cast.getInputMutable().assign(inner.getInput());
        changed = true;
        continue;
      }
      // A constant converted: the constant in the new type.
      if (auto constant = input.getDefiningOp<ConstantOp>()) {
        auto dense = llvm::dyn_cast<DenseElementsAttr>(constant.getValue());
        if (dense && llvm::isa<FloatType>(to)) {
          auto semantics = &llvm::cast<FloatType>(to).getFloatSemantics();
          auto converted = dense.mapValues(to, [&](const llvm::APFloat &value) {
            llvm::APFloat copy = value;
            bool lost;
            copy.convert(*semantics, llvm::APFloat::rmNearestTiesToEven, &lost);
            return copy.bitcastToAPInt();
          });
          OpBuilder b(cast);
          auto folded = b.create<ConstantOp>(cast.getLoc(), cast.getType(),
                                             llvm::cast<ElementsAttr>(converted));
          cast.getResult().replaceAllUsesWith(folded.getResult());
          cast.erase();
          changed = true;
          continue;
        }
      }
      // The same value cast to the same type twice: keep the first (in a single block the
      // earlier op dominates the later one's users).
      auto [it, inserted] = first.try_emplace({input, to}, cast);
      if (!inserted) {
        cast.getResult().replaceAllUsesWith(it->second.getResult());
        cast.erase();
        changed = true;
      }
    }
    // Casts and constants nothing reads any more.
    llvm::SmallVector<Operation *> dead;
    entry.walk([&](Operation *op) {
      if (llvm::isa<CastOp, ConstantOp>(op) && op->use_empty())
        dead.push_back(op);
    });
    for (Operation *op : dead)
      op->erase();
    changed |= !dead.empty();
  }
}

void GraphAssignPrecisionPass::runOnOperation() {
  ModelOp model = getOperation();
  MLIRContext *context = model.getContext();
  if (mode != "bf16" && mode != "fp16" && mode != "fp32") {
    model.emitError("graph-assign-precision: invalid mode '")
        << mode << "': the modes are bf16, fp16 and fp32";
    return signalPassFailure();
  }
  if (model->hasAttr(GraphDialect::kPrecisionModeAttrName)) {
    model.emitError("already has a precision assignment (")
        << model->getAttr(GraphDialect::kPrecisionModeAttrName)
        << "); graph-assign-precision runs once";
    return signalPassFailure();
  }
  casts.clear();
  if (failed(buildPolicy(policy)))
    return signalPassFailure();
  func::FuncOp entry = model.getEntryFunction();
  if (!entry) {
    model.emitError("has no entry function holding a graph.loss");
    return signalPassFailure();
  }
  f32 = Float32Type::get(context);
  reduced = mode == "fp16" ? Type(Float16Type::get(context)) : Type(BFloat16Type::get(context));
  model->setAttr(GraphDialect::kPrecisionModeAttrName, StringAttr::get(context, mode));

  llvm::SmallVector<Operation *> ops;
  for (Operation &op : entry.getBody().front())
    ops.push_back(&op);
  for (Operation *op : ops) {
    std::string kind = op->getName().stripDialect().str();
    auto rule = policy.ruleFor(kind);
    if (!rule || op->getDialect() != model->getDialect())
      continue;
    if (mode == "fp32") {
      // Nothing changes; the attribute still says what runs where.
      op->setAttr(GraphDialect::kPrecisionAttrName,
                  PrecisionAttr::get(context, f32, f32, f32, "fp32 mode"));
      continue;
    }
    if (op->hasAttr(GraphDialect::kKeepFp32AttrName))
      assignOp(op, PrecisionRule::Fp32, GraphDialect::kKeepFp32AttrName);
    else
      assignOp(op, *rule, precisionRuleName(*rule));
  }
  if (mode == "fp32")
    return;
  useParameterCopies(model, entry);
  cleanUpCasts(entry);
}

} // namespace
