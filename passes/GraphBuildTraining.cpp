//===- GraphBuildTraining.cpp - reverse-mode autodiff and the optimizer step --===//
//
// Rewrites a model's entry function into `micro_step` (forward, backward, accumulation) and adds
// `optimizer_step` (global norm, learning rate, one optimizer update per parameter).
//
// The backward pass is reverse-mode: the forward ops are visited in reverse order, and each op
// whose results carry a gradient gets its operands' gradients from GradientRules. Only values
// that depend on a parameter are differentiated. A value used by several ops receives the sum of
// the gradients from each use, which is also how a tied parameter (read by the embedding and by
// the output head) gets both contributions.
//
//===--------------------------------------------------------------------------===//

#include "passes/GradientRules.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"

#include <cmath>

namespace ampc::graph {
#define GEN_PASS_DEF_GRAPHBUILDTRAINING
#include "passes/Passes.h.inc"
} // namespace ampc::graph

using namespace mlir;
using namespace ampc::graph;

namespace {

struct GraphBuildTrainingPass : ampc::graph::impl::GraphBuildTrainingBase<GraphBuildTrainingPass> {
  using Base::Base;

  void runOnOperation() override;

private:
  LogicalResult checkOptions(ModelOp model);
  void assignDropoutStreams(func::FuncOp entry);
  /// Appends the backward pass to `entry`; fills `paramGrads` with each parameter's gradient.
  LogicalResult buildBackward(func::FuncOp entry, llvm::MapVector<StringAttr, Value> &paramGrads);
  void buildOptimizerStep(ModelOp model, llvm::ArrayRef<ParamOp> trained,
                          llvm::ArrayRef<StringAttr> gradStates);
};

/// The name of a state that belongs to `param`.
std::string stateName(ParamOp param, llvm::StringRef role) {
  return (param.getSymName() + "." + role).str();
}

LogicalResult GraphBuildTrainingPass::checkOptions(ModelOp model) {
  auto bad = [&](llvm::StringRef option, const llvm::Twine &why) {
    return model.emitError("graph-build-training: invalid ") << option << ": " << why;
  };
  if (accumSteps < 1)
    return bad("accum-steps", "must be at least 1, got " + llvm::Twine(accumSteps.getValue()));
  if (optimizer != "adamw" && optimizer != "sgd")
    return bad("optimizer", "'" + optimizer + "' is not one of adamw, sgd");
  if (schedule != "constant" && schedule != "cosine")
    return bad("schedule", "'" + schedule + "' is not one of constant, cosine");
  if (!std::isfinite(lr) || lr <= 0)
    return bad("lr", "must be finite and positive, got " + formatReal(lr));
  if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
    return bad("beta1/beta2", "must be in [0, 1)");
  if (!std::isfinite(eps) || eps <= 0)
    return bad("eps", "must be finite and positive, got " + formatReal(eps));
  if (!std::isfinite(weightDecay) || weightDecay < 0)
    return bad("weight-decay", "must be finite and >= 0, got " + formatReal(weightDecay));
  if (!(momentum >= 0 && momentum < 1))
    return bad("momentum", "must be in [0, 1), got " + formatReal(momentum));
  if (!std::isfinite(clipNorm) || clipNorm < 0)
    return bad("clip-norm",
               "must be finite and >= 0 (0 disables clipping), got " + formatReal(clipNorm));
  if (warmupSteps < 0 || decaySteps < 0)
    return bad("warmup-steps/decay-steps", "must not be negative");
  if (schedule == "cosine" && decaySteps != 0 && decaySteps <= warmupSteps)
    return bad("decay-steps", "must exceed warmup-steps (" + llvm::Twine(warmupSteps.getValue()) +
                                  "), or be 0 for the run's number of steps");
  if (minLr >= 0 && (!std::isfinite(minLr) || minLr > lr))
    return bad("min-lr", "must be in [0, lr], got " + formatReal(minLr));
  return success();
}

void GraphBuildTrainingPass::assignDropoutStreams(func::FuncOp entry) {
  // Streams given in the model file are kept; the others are numbered after them.
  int64_t next = 0;
  entry.walk([&](DropoutOp dropout) {
    if (auto stream = dropout.getStream())
      next = std::max(next, static_cast<int64_t>(*stream) + 1);
  });
  OpBuilder b(entry.getContext());
  entry.walk([&](DropoutOp dropout) {
    if (!dropout.getStream())
      dropout.setStreamAttr(b.getI64IntegerAttr(next++));
  });
}

LogicalResult
GraphBuildTrainingPass::buildBackward(func::FuncOp entry,
                                      llvm::MapVector<StringAttr, Value> &paramGrads) {
  Block &body = entry.getBody().front();
  llvm::SmallVector<Operation *> forward;
  for (Operation &op : body.without_terminator())
    forward.push_back(&op);

  // Activity: values that depend on a parameter through float ops.
  llvm::DenseSet<Value> active;
  for (Operation *op : forward) {
    bool dependsOnParam =
        llvm::isa<GetParamOp>(op) ||
        llvm::any_of(op->getOperands(), [&](Value v) { return active.contains(v); });
    if (dependsOnParam)
      for (Value result : op->getResults())
        if (llvm::isa<FloatType>(llvm::cast<RankedTensorType>(result.getType()).getElementType()))
          active.insert(result);
  }

  LossOp loss = llvm::cast<ModelOp>(entry->getParentOp()).getLossOp();
  OpBuilder b(body.getTerminator());
  GradientBuilder rules(b);
  Location seedLoc = loss.getLoc();
  Value seed = b.create<GradSeedOp>(seedLoc, Value(), b.getI64IntegerAttr(accumSteps));
  Value lossValue = loss.getLoss();
  if (lossValue.getType() != seed.getType())
    seed = b.create<CastOp>(seedLoc, lossValue.getType(), seed);

  llvm::DenseMap<Value, Value> grads;
  if (active.contains(lossValue))
    grads[lossValue] = seed;
  for (Operation *op : llvm::reverse(forward)) {
    llvm::SmallVector<Value> resultGrads;
    bool any = false;
    for (Value result : op->getResults()) {
      resultGrads.push_back(grads.lookup(result));
      any |= static_cast<bool>(resultGrads.back());
    }
    if (!any)
      continue;
    if (auto read = llvm::dyn_cast<GetParamOp>(op)) {
      Value &sum = paramGrads[read.getNameAttr().getAttr()];
      sum = sum ? rules.add(read.getLoc(), sum, resultGrads[0]) : resultGrads[0];
      continue;
    }
    Operation *before = body.getTerminator()->getPrevNode();
    auto operandGrads = rules.operandGradients(op, resultGrads);
    if (failed(operandGrads))
      return failure();
    // An op the model keeps in f32 keeps its gradient ops in f32 too.
    if (op->hasAttr(GraphDialect::kKeepFp32AttrName))
      for (Operation *grad = before->getNextNode(); grad != body.getTerminator();
           grad = grad->getNextNode())
        grad->setAttr(GraphDialect::kKeepFp32AttrName, UnitAttr::get(op->getContext()));
    for (auto [operand, grad] : llvm::zip(op->getOperands(), *operandGrads)) {
      if (!grad || !active.contains(operand))
        continue;
      Value &sum = grads[operand];
      sum = sum ? rules.add(op->getLoc(), sum, grad) : grad;
    }
  }

  return success();
}

/// Rules build gradients for every float operand; drops those nothing needed (the gradient of
/// the input data, say). Visiting in reverse frees chains of dead ops in one sweep.
static void eraseUnusedGradients(func::FuncOp entry) {
  Block &body = entry.getBody().front();
  auto seed = *body.getOps<GradSeedOp>().begin();
  llvm::SmallVector<Operation *> backward;
  for (Operation *op = seed; op != body.getTerminator(); op = op->getNextNode())
    backward.push_back(op);
  for (Operation *op : llvm::reverse(backward))
    if (op->use_empty() && op->getNumResults() > 0 &&
        (isMemoryEffectFree(op) || llvm::isa<DropoutOp>(op)))
      op->erase();
}

void GraphBuildTrainingPass::buildOptimizerStep(ModelOp model, llvm::ArrayRef<ParamOp> trained,
                                                llvm::ArrayRef<StringAttr> gradStates) {
  MLIRContext *context = model.getContext();
  OpBuilder b = OpBuilder::atBlockEnd(&model.getBodyBlock());
  Location loc = NameLoc::get(StringAttr::get(context, "optimizer_step"), model.getLoc());
  auto scalarType = RankedTensorType::get({}, b.getF32Type());
  auto func = b.create<func::FuncOp>(loc, "optimizer_step",
                                     b.getFunctionType({}, {scalarType, scalarType}));
  b.setInsertionPointToStart(func.addEntryBlock());

  llvm::SmallVector<Attribute> gradRefs;
  for (StringAttr name : gradStates)
    gradRefs.push_back(FlatSymbolRefAttr::get(name));
  Value norm = b.create<GlobalNormOp>(loc, b.getArrayAttr(gradRefs));
  auto kind = schedule == "cosine" ? LrSchedule::cosine : LrSchedule::constant;
  double finalLr = minLr >= 0 ? double(minLr) : lr / 10;
  Value rate =
      b.create<LrScheduleOp>(loc, LrScheduleAttr::get(context, kind), b.getF64FloatAttr(lr),
                             b.getF64FloatAttr(kind == LrSchedule::cosine ? finalLr : 0.0),
                             b.getI64IntegerAttr(warmupSteps), b.getI64IntegerAttr(decaySteps));

  auto ref = [&](const std::string &name) { return FlatSymbolRefAttr::get(context, name); };
  for (ParamOp param : trained) {
    double decay = param.decays() ? double(weightDecay) : 0.0;
    FlatSymbolRefAttr self = FlatSymbolRefAttr::get(param.getSymNameAttr());
    if (optimizer == "adamw")
      b.create<AdamWOp>(param.getLoc(), self, ref(stateName(param, "grad")),
                        ref(stateName(param, "adam_m")), ref(stateName(param, "adam_v")), rate,
                        norm, b.getF64FloatAttr(beta1), b.getF64FloatAttr(beta2),
                        b.getF64FloatAttr(eps), b.getF64FloatAttr(decay),
                        b.getF64FloatAttr(clipNorm), FlatSymbolRefAttr(), FlatSymbolRefAttr());
    else
      b.create<SgdOp>(param.getLoc(), self, ref(stateName(param, "grad")),
                      ref(stateName(param, "momentum")), rate, norm, b.getF64FloatAttr(momentum),
                      b.getF64FloatAttr(decay), b.getF64FloatAttr(clipNorm), FlatSymbolRefAttr(),
                      FlatSymbolRefAttr());
  }
  b.create<func::ReturnOp>(loc, ValueRange{norm, rate});
}

void GraphBuildTrainingPass::runOnOperation() {
  ModelOp model = getOperation();
  if (failed(checkOptions(model)))
    return signalPassFailure();
  func::FuncOp entry = model.getEntryFunction();
  if (!entry) {
    model.emitError("has no entry function holding a graph.loss");
    return signalPassFailure();
  }
  mlir::SymbolTable symbols(model);
  if (!model.getBodyBlock().getOps<StateOp>().empty() || symbols.lookup("optimizer_step")) {
    model.emitError("already has training state; graph-build-training runs once per model");
    return signalPassFailure();
  }
  if (!entry.getBody().front().getOps<func::CallOp>().empty()) {
    entry.emitError("calls other functions; run --graph-inline-calls before "
                    "--graph-build-training");
    return signalPassFailure();
  }
  if (Operation *other = symbols.lookup("micro_step"); other && other != entry) {
    other->emitError("the symbol @micro_step is reserved for the training step");
    return signalPassFailure();
  }

  // The training state is declared after the model's last parameter or input; without a
  // parameter there is nothing to declare it for.
  if (model.getBodyBlock().getOps<ParamOp>().empty()) {
    model.emitError("model @")
        << model.getSymName()
        << " declares no graph.param, so there is nothing to train (`ampc eval` evaluates a "
           "model without parameters)";
    return signalPassFailure();
  }

  assignDropoutStreams(entry);
  llvm::MapVector<StringAttr, Value> paramGrads;
  if (failed(buildBackward(entry, paramGrads)))
    return signalPassFailure();

  // One accumulator per parameter the loss depends on, then the optimizer's state.
  llvm::SmallVector<ParamOp> params(model.getBodyBlock().getOps<ParamOp>());
  llvm::SmallVector<ParamOp> trained;
  llvm::SmallVector<StringAttr> gradStates;
  Operation *lastDecl = nullptr;
  for (Operation &op : model.getBodyBlock())
    if (llvm::isa<ParamOp, InputOp>(op))
      lastDecl = &op;
  OpBuilder declBuilder(model.getContext());
  declBuilder.setInsertionPointAfter(lastDecl);
  OpBuilder accumulate(entry.getBody().front().getTerminator());
  llvm::SmallVector<llvm::StringRef> roles = {"grad"};
  if (optimizer == "adamw")
    roles.append({"adam_m", "adam_v"});
  else
    roles.push_back("momentum");
  for (ParamOp param : params) {
    if (param.getUntrained())
      continue; // model state: graph.update_running_stats writes it
    Value grad = paramGrads.lookup(param.getSymNameAttr());
    if (!grad) {
      param.emitWarning("parameter @")
          << param.getSymName()
          << " does not affect the loss: its gradient is zero and the optimizer leaves it "
             "unchanged";
      continue;
    }
    for (llvm::StringRef role : roles) {
      std::string name = stateName(param, role);
      if (symbols.lookup(name)) {
        symbols.lookup(name)->emitError("the symbol @")
            << name << " is reserved for the training state of @" << param.getSymName();
        return signalPassFailure();
      }
      declBuilder.create<StateOp>(param.getLoc(), declBuilder.getStringAttr(name),
                                  TypeAttr::get(param.getType()));
    }
    gradStates.push_back(declBuilder.getStringAttr(stateName(param, "grad")));
    // Right after the gradient is complete, so it dies there instead of living to the end of
    // the backward pass.
    accumulate.setInsertionPointAfterValue(grad);
    accumulate.create<AccumulateGradOp>(
        param.getLoc(), grad, FlatSymbolRefAttr::get(model.getContext(), stateName(param, "grad")),
        FlatSymbolRefAttr());
    trained.push_back(param);
  }
  if (trained.empty()) {
    model.emitError("no parameter affects the loss, so there is nothing to train");
    return signalPassFailure();
  }
  eraseUnusedGradients(entry);
  entry.setSymName("micro_step");
  buildOptimizerStep(model, trained, gradStates);
}

} // namespace
