//===- GraphTrainingOps.cpp - Verifiers of the training-state and optimizer ops ===//
//
// The ops of GraphTrainingOps.td: graph.state and what reads or updates it (the gradient seed,
// accumulation, parameter copies, loss scaling, the global norm, the learning-rate schedule,
// AdamW and SGD). Their symbol uses are checked against the model's states and parameters.
//
//===--------------------------------------------------------------------------===//

#include "dialects/Graph/GraphDialect.h"
#include "dialects/Graph/GraphOpHelpers.h"
#include "runtime/plan/Plan.h"
#include "runtime/plan/ShapeRules.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

#include <cmath>

using namespace mlir;
using namespace ampc;
using namespace ampc::graph;

//===----------------------------------------------------------------------===//
// Training state and the optimizer step
//===----------------------------------------------------------------------===//

/// Resolves `name` to a graph.state whose shape is `shape` (when given).
static FailureOr<StateOp> lookupState(Operation *user, FlatSymbolRefAttr name, llvm::StringRef role,
                                      std::optional<plan::Shape> shape,
                                      SymbolTableCollection &symbolTable) {
  Operation *symbol = symbolTable.lookupNearestSymbolFrom(user, name);
  auto state = llvm::dyn_cast_or_null<StateOp>(symbol);
  if (!state) {
    if (!symbol)
      return user->emitOpError("refers to an unknown state ") << name << " (the " << role << ")";
    return user->emitOpError() << name << " is a '" << symbol->getName()
                               << "', not a graph.state (the " << role << ")";
  }
  if (shape && toVector(state.getTensorType().getShape()) != *shape)
    return user->emitOpError("the ")
           << role << " " << name << " has type " << state.getType() << " but shape "
           << plan::shapeToString(*shape) << " is needed";
  return state;
}

LogicalResult GradSeedOp::verify() {
  // The integer attributes are read signed: the generated getters return them unsigned.
  int64_t steps = getAccumStepsAttr().getInt();
  if (steps < 1)
    return emitOpError("accum_steps must be at least 1, got ") << steps;
  return success();
}

/// `name`, when given, must be a graph.loss_scale.
static LogicalResult checkScaler(Operation *user, FlatSymbolRefAttr name,
                                 SymbolTableCollection &symbolTable) {
  if (!name)
    return success();
  Operation *symbol = symbolTable.lookupNearestSymbolFrom(user, name);
  if (!llvm::isa_and_nonnull<LossScaleOp>(symbol))
    return user->emitOpError() << name << " is not a graph.loss_scale";
  return success();
}

LogicalResult AccumulateGradOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  if (failed(checkScaler(*this, getUnscaleAttr(), symbolTable)))
    return failure();
  return lookupState(*this, getAccumulatorAttr(), "gradient accumulator",
                     staticShape(getGrad().getType()), symbolTable);
}

LogicalResult ParamCopyOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto source =
      llvm::dyn_cast_or_null<ParamOp>(symbolTable.lookupNearestSymbolFrom(*this, getSourceAttr()));
  if (!source)
    return emitOpError("copies ") << getSourceAttr() << ", which is not a graph.param";
  Type element = getTensorType().getElementType();
  if (!element.isBF16() && !element.isF16())
    return emitOpError("a parameter copy is bf16 or f16, got ") << element;
  if (source.getTensorType().getShape() != getTensorType().getShape())
    return emitOpError("copy type ") << getType() << " does not have the shape of "
                                     << getSourceAttr() << " (" << source.getType() << ")";
  return success();
}

LogicalResult LossScaleOp::verify() {
  double initial = getInitialScale().convertToDouble();
  double growth = getGrowthFactor().convertToDouble();
  double backoff = getBackoffFactor().convertToDouble();
  double floor = getMinScale().convertToDouble();
  if (!std::isfinite(initial) || initial <= 0.0)
    return emitOpError("initial_scale must be finite and positive, got ") << formatReal(initial);
  if (!std::isfinite(growth) || growth < 1.0)
    return emitOpError("growth_factor must be finite and >= 1, got ") << formatReal(growth);
  if (!(backoff > 0.0 && backoff < 1.0))
    return emitOpError("backoff_factor must be in (0, 1), got ") << formatReal(backoff);
  if (getGrowthIntervalAttr().getInt() < 1)
    return emitOpError("growth_interval must be at least 1, got ")
           << getGrowthIntervalAttr().getInt();
  if (!std::isfinite(floor) || floor < 0.0 || floor > initial)
    return emitOpError("min_scale must be in [0, initial_scale], got ") << formatReal(floor);
  return success();
}

LogicalResult GetLossScaleOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return checkScaler(*this, getScalerAttr(), symbolTable);
}

LogicalResult UpdateLossScaleOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return checkScaler(*this, getScalerAttr(), symbolTable);
}

LogicalResult GlobalNormOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  if (getStates().empty())
    return emitOpError("needs at least one state");
  llvm::DenseSet<Attribute> seen;
  for (Attribute name : getStates())
    if (!seen.insert(name).second)
      return emitOpError("names ") << name << " twice; each state counts once in the norm";
  for (Attribute name : getStates())
    if (failed(lookupState(*this, llvm::cast<FlatSymbolRefAttr>(name), "norm operand", std::nullopt,
                           symbolTable)))
      return failure();
  return success();
}

