//===- GraphAttentionOps.cpp - Inference and verifiers of the attention ops ===//
//
// graph.attention and graph.qkv_attention, and their gradients: result types from the shape
// rules (runtime/plan/ShapeRules.h), the explicit scale, the effective scale the kernels use,
// and the saved forward values (o, lse) a gradient may read instead of recomputing them.
//
//===--------------------------------------------------------------------------===//

#include "dialects/Graph/GraphDialect.h"
#include "dialects/Graph/GraphOpHelpers.h"
#include "runtime/plan/ShapeRules.h"

#include "mlir/IR/Builders.h"

#include <cmath>

using namespace mlir;
using namespace ampc;
using namespace ampc::graph;

/// An attention's explicit scale is finite and positive.
static LogicalResult checkAttentionScale(std::optional<Location> loc, llvm::StringRef op,
                                         std::optional<llvm::APFloat> scale) {
  if (scale && (!std::isfinite(scale->convertToDouble()) || scale->convertToDouble() <= 0.0))
    return emitOptionalError(loc, "'", op, "' scale must be finite and positive, got ",
                             formatReal(scale->convertToDouble()));
  return success();
}

/// Shared inference of attention and its gradient: the forward result type.
static LogicalResult inferAttention(std::optional<Location> loc, llvm::StringRef op, ValueRange qkv,
                                    bool causal, std::optional<llvm::APFloat> scale,
                                    llvm::SmallVectorImpl<Type> &results) {
  llvm::SmallVector<plan::Shape> shapes;
  if (failed(operandShapes(loc, op, qkv, shapes)) || failed(sameElementType(loc, op, qkv)))
    return failure();
  if (failed(checkAttentionScale(loc, op, scale)))
    return failure();
  std::string error;
  auto result = plan::attentionShape(shapes[0], shapes[1], shapes[2], causal, error);
  if (!result)
    return emitOptionalError(loc, "'", op, "' ", error);
  results.push_back(tensorOf(*result, elementType(qkv[0])));
  return success();
}

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, llvm::SmallVectorImpl<Type> &results) {
  if (failed(inferAttention(loc, "graph.attention",
                            {adaptor.getQuery(), adaptor.getKey(), adaptor.getValue()},
                            adaptor.getCausal(), adaptor.getScale(), results)))
    return failure();
  // with_lse: the f32 log-sum-exp of each query row, [..., T].
  if (adaptor.getWithLse()) {
    plan::Shape rows = *staticShape(adaptor.getQuery().getType());
    rows.pop_back();
    results.push_back(tensorOf(rows, Float32Type::get(adaptor.getQuery().getContext())));
  }
  return success();
}

double AttentionOp::getEffectiveScale() {
  if (auto scale = getScale())
    return scale->convertToDouble();
  auto query = llvm::cast<RankedTensorType>(getQuery().getType());
  return 1.0 / std::sqrt(static_cast<double>(query.getShape().back()));
}

/// The result type of a qkv_attention over \p qkv (with its lse type when \p withLse).
static LogicalResult inferQkvAttention(std::optional<Location> loc, llvm::StringRef op, Value qkv,
                                       int64_t heads, std::optional<llvm::APFloat> scale,
                                       bool withLse, llvm::SmallVectorImpl<Type> &results) {
  llvm::SmallVector<plan::Shape> shapes;
  if (failed(operandShapes(loc, op, qkv, shapes)))
    return failure();
  if (failed(checkAttentionScale(loc, op, scale)))
    return failure();
  std::string error;
  auto result = plan::qkvAttentionShape(shapes[0], heads, error);
  if (!result)
    return emitOptionalError(loc, "'", op, "' ", error);
  results.push_back(tensorOf(*result, elementType(qkv)));
  if (withLse)
    results.push_back(
        tensorOf(plan::qkvAttentionLseShape(shapes[0], heads), Float32Type::get(qkv.getContext())));
  return success();
}

static double qkvEffectiveScale(std::optional<llvm::APFloat> scale, Value qkv, int64_t heads) {
  if (scale)
    return scale->convertToDouble();
  const int64_t packed = llvm::cast<RankedTensorType>(qkv.getType()).getShape().back();
  return 1.0 / std::sqrt(static_cast<double>(packed / (3 * heads)));
}

