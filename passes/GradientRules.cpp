//===- GradientRules.cpp - vector-Jacobian products of the graph ops ------===//
//
// Each rule is written with the graph dialect's own ops, so the backward pass is ordinary IR
// that the later passes (precision, fusion, remat) treat like the forward pass. Composite ops
// whose gradient needs its own kernel (norms, softmax, attention, cross-entropy, embedding) have
// a dedicated *_grad op. Broadcasting operands get their gradient summed back to their shape.
//
//===--------------------------------------------------------------------------===//

#include "passes/GradientRules.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/TypeSwitch.h"

#include <numeric>

using namespace mlir;
using namespace ampc::graph;

static RankedTensorType tensorType(Value value) {
  return llvm::cast<RankedTensorType>(value.getType());
}

static bool isFloatTensor(Value value) {
  return llvm::isa<FloatType>(tensorType(value).getElementType());
}

Value GradientBuilder::scalar(Location loc, Type element, double value) {
  auto type = RankedTensorType::get({}, element);
  auto attr =
      DenseElementsAttr::get(type, llvm::ArrayRef<Attribute>{FloatAttr::get(element, value)});
  return b.create<ConstantOp>(loc, type, attr);
}

Value GradientBuilder::zerosLike(Location loc, Value value) {
  RankedTensorType type = tensorType(value);
  auto attr = DenseElementsAttr::get(
      type, llvm::ArrayRef<Attribute>{FloatAttr::get(type.getElementType(), 0.0)});
  return b.create<ConstantOp>(loc, type, attr);
}

Value GradientBuilder::add(Location loc, Value a, Value c) { return b.create<AddOp>(loc, a, c); }

Value GradientBuilder::reduceToShape(Location loc, Value grad, llvm::ArrayRef<int64_t> shape) {
  llvm::ArrayRef<int64_t> from = tensorType(grad).getShape();
  if (from == shape)
    return grad;
  // Leading dimensions that broadcasting added, then dimensions it stretched from 1.
  size_t lead = from.size() - shape.size();
  llvm::SmallVector<int64_t> axes;
  for (size_t i = 0; i < from.size(); ++i)
    if (i < lead || (shape[i - lead] == 1 && from[i] != 1))
      axes.push_back(static_cast<int64_t>(i));
  Value reduced = grad;
  if (!axes.empty())
    reduced = b.create<SumOp>(loc, grad, b.getDenseI64ArrayAttr(axes), UnitAttr());
  if (tensorType(reduced).getShape() != shape)
    reduced = b.create<ReshapeOp>(
        loc, RankedTensorType::get(shape, tensorType(grad).getElementType()), reduced);
  return reduced;
}

/// A matmul with the given transposes whose result has the operands' element type.
static Value createMatmul(OpBuilder &b, Location loc, Value lhs, Value rhs, bool transposeLhs,
                          bool transposeRhs) {
  return b.create<MatmulOp>(loc, lhs, rhs, transposeLhs ? b.getUnitAttr() : UnitAttr(),
                            transposeRhs ? b.getUnitAttr() : UnitAttr(), TypeAttr());
}

/// Merges the leading dimensions of a [..., m, k] tensor into one: [N * m, k].
static Value flattenRows(OpBuilder &b, Location loc, Value value) {
  RankedTensorType type = tensorType(value);
  auto shape = type.getShape();
  int64_t rows =
      std::accumulate(shape.begin(), shape.end() - 1, int64_t(1), std::multiplies<int64_t>());
  return b.create<ReshapeOp>(
      loc, RankedTensorType::get({rows, shape.back()}, type.getElementType()), value);
}

// With op(A) = A or A^T and op(B) likewise, C = op(A) op(B) and G = dC:
//   d op(A) = G op(B)^T and d op(B) = op(A)^T G, transposed back where the operand was.

Value GradientBuilder::matmulGradLhs(Location loc, MatmulOp op, Value grad) {
  Value lhs = op.getLhs(), rhs = op.getRhs();
  bool ta = op.getTransposeLhs(), tb = op.getTransposeRhs();
  Value result;
  if (!ta) // dA = G op(B)^T
    result = createMatmul(b, loc, grad, rhs, false, !tb);
  else // dA = (G op(B)^T)^T = op(B) G^T
    result = createMatmul(b, loc, rhs, grad, tb, true);
  return reduceToShape(loc, result, tensorType(lhs).getShape());
}