LogicalResult LrScheduleOp::verify() {
  double lr = getLr().convertToDouble(), minLr = getMinLr().convertToDouble();
  if (!std::isfinite(lr) || lr <= 0.0)
    return emitOpError("learning rate must be finite and positive, got ") << formatReal(lr);
  if (!std::isfinite(minLr) || minLr < 0.0 || minLr > lr)
    return emitOpError("min_lr must be in [0, lr], got ") << formatReal(minLr);
  int64_t warmup = getWarmupStepsAttr().getInt(), decay = getDecayStepsAttr().getInt();
  if (warmup < 0 || decay < 0)
    return emitOpError("warmup_steps and decay_steps must not be negative");
  if (getKind() == LrSchedule::cosine && decay != 0 && decay <= warmup)
    return emitOpError("decay_steps (") << decay << ") must exceed warmup_steps (" << warmup
                                        << "), or be 0 for the run's number of steps";
  return success();
}

/// Checks the hyper-parameters every optimizer shares.
static LogicalResult verifyCommonHyperParameters(Operation *op, double weightDecay,
                                                 double clipNorm) {
  if (!std::isfinite(weightDecay) || weightDecay < 0.0)
    return op->emitOpError("weight_decay must be finite and >= 0, got ") << formatReal(weightDecay);
  if (!std::isfinite(clipNorm) || clipNorm < 0.0)
    return op->emitOpError("clip_norm must be finite and >= 0 (0 disables clipping), got ")
           << formatReal(clipNorm);
  return success();
}

/// Resolves an optimizer's parameter and its states, all shaped like the parameter.
static LogicalResult
verifyOptimizerSymbols(Operation *op, FlatSymbolRefAttr param,
                       llvm::ArrayRef<std::pair<FlatSymbolRefAttr, llvm::StringRef>> states,
                       SymbolTableCollection &symbolTable) {
  auto decl = llvm::dyn_cast_or_null<ParamOp>(symbolTable.lookupNearestSymbolFrom(op, param));
  if (!decl)
    return op->emitOpError("updates ") << param << ", which is not a graph.param";
  if (!decl.getTensorType().getElementType().isF32())
    return op->emitOpError("master weights must be f32; ") << param << " is " << decl.getType();
  plan::Shape shape = toVector(decl.getTensorType().getShape());
  for (auto [name, role] : states)
    if (failed(lookupState(op, name, role, shape, symbolTable)))
      return failure();
  return success();
}

LogicalResult AdamWOp::verify() {
  double beta1 = getBeta1().convertToDouble(), beta2 = getBeta2().convertToDouble();
  if (!(beta1 >= 0.0 && beta1 < 1.0) || !(beta2 >= 0.0 && beta2 < 1.0))
    return emitOpError("beta1 and beta2 must be in [0, 1), got ")
           << formatReal(beta1) << " and " << formatReal(beta2);
  double eps = getEps().convertToDouble();
  if (!std::isfinite(eps) || eps <= 0.0)
    return emitOpError("eps must be finite and positive, got ") << formatReal(eps);
  return verifyCommonHyperParameters(*this, getWeightDecay().convertToDouble(),
                                     getClipNorm().convertToDouble());
}

/// The optional copy must be a copy of `param`; the optional scaler a graph.loss_scale.
static LogicalResult verifyCopyAndScaler(Operation *op, FlatSymbolRefAttr param,
                                         FlatSymbolRefAttr copy, FlatSymbolRefAttr scaler,
                                         SymbolTableCollection &symbolTable) {
  if (copy) {
    auto decl = llvm::dyn_cast_or_null<ParamCopyOp>(symbolTable.lookupNearestSymbolFrom(op, copy));
    if (!decl || decl.getSourceAttr() != param)
      return op->emitOpError() << copy << " is not a graph.param_copy of " << param;
  }
  return checkScaler(op, scaler, symbolTable);
}

LogicalResult AdamWOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  if (failed(verifyCopyAndScaler(*this, getParamAttr(), getCopyAttr(), getSkipNonfiniteAttr(),
                                 symbolTable)))
    return failure();
  return verifyOptimizerSymbols(*this, getParamAttr(),
                                {{getGradAttr(), "gradient accumulator"},
                                 {getFirstMomentAttr(), "first moment"},
                                 {getSecondMomentAttr(), "second moment"}},
                                symbolTable);
}

LogicalResult SgdOp::verify() {
  double momentum = getMomentum().convertToDouble();
  if (!(momentum >= 0.0 && momentum < 1.0))
    return emitOpError("momentum must be in [0, 1), got ") << formatReal(momentum);
  return verifyCommonHyperParameters(*this, getWeightDecay().convertToDouble(),
                                     getClipNorm().convertToDouble());
}

LogicalResult SgdOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  if (failed(verifyCopyAndScaler(*this, getParamAttr(), getCopyAttr(), getSkipNonfiniteAttr(),
                                 symbolTable)))
    return failure();
  return verifyOptimizerSymbols(
      *this, getParamAttr(),
      {{getGradAttr(), "gradient accumulator"}, {getMomentumBufferAttr(), "momentum buffer"}},
      symbolTable);
}