LogicalResult QkvAttentionOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                               Adaptor adaptor,
                                               llvm::SmallVectorImpl<Type> &results) {
  return inferQkvAttention(loc, "graph.qkv_attention", adaptor.getQkv(),
                           static_cast<int64_t>(adaptor.getHeads()), adaptor.getScale(),
                           adaptor.getWithLse(), results);
}

int64_t QkvAttentionOp::getHeadDim() {
  return llvm::cast<RankedTensorType>(getQkv().getType()).getShape().back() /
         (3 * static_cast<int64_t>(getHeads()));
}

double QkvAttentionOp::getEffectiveScale() {
  return qkvEffectiveScale(getScale(), getQkv(), static_cast<int64_t>(getHeads()));
}

LogicalResult AttentionGradOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location> loc,
                                                Adaptor adaptor,
                                                llvm::SmallVectorImpl<Type> &results) {
  llvm::SmallVector<Type> forward;
  if (failed(inferAttention(loc, "graph.attention_grad",
                            {adaptor.getQuery(), adaptor.getKey(), adaptor.getValue()},
                            adaptor.getCausal(), adaptor.getScale(), forward)))
    return failure();
  if (failed(checkGradShape(loc, "graph.attention_grad", adaptor.getQuery(), adaptor.getGrad(),
                            *staticShape(forward[0]))))
    return failure();
  results.push_back(adaptor.getQuery().getType());
  results.push_back(adaptor.getKey().getType());
  results.push_back(adaptor.getValue().getType());
  return success();
}

/// The saved forward values of an attention gradient, when present: the forward's output
/// (\p output: the result's shape and the query's element type, what the kernels read) and its
/// f32 row log-sum-exp (\p lse).
static LogicalResult verifySavedForward(Operation *op, ValueRange saved, Type output, Type lse) {
  if (saved.size() != 2)
    return op->emitOpError(
               "saves the forward's output and log-sum-exp: 'saved' takes 2 values, got ")
           << saved.size();
  if (saved[0].getType() != output)
    return op->emitOpError("saved output has type ")
           << saved[0].getType() << " but the forward's result is " << output;
  if (saved[1].getType() != lse)
    return op->emitOpError("saved log-sum-exp has type ")
           << saved[1].getType() << ", expected " << lse;
  return success();
}

LogicalResult AttentionGradOp::verify() {
  if (getSaved().empty())
    return success();
  llvm::SmallVector<Type> forward;
  if (failed(inferAttention(getLoc(), "graph.attention_grad", {getQuery(), getKey(), getValue()},
                            getCausal(), getScale(), forward)))
    return failure();
  plan::Shape rows = *staticShape(forward[0]);
  rows.pop_back();
  return verifySavedForward(*this, getSaved(), forward[0],
                            tensorOf(rows, Float32Type::get(getContext())));
}

double AttentionGradOp::getEffectiveScale() {
  if (auto scale = getScale())
    return scale->convertToDouble();
  auto query = llvm::cast<RankedTensorType>(getQuery().getType());
  return 1.0 / std::sqrt(static_cast<double>(query.getShape().back()));
}

LogicalResult QkvAttentionGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                   Adaptor adaptor,
                                                   llvm::SmallVectorImpl<Type> &results) {
  llvm::SmallVector<Type> forward;
  if (failed(inferQkvAttention(loc, "graph.qkv_attention_grad", adaptor.getQkv(),
                               static_cast<int64_t>(adaptor.getHeads()), adaptor.getScale(), false,
                               forward)) ||
      failed(checkGradShape(loc, "graph.qkv_attention_grad", adaptor.getQkv(), adaptor.getGrad(),
                            *staticShape(forward[0]))))
    return failure();
  results.push_back(adaptor.getQkv().getType());
  return success();
}

LogicalResult QkvAttentionGradOp::verify() {
  if (getSaved().empty())
    return success();
  llvm::SmallVector<Type> forward;
  if (failed(inferQkvAttention(getLoc(), "graph.qkv_attention_grad", getQkv(),
                               static_cast<int64_t>(getHeads()), getScale(), true, forward)))
    return failure();
  return verifySavedForward(*this, getSaved(), forward[0], forward[1]);
}

double QkvAttentionGradOp::getEffectiveScale() {
  return qkvEffectiveScale(getScale(), getQkv(), static_cast<int64_t>(getHeads()));
}