Value GradientBuilder::matmulGradRhs(Location loc, MatmulOp op, Value grad) {
  Value lhs = op.getLhs(), rhs = op.getRhs();
  bool ta = op.getTransposeLhs(), tb = op.getTransposeRhs();
  // A weight [K, N] shared by a batch of activations [..., M, K]: fold the batch into the rows
  // so one matmul computes the summed gradient instead of a per-batch one and a reduction.
  if (tensorType(rhs).getRank() == 2 && tensorType(lhs).getRank() > 2 && !ta) {
    lhs = flattenRows(b, loc, lhs);
    grad = flattenRows(b, loc, grad);
  }
  Value result;
  if (!tb) // dB = op(A)^T G
    result = createMatmul(b, loc, lhs, grad, !ta, false);
  else // dB = (op(A)^T G)^T = G^T op(A)
    result = createMatmul(b, loc, grad, lhs, true, ta);
  return reduceToShape(loc, result, tensorType(rhs).getShape());
}

FailureOr<llvm::SmallVector<Value>>
GradientBuilder::operandGradients(Operation *op, llvm::ArrayRef<Value> resultGrads) {
  Location loc = op->getLoc();
  llvm::SmallVector<Value> grads(op->getNumOperands());
  Value g = resultGrads.empty() ? Value() : resultGrads[0];
  // Gradient of a broadcasting binary operand i from the gradient of the result.
  auto toOperand = [&](unsigned i, Value grad) {
    grads[i] = reduceToShape(loc, grad, tensorType(op->getOperand(i)).getShape());
  };
  Type element = g ? tensorType(g).getElementType() : Type();

  LogicalResult status =
      llvm::TypeSwitch<Operation *, LogicalResult>(op)
          .Case([&](AddOp) {
            toOperand(0, g);
            toOperand(1, g);
            return success();
          })
          .Case([&](SubOp) {
            toOperand(0, g);
            grads[1] = b.create<NegOp>(
                loc, reduceToShape(loc, g, tensorType(op->getOperand(1)).getShape()));
            return success();
          })
          .Case([&](MulOp mul) {
            toOperand(0, b.create<MulOp>(loc, g, mul.getRhs()));
            toOperand(1, b.create<MulOp>(loc, g, mul.getLhs()));
            return success();
          })
          .Case([&](DivOp div) {
            // y = a / b: da = g / b, db = -g a / b^2 = -(g / b) y.
            Value quotient = b.create<DivOp>(loc, g, div.getRhs());
            toOperand(0, quotient);
            toOperand(1, b.create<NegOp>(loc, b.create<MulOp>(loc, quotient, div.getResult())));
            return success();
          })
          .Case([&](NegOp) {
            grads[0] = b.create<NegOp>(loc, g);
            return success();
          })
          // Every activation names its own gradient op (Graph_Activation in GraphOps.td).
          .Case([&](ActivationOpInterface activation) {
            grads[0] = activation.createGradient(b, g);
            return success();
          })
          .Case([&](GeluOp gelu) {
            grads[0] = b.create<GeluGradOp>(loc, gelu.getApproximationAttr(), gelu.getInput(), g);
            return success();
          })
          .Case([&](TanhOp tanh) {
            // dx = g (1 - y^2)
            Value y = tanh.getResult();
            Value slope =
                b.create<SubOp>(loc, scalar(loc, element, 1.0), b.create<MulOp>(loc, y, y));
            grads[0] = b.create<MulOp>(loc, g, slope);
            return success();
          })
          .Case([&](ExpOp exp) {
            grads[0] = b.create<MulOp>(loc, g, exp.getResult());
            return success();
          })
          .Case([&](LogOp log) {
            grads[0] = b.create<DivOp>(loc, g, log.getInput());
            return success();
          })
          .Case([&](SqrtOp sqrt) {
            // dx = g / (2 y)
            Value twice = b.create<MulOp>(loc, sqrt.getResult(), scalar(loc, element, 2.0));
            grads[0] = b.create<DivOp>(loc, g, twice);
            return success();
          })
          .Case([&](RsqrtOp rsqrt) {
            // y = x^(-1/2): dx = g * (-1/2) y^3
            Value y = rsqrt.getResult();
            Value cube = b.create<MulOp>(loc, y, b.create<MulOp>(loc, y, y));
            grads[0] =
                b.create<MulOp>(loc, g, b.create<MulOp>(loc, cube, scalar(loc, element, -0.5)));
            return success();
          })
          .Case([&](DropoutOp dropout) {
            // The same mask and scale, drawn from the forward's stream.
            grads[0] = b.create<DropoutOp>(loc, g, dropout.getPAttr(), dropout.getStreamAttr());
            return success();
          })
          .Case([&](MatmulOp matmul) {
            grads[0] = matmulGradLhs(loc, matmul, g);
            grads[1] = matmulGradRhs(loc, matmul, g);
            return success();
          })
          .Case([&](TransposeOp transpose) {
            llvm::ArrayRef<int64_t> perm = transpose.getPermutation();
            llvm::SmallVector<int64_t> inverse(perm.size());
            for (size_t i = 0; i < perm.size(); ++i)
              inverse[perm[i]] = static_cast<int64_t>(i);
            grads[0] = b.create<TransposeOp>(loc, g, b.getDenseI64ArrayAttr(inverse));
            return success();
          })
          .Case([&](ReshapeOp reshape) {
            grads[0] = b.create<ReshapeOp>(loc, reshape.getInput().getType(), g);
            return success();
          })
          .Case([&](BroadcastOp) {
            toOperand(0, g);
            return success();
          })
          .Case([&](SliceOp slice) {
            auto in = tensorType(slice.getInput()).getShape();
            llvm::SmallVector<int64_t> high;
            for (size_t i = 0; i < in.size(); ++i)
              high.push_back(in[i] - slice.getStarts()[i] - slice.getSizes()[i]);
            grads[0] = b.create<PadOp>(loc, g, slice.getStartsAttr(), b.getDenseI64ArrayAttr(high));
            return success();
          })
          .Case([&](PadOp pad) {
            // The padded tensor's gradient is the box the input occupies.
            auto in = tensorType(pad.getInput()).getShape();
            grads[0] = b.create<SliceOp>(loc, g, pad.getLowAttr(), b.getDenseI64ArrayAttr(in));
            return success();
          })
          .Case([&](SplitOp split) {
            llvm::SmallVector<Value> pieces;
            for (auto [result, grad] : llvm::zip(split.getResults(), resultGrads))
              pieces.push_back(grad ? grad : zerosLike(loc, result));
            grads[0] = b.create<ConcatOp>(loc, pieces, split.getAxisAttr());
            return success();
          })
          .Case([&](ConcatOp concat) {
            int64_t axis = concat.getAxis(), offset = 0;
            for (auto [i, input] : llvm::enumerate(concat.getInputs())) {
              auto shape = tensorType(input).getShape();
              llvm::SmallVector<int64_t> starts(shape.size(), 0);
              starts[axis] = offset;
              offset += shape[axis];
              if (isFloatTensor(input))
                grads[i] = b.create<SliceOp>(loc, g, b.getDenseI64ArrayAttr(starts),
                                             b.getDenseI64ArrayAttr(shape));
            }
            return success();
          })
          .Case<SumOp, MeanOp>([&](auto reduce) {
            // Broadcast g back over the reduced axes (each element contributed once, or
            // 1/count of itself for the mean).
            RankedTensorType in = tensorType(reduce.getInput());
            llvm::SmallVector<int64_t> kept(in.getShape());
            int64_t count = 1;
            for (int64_t axis : reduce.getAxes()) {
              count *= kept[axis];
              kept[axis] = 1;
            }
            Value grad = g;
            if (llvm::isa<MeanOp>(op))
              grad = b.create<MulOp>(loc, grad, scalar(loc, element, 1.0 / double(count)));
            if (tensorType(grad).getShape() != llvm::ArrayRef<int64_t>(kept))
              grad = b.create<ReshapeOp>(loc, RankedTensorType::get(kept, element), grad);
            grads[0] = b.create<BroadcastOp>(loc, in, grad);
            return success();
          })
          .Case([&](MaxOp max) {
            grads[0] = b.create<MaxGradOp>(loc, max.getInput(), g, max.getAxesAttr(),
                                           max.getKeepdimsAttr());
            return success();
          })
          .Case([&](EmbeddingOp embedding) {
            grads[0] = b.create<EmbeddingGradOp>(loc, embedding.getTable().getType(),
                                                 embedding.getIndices(), g);
            return success();
          })
          .Case([&](LayerNormOp norm) {
            auto grad = b.create<LayerNormGradOp>(loc, norm.getInput(), norm.getGamma(), g,
                                                  norm.getEpsilonAttr());
            grads[0] = grad.getInputGrad();
            grads[1] = grad.getGammaGrad();
            grads[2] = grad.getBetaGrad();
            return success();
          })
          .Case([&](RmsNormOp norm) {
            auto grad = b.create<RmsNormGradOp>(loc, norm.getInput(), norm.getGamma(), g,
                                                norm.getEpsilonAttr());
            grads[0] = grad.getInputGrad();
            grads[1] = grad.getGammaGrad();
            return success();
          })
          .Case([&](SoftmaxOp softmax) {
            grads[0] = b.create<SoftmaxGradOp>(loc, softmax.getResult(), g);
            return success();
          })
          .Case([&](AttentionOp attention) {
            auto grad = b.create<AttentionGradOp>(
                loc, attention.getQuery(), attention.getKey(), attention.getValue(), g,
                /*saved=*/ValueRange{}, attention.getCausalAttr(), attention.getScaleAttr());
            grads[0] = grad.getQueryGrad();
            grads[1] = grad.getKeyGrad();
            grads[2] = grad.getValueGrad();
            return success();
          })
          .Case([&](QkvAttentionOp attention) {
            grads[0] = b.create<QkvAttentionGradOp>(
                loc, attention.getQkv(), g, /*saved=*/ValueRange{}, attention.getHeadsAttr(),
                attention.getCausalAttr(), attention.getScaleAttr());
            return success();
          })
          .Case([&](BatchNormOp norm) {
            // Training mode: the batch statistics, recomputed from x; the running statistics
            // are untrained model state and get no gradient.
            auto grad = b.create<BatchNormGradOp>(loc, norm.getInput(), norm.getGamma(), g,
                                                  norm.getEpsilonAttr());
            grads[0] = grad.getInputGrad();
            grads[1] = grad.getGammaGrad();
            grads[2] = grad.getBetaGrad();
            return success();
          })
          .Case([&](ClipOp clip) {
            grads[0] = b.create<ClipGradOp>(loc, clip.getInput(), g, clip.getMinAttr(),
                                            clip.getMaxAttr());
            return success();
          })
          .Case([&](Conv2dOp conv) {
            grads[0] = b.create<Conv2dGradInputOp>(
                loc, conv.getInput().getType(), g, conv.getWeight(), conv.getStridesAttr(),
                conv.getPaddingAttr(), conv.getDilationsAttr(), conv.getGroupsAttr());
            grads[1] = b.create<Conv2dGradWeightOp>(
                loc, conv.getWeight().getType(), conv.getInput(), g, conv.getStridesAttr(),
                conv.getPaddingAttr(), conv.getDilationsAttr(), conv.getGroupsAttr());
            return success();
          })
          .Case([&](MaxPool2dOp pool) {
            grads[0] = b.create<MaxPool2dGradOp>(
                loc, pool.getInput(), g, pool.getKernelSizeAttr(), pool.getStridesAttr(),
                pool.getPaddingAttr(), pool.getDilationsAttr(), pool.getCeilModeAttr());
            return success();
          })
          .Case([&](AvgPool2dOp pool) {
            grads[0] = b.create<AvgPool2dGradOp>(
                loc, pool.getInput().getType(), g, pool.getKernelSizeAttr(), pool.getStridesAttr(),
                pool.getPaddingAttr(), pool.getCeilModeAttr(), pool.getCountIncludePadAttr());
            return success();
          })
          .Case([&](CrossEntropyOp loss) {
            grads[0] =
                b.create<CrossEntropyGradOp>(loc, loss.getLogits(), loss.getLabels(), g,
                                             loss.getIgnoreIndexAttr(), loss.getReductionAttr());
            return success();
          })
          .Case([&](MseLossOp loss) {
            // l = mean((p - t)^2): dp = g * 2 (p - t) / n, dt = -dp.
            Value p = loss.getPrediction(), t = loss.getTarget();
            Type pElement = tensorType(p).getElementType();
            Value seed = g;
            if (pElement != element)
              seed = b.create<CastOp>(loc, RankedTensorType::get({}, pElement), g);
            double n = static_cast<double>(tensorType(p).getNumElements());
            Value coefficient = b.create<MulOp>(loc, seed, scalar(loc, pElement, 2.0 / n));
            Value dp = b.create<MulOp>(loc, b.create<SubOp>(loc, p, t), coefficient);
            grads[0] = dp;
            grads[1] = b.create<NegOp>(loc, dp);
            return success();
          })
          .Case([&](CastOp cast) {
            if (isFloatTensor(cast.getInput()))
              grads[0] = b.create<CastOp>(loc, cast.getInput().getType(), g);
            return success();
          })
          .Default([&](Operation *other) {
            return other->emitOpError("has no gradient rule; graph-build-training cannot "
                                      "differentiate it");
          });
  if (failed(status))
    return failure();
  // Integer operands (indices, labels) never carry a gradient.
  for (auto [i, operand] : llvm::enumerate(op->getOperands()))
    if (!isFloatTensor(operand))
      grads[i] = Value();
  return grads;
}
