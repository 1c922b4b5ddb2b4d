//===- GraphConvOps.cpp - convolution, pooling and clipping ops ------------===//
//
// Result types and verifiers of graph.conv2d, graph.max_pool2d, graph.avg_pool2d, graph.clip and
// their gradient ops. The window arithmetic is ShapeRules.cpp's (makeWindow2d, conv2dShape,
// pool2dShape), which the plan validator and the CPU kernels use too; this file turns its
// verdicts into located diagnostics.
//
//===--------------------------------------------------------------------------===//

#include "dialects/Graph/GraphDialect.h"
#include "dialects/Graph/GraphOpHelpers.h"
#include "runtime/plan/ShapeRules.h"

#include <cmath>
#include <cstdio>

using namespace mlir;
using namespace ampc;
using namespace ampc::graph;

namespace {

/// An attribute list read through an adaptor, which leaves an absent default-valued list null:
/// empty then (makeWindow2d's defaults).
llvm::ArrayRef<int64_t> listOf(DenseI64ArrayAttr attr) {
  return attr ? attr.asArrayRef() : llvm::ArrayRef<int64_t>();
}

/// The window of a convolution over a weight of shape \p weight, or a diagnostic.
std::optional<plan::Window2d> convWindow(std::optional<Location> loc, llvm::StringRef op,
                                         const plan::Shape &weight,
                                         llvm::ArrayRef<int64_t> strides,
                                         llvm::ArrayRef<int64_t> padding,
                                         llvm::ArrayRef<int64_t> dilations) {
  std::string error;
  std::vector<int64_t> kernel = {1, 1};
  if (weight.size() == 4)
    kernel = {weight[2], weight[3]};
  std::optional<plan::Window2d> window = plan::makeWindow2d(
      kernel, toVector(strides), toVector(padding), toVector(dilations), false, error);
  if (!window)
    (void)emitOptionalError(loc, "'", op, "' ", error);
  return window;
}

/// The output shape of a convolution of \p input by \p weight, or a diagnostic.
std::optional<plan::Shape> convShape(std::optional<Location> loc, llvm::StringRef op,
                                     const plan::Shape &input, const plan::Shape &weight,
                                     llvm::ArrayRef<int64_t> strides,
                                     llvm::ArrayRef<int64_t> padding,
                                     llvm::ArrayRef<int64_t> dilations, int64_t groups) {
  std::optional<plan::Window2d> window = convWindow(loc, op, weight, strides, padding, dilations);
  if (!window)
    return std::nullopt;
  std::string error;
  std::optional<plan::Shape> shape = plan::conv2dShape(input, weight, *window, groups, error);
  if (!shape)
    (void)emitOptionalError(loc, "'", op, "' ", error);
  return shape;
}

/// The output shape of a pooling of \p input, or a diagnostic.
std::optional<plan::Shape> poolShape(std::optional<Location> loc, llvm::StringRef op,
                                     const plan::Shape &input, llvm::ArrayRef<int64_t> kernel,
                                     llvm::ArrayRef<int64_t> strides,
                                     llvm::ArrayRef<int64_t> padding,
                                     llvm::ArrayRef<int64_t> dilations, bool ceilMode) {
  std::string error;
  std::optional<plan::Window2d> window = plan::makeWindow2d(
      toVector(kernel), toVector(strides), toVector(padding), toVector(dilations), ceilMode, error);
  std::optional<plan::Shape> shape;
  if (window)
    shape = plan::pool2dShape(input, *window, error);
  if (!shape)
    (void)emitOptionalError(loc, "'", op, "' ", error);
  return shape;
}

/// \p actual must equal \p expected, the forward result's shape that a gradient op's dy has.
LogicalResult checkForwardShape(Operation *op, const plan::Shape &expected,
                                const plan::Shape &actual, llvm::StringRef what) {
  if (expected != actual)
    return op->emitOpError() << what << " " << plan::shapeToString(actual)
                             << " does not match the forward result " << plan::shapeToString(expected)
                             << " that the result type implies";
  return success();
}

LogicalResult checkBounds(Operation *op, llvm::APFloat min, llvm::APFloat max) {
  const double lo = min.convertToDouble(), hi = max.convertToDouble();
  if (std::isnan(lo) || std::isnan(hi))
    return op->emitOpError("bounds must not be NaN");
  if (lo > hi) {
    char text[96];
    std::snprintf(text, sizeof(text), "min (%g) must not exceed max (%g)", lo, hi);
    return op->emitOpError(text);
  }
  return success();
}

} // namespace

LogicalResult Conv2dOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, llvm::SmallVectorImpl<Type> &results) {
  llvm::SmallVector<plan::Shape> shapes;
  if (failed(operandShapes(loc, "graph.conv2d", {adaptor.getInput(), adaptor.getWeight()},
                           shapes)) ||
      failed(sameElementType(loc, "graph.conv2d", {adaptor.getInput(), adaptor.getWeight()})))
    return failure();
  std::optional<plan::Shape> shape =
      convShape(loc, "graph.conv2d", shapes[0], shapes[1], listOf(adaptor.getStridesAttr()),
                listOf(adaptor.getPaddingAttr()), listOf(adaptor.getDilationsAttr()),
                // An adaptor does not apply defaults.
                adaptor.getGroupsAttr() ? int64_t(adaptor.getGroups()) : 1);
  if (!shape)
    return failure();
  results.push_back(tensorOf(*shape, elementType(adaptor.getInput())));
  return success();
}

LogicalResult Conv2dGradInputOp::verify() {
  if (failed(sameElementType(getLoc(), "graph.conv2d_grad_input",
                             {getGrad(), getWeight(), getResult()})))
    return failure();
  std::optional<plan::Shape> forward =
      convShape(getLoc(), "graph.conv2d_grad_input", *staticShape(getResult().getType()),
                *staticShape(getWeight().getType()), getStrides(), getPadding(), getDilations(),
                getGroups());
  if (!forward)
    return failure();
  return checkForwardShape(*this, *forward, *staticShape(getGrad().getType()), "gradient");
}

LogicalResult Conv2dGradWeightOp::verify() {
  if (failed(sameElementType(getLoc(), "graph.conv2d_grad_weight", {getInput(), getGrad()})))
    return failure();
  Type result = elementType(getResult());
  if (result != elementType(getInput()) && !result.isF32())
    return emitOpError() << "result element type must be the operands' ("
                         << elementType(getInput()) << ") or f32, got " << result;
  std::optional<plan::Shape> forward =
      convShape(getLoc(), "graph.conv2d_grad_weight", *staticShape(getInput().getType()),
                *staticShape(getResult().getType()), getStrides(), getPadding(), getDilations(),
                getGroups());
  if (!forward)
    return failure();
  return checkForwardShape(*this, *forward, *staticShape(getGrad().getType()), "gradient");
}

LogicalResult MaxPool2dOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, llvm::SmallVectorImpl<Type> &results) {
  llvm::SmallVector<plan::Shape> shapes;
  if (failed(operandShapes(loc, "graph.max_pool2d", adaptor.getInput(), shapes)))
    return failure();
  std::optional<plan::Shape> shape =
      poolShape(loc, "graph.max_pool2d", shapes[0], listOf(adaptor.getKernelSizeAttr()), listOf(adaptor.getStridesAttr()),
                listOf(adaptor.getPaddingAttr()), listOf(adaptor.getDilationsAttr()), adaptor.getCeilMode());
  if (!shape)
    return failure();
  results.push_back(tensorOf(*shape, elementType(adaptor.getInput())));
  return success();
}

LogicalResult MaxPool2dGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                Adaptor adaptor,
                                                llvm::SmallVectorImpl<Type> &results) {
  llvm::SmallVector<plan::Shape> shapes;
  if (failed(operandShapes(loc, "graph.max_pool2d_grad", {adaptor.getInput(), adaptor.getGrad()},
                           shapes)))
    return failure();
  std::optional<plan::Shape> forward = poolShape(
      loc, "graph.max_pool2d_grad", shapes[0], listOf(adaptor.getKernelSizeAttr()), listOf(adaptor.getStridesAttr()),
      listOf(adaptor.getPaddingAttr()), listOf(adaptor.getDilationsAttr()), adaptor.getCeilMode());
  if (!forward || failed(checkGradShape(loc, "graph.max_pool2d_grad", adaptor.getInput(),
                                        adaptor.getGrad(), *forward)))
    return failure();
  results.push_back(adaptor.getInput().getType());
  return success();
}

LogicalResult AvgPool2dOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, llvm::SmallVectorImpl<Type> &results) {
  llvm::SmallVector<plan::Shape> shapes;
  if (failed(operandShapes(loc, "graph.avg_pool2d", adaptor.getInput(), shapes)))
    return failure();
  std::optional<plan::Shape> shape =
      poolShape(loc, "graph.avg_pool2d", shapes[0], listOf(adaptor.getKernelSizeAttr()), listOf(adaptor.getStridesAttr()),
                listOf(adaptor.getPaddingAttr()), {}, adaptor.getCeilMode());
  if (!shape)
    return failure();
  results.push_back(tensorOf(*shape, elementType(adaptor.getInput())));
  return success();
}

LogicalResult AvgPool2dGradOp::verify() {
  if (failed(sameElementType(getLoc(), "graph.avg_pool2d_grad", {getGrad(), getResult()})))
    return failure();
  std::optional<plan::Shape> forward =
      poolShape(getLoc(), "graph.avg_pool2d_grad", *staticShape(getResult().getType()),
                getKernelSize(), getStrides(), getPadding(), {}, getCeilMode());
  if (!forward)
    return failure();
  return checkForwardShape(*this, *forward, *staticShape(getGrad().getType()), "gradient");
}

LogicalResult ClipOp::verify() { return checkBounds(*this, getMin(), getMax()); }

LogicalResult ClipGradOp::verify() { return checkBounds(*this, getMin(), getMax()); }

//===----------------------------------------------------------------------===//
// Batch normalisation
//===----------------------------------------------------------------------===//

/// x [N, C, ...] and each of \p channels [C], one element type among the channel operands.
static LogicalResult checkBatchNorm(std::optional<Location> loc, llvm::StringRef op, Value input,
                                    ValueRange channels, llvm::ArrayRef<const char *> names) {
  llvm::SmallVector<plan::Shape> shapes;
  if (failed(operandShapes(loc, op, input, shapes)) ||
      failed(operandShapes(loc, op, channels, shapes)) ||
      failed(sameElementType(loc, op, channels)))
    return failure();
  if (shapes[0].size() < 2)
    return emitOptionalError(loc, "'", op, "' input must be [N, C, ...], got ",
                             plan::shapeToString(shapes[0]));
  const plan::Shape expected = {shapes[0][1]};
  for (size_t i = 1; i < shapes.size(); ++i)
    if (shapes[i] != expected)
      return emitOptionalError(loc, "'", op, "' ", names[i - 1], " must be ",
                               plan::shapeToString(expected), " (the input's channels), got ",
                               plan::shapeToString(shapes[i]));
  return success();
}

LogicalResult BatchNormOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, llvm::SmallVectorImpl<Type> &results) {
  if (failed(checkBatchNorm(loc, "graph.batch_norm", adaptor.getInput(),
                            {adaptor.getGamma(), adaptor.getBeta(), adaptor.getRunningMean(),
                             adaptor.getRunningVar()},
                            {"gamma", "beta", "running_mean", "running_var"})))
    return failure();
  results.push_back(adaptor.getInput().getType());
  return success();
}

LogicalResult BatchNormGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                Adaptor adaptor,
                                                llvm::SmallVectorImpl<Type> &results) {
  if (failed(checkBatchNorm(loc, "graph.batch_norm_grad", adaptor.getInput(), adaptor.getGamma(),
                            {"gamma"})))
    return failure();
  results.push_back(adaptor.getInput().getType());
  results.push_back(adaptor.getGamma().getType());
  results.push_back(adaptor.getGamma().getType());
  return success();
}

LogicalResult UpdateRunningStatsOp::verify() {
  auto shape = staticShape(getInput().getType());
  if (!shape || shape->size() < 2)
    return emitOpError("input must be [N, C, ...], got ") << getInput().getType();
  const double momentum = getMomentum().convertToDouble();
  if (!(momentum >= 0 && momentum <= 1))
    return emitOpError("momentum must be in [0, 1], got ") << momentum;
  auto model = (*this)->getParentOfType<ModelOp>();
  auto check = [&](FlatSymbolRefAttr name, const char *what,
                   llvm::ArrayRef<int64_t> expected) -> LogicalResult {
    auto param = model ? mlir::SymbolTable::lookupSymbolIn(model, name.getAttr()) : nullptr;
    auto untrained = llvm::dyn_cast_or_null<ParamOp>(param);
    if (!untrained || !untrained.getUntrained())
      return emitOpError() << what << " @" << name.getValue()
                           << " must name an untrained graph.param (model state)";
    if (!untrained.getTensorType().getElementType().isF32() ||
        untrained.getTensorType().getShape() != expected)
      return emitOpError() << what << " @" << name.getValue() << " must be "
                           << RankedTensorType::get(expected, Float32Type::get(getContext()))
                           << ", is " << untrained.getType();
    return success();
  };
  const int64_t channels = (*shape)[1];
  if (failed(check(getMeanAttr(), "mean", {channels})) ||
      failed(check(getVarAttr(), "var", {channels})))
    return failure();
  if (getCountAttr() && failed(check(getCountAttr(), "count", {})))
    return failure();
  return success();
}

/// A batch norm's epsilon: finite and >= 0 (the plan's rule, checked where the model is written).
static LogicalResult checkEpsilon(Operation *op, llvm::APFloat epsilon) {
  const double value = epsilon.convertToDouble();
  if (!std::isfinite(value) || value < 0)
    return op->emitOpError("epsilon must be finite and >= 0");
  return success();
}

LogicalResult BatchNormOp::verify() { return checkEpsilon(*this, getEpsilon()); }

LogicalResult BatchNormGradOp::verify() { return checkEpsilon(*this, getEpsilon()); }
