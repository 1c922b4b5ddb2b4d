//===- GraphRaiseFusedOps.cpp - decomposed ops back to the fused ones -----===//
//
// Walks the entry function once per pattern, in an order where each pattern sees the output of
// the previous ones (rsqrt before RMSNorm, causal softmax before attention), replaces each match
// by the fused op at the location of the op it replaces, and erases what is left unused. Every
// pattern checks that the intermediate values it swallows have no other use, so a match never
// duplicates work.
//
//===----------------------------------------------------------------------===//

#include "passes/EraseUnused.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <cmath>
#include <optional>

namespace ampc::graph {
#define GEN_PASS_DEF_GRAPHRAISEFUSEDOPS
#include "passes/Passes.h.inc"
} // namespace ampc::graph

using namespace mlir;
using namespace ampc::graph;

namespace {

/// The value of a constant whose elements are all equal, or nothing.
std::optional<double> splatValue(Value value) {
  auto constant = value ? value.getDefiningOp<ConstantOp>() : nullptr;
  if (!constant)
    return std::nullopt;
  auto dense = llvm::dyn_cast<DenseFPElementsAttr>(constant.getValue());
  if (!dense || dense.empty())
    return std::nullopt;
  auto values = dense.getValues<APFloat>();
  const double first = (*values.begin()).convertToDouble();
  if (!dense.isSplat())
    for (APFloat element : values)
      if (element.convertToDouble() != first)
        return std::nullopt;
  return first;
}

bool isConstant(Value value, double expected, double tolerance = 1e-6) {
  std::optional<double> actual = splatValue(value);
  return actual && std::fabs(*actual - expected) <= tolerance * std::fabs(expected);
}

/// Whether \p value feeds exactly one op (it may be swallowed by a pattern).
bool single(Value value) { return value && value.hasOneUse(); }

/// Calls \p match(a, b) with the operands of a two-operand op in both orders; true if one does.
template <typename Op, typename F> bool commuted(Value value, F match) {
  auto op = value ? value.getDefiningOp<Op>() : nullptr;
  if (!op)
    return false;
  return match(op.getLhs(), op.getRhs()) || match(op.getRhs(), op.getLhs());
}

/// x of mean(x, [last], keepdims).
Value lastAxisMean(Value value) {
  auto mean = value ? value.getDefiningOp<MeanOp>() : nullptr;
  if (!mean || !mean.getKeepdims())
    return {};
  const int64_t rank = llvm::cast<RankedTensorType>(mean.getInput().getType()).getRank();
  if (mean.getAxes().size() != 1 || mean.getAxes()[0] != rank - 1)
    return {};
  return mean.getInput();
}

/// Whether \p value is x * x.
bool isSquareOf(Value value, Value x) {
  auto mul = value ? value.getDefiningOp<MulOp>() : nullptr;
  return mul && mul.getLhs() == x && mul.getRhs() == x;
}

/// Whether \p gain has the shape of \p x's last axis.
bool isLastAxisVector(Value gain, Value x) {
  auto gainType = llvm::cast<RankedTensorType>(gain.getType());
  auto xType = llvm::cast<RankedTensorType>(x.getType());
  return gainType.getRank() == 1 && gainType.getDimSize(0) == xType.getShape().back() &&
         gainType.getElementType() == xType.getElementType();
}

/// The permutation that swaps the last two of \p rank dimensions.
llvm::SmallVector<int64_t> swapLastTwo(int64_t rank) {
  llvm::SmallVector<int64_t> permutation;
  for (int64_t d = 0; d < rank; ++d)
    permutation.push_back(d);
  std::swap(permutation[rank - 1], permutation[rank - 2]);
  return permutation;
}

struct GraphRaiseFusedOpsPass : ampc::graph::impl::GraphRaiseFusedOpsBase<GraphRaiseFusedOpsPass> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp entry = getOperation().getEntryFunction();
    if (!entry)
      return;
    Block &body = entry.getBody().front();
    forEach<MatmulOp>(body, [&](MatmulOp op) { return foldTransposes(op); });
    forEach<DivOp>(body, [&](DivOp op) { return raiseRsqrt(op); });
    // Layer norm first: its centred, scaled half would pass for an RMSNorm of x - mean(x).
    forEach<AddOp>(body, [&](AddOp op) { return raiseLayerNorm(op); });
    forEach<MulOp>(body, [&](MulOp op) { return raiseRmsNorm(op); });
    forEach<TanhOp>(body, [&](TanhOp op) { return raiseGeluTanh(op); });
    forEach<SoftmaxOp>(body, [&](SoftmaxOp op) { return raiseCausalSoftmax(op); });
    forEach<MatmulOp>(body, [&](MatmulOp op) { return raiseAttention(op); });
    forEach<CrossEntropyOp>(body, [&](CrossEntropyOp op) { return unflattenCrossEntropy(op); });
  }

  /// Runs \p raise on every op of type Op in order (ops created meanwhile included).
  template <typename Op, typename F> void forEach(Block &body, F raise) {
    llvm::SmallVector<Op> ops;
    for (Op op : body.getOps<Op>())
      ops.push_back(op);
    for (Op op : ops)
      raise(op);
    // What a match replaced goes now, so the next pattern sees single uses where there are.
    eraseUnusedOps(body);
  }

  /// matmul(x, transpose(w) swapping the last two dimensions) -> matmul with transpose_rhs
  /// (and the same for the lhs).
  static bool foldTransposes(MatmulOp op) {
    bool changed = false;
    for (int side = 0; side < 2; ++side) {
      Value operand = side == 0 ? op.getLhs() : op.getRhs();
      bool flagged = side == 0 ? op.getTransposeLhs() : op.getTransposeRhs();
      auto transpose = operand.getDefiningOp<TransposeOp>();
      if (flagged || !transpose)
        continue;
      auto rank = llvm::cast<RankedTensorType>(operand.getType()).getRank();
      if (rank < 2 || transpose.getPermutation() != llvm::ArrayRef<int64_t>(swapLastTwo(rank)))
        continue;
      op->setOperand(side, transpose.getInput());
      if (side == 0)
        op.setTransposeLhs(true);
      else
        op.setTransposeRhs(true);
      changed = true;
    }
    return changed;
  }

  /// 1 / sqrt(y) -> rsqrt(y).
  static bool raiseRsqrt(DivOp op) {
    auto sqrt = op.getRhs().getDefiningOp<SqrtOp>();
    if (!sqrt || !single(sqrt.getResult()) || !isConstant(op.getLhs(), 1.0) ||
        op.getType() != sqrt.getType())
      return false;
    OpBuilder builder(op);
    op.replaceAllUsesWith(builder.create<RsqrtOp>(op.getLoc(), sqrt.getInput()).getResult());
    return true;
  }

  /// x * rsqrt(mean(x * x) + eps) * g (or x / sqrt(...) * g) -> rmsnorm(x, g, eps); the products
  /// in either order.
  static bool raiseRmsNorm(MulOp op) {
    Value x, gain;
    double epsilon = 0;
    auto normalized = [&](Value value) {
      return single(value) && commuted<MulOp>(value, [&](Value a, Value r) {
               auto rsqrt = r.getDefiningOp<RsqrtOp>();
               if (!rsqrt || !single(r))
                 return false;
               return commuted<AddOp>(rsqrt.getInput(), [&](Value mean, Value eps) {
                 std::optional<double> e = splatValue(eps);
                 Value squared = lastAxisMean(mean);
                 if (!e || !single(rsqrt.getInput()) || !single(mean) || !squared ||
                     !single(squared) || !isSquareOf(squared, a))
                   return false;
                 x = a;
                 epsilon = *e;
                 return true;
               });
             });
    };
    // The same divided by sqrt(mean(x * x) + eps).
    auto divided = [&](Value value) {
      auto div = value ? value.getDefiningOp<DivOp>() : nullptr;
      auto sqrt = div ? div.getRhs().getDefiningOp<SqrtOp>() : nullptr;
      if (!single(value) || !sqrt || !single(div.getRhs()))
        return false;
      return commuted<AddOp>(sqrt.getInput(), [&](Value mean, Value eps) {
        std::optional<double> e = splatValue(eps);
        Value squared = lastAxisMean(mean);
        if (!e || !single(sqrt.getInput()) || !single(mean) || !squared || !single(squared) ||
            !isSquareOf(squared, div.getLhs()))
          return false;
        x = div.getLhs();
        epsilon = *e;
        return true;
      });
    };
    auto either = [&](Value value) { return normalized(value) || divided(value); };
    if (!(either(op.getLhs()) && (gain = op.getRhs())) &&
        !(either(op.getRhs()) && (gain = op.getLhs())))
      return false;
    if (!isLastAxisVector(gain, x) || op.getType() != x.getType())
      return false;
    OpBuilder builder(op);
    op.replaceAllUsesWith(
        builder.create<RmsNormOp>(op.getLoc(), x, gain, builder.getF64FloatAttr(epsilon))
            .getResult());
    return true;
  }

  /// (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) * g + b -> layernorm(x, g, b, eps).
  static bool raiseLayerNorm(AddOp op) {
    Value x, gain, bias;
    double epsilon = 0;
    auto scaled = [&](Value value) {
      return single(value) && commuted<MulOp>(value, [&](Value quotient, Value g) {
               auto div = quotient.getDefiningOp<DivOp>();
               if (!div || !single(quotient))
                 return false;
               Value centered = div.getLhs();
               auto sub = centered.getDefiningOp<SubOp>();
               auto sqrt = div.getRhs().getDefiningOp<SqrtOp>();
               if (!sub || !sqrt || lastAxisMean(sub.getRhs()) != sub.getLhs() ||
                   !single(sub.getRhs()) || !single(div.getRhs()))
                 return false;
               return commuted<AddOp>(sqrt.getInput(), [&](Value variance, Value eps) {
                 std::optional<double> e = splatValue(eps);
                 Value squared = lastAxisMean(variance);
                 if (!e || !single(sqrt.getInput()) || !single(variance) || !squared ||
                     !single(squared) || !isSquareOf(squared, centered))
                   return false;
                 // The centered value feeds the square (twice) and the division.
                 if (std::distance(centered.use_begin(), centered.use_end()) != 3)
                   return false;
                 x = sub.getLhs();
                 gain = g;
                 epsilon = *e;
                 return true;
               });
             });
    };
    if (!(scaled(op.getLhs()) && (bias = op.getRhs())) &&
        !(scaled(op.getRhs()) && (bias = op.getLhs())))
      return false;
    if (!isLastAxisVector(gain, x) || !isLastAxisVector(bias, x) || op.getType() != x.getType())
      return false;
    OpBuilder builder(op);
    op.replaceAllUsesWith(
        builder.create<LayerNormOp>(op.getLoc(), x, gain, bias, builder.getF64FloatAttr(epsilon))
            .getResult());
    return true;
  }

  /// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) -> gelu tanh x, rooted at the tanh.
  static bool raiseGeluTanh(TanhOp tanh) {
    const double beta = std::sqrt(2.0 / M_PI), kappa = 0.044715;
    Value x;
    auto isCube = [&](Value value, Value of) {
      return single(value) && commuted<MulOp>(value, [&](Value a, Value b) {
               return a == of && isSquareOf(b, of) && single(b);
             });
    };
    bool inner =
        single(tanh.getInput()) && commuted<MulOp>(tanh.getInput(), [&](Value sum, Value c) {
          return isConstant(c, beta) && single(sum) &&
                 commuted<AddOp>(sum, [&](Value a, Value cubic) {
                   return single(cubic) && commuted<MulOp>(cubic, [&](Value cube, Value k) {
                            if (!isConstant(k, kappa) || !isCube(cube, a))
                              return false;
                            x = a;
                            return true;
                          });
                 });
        });
    if (!inner || !single(tanh.getResult()))
      return false;
    // 1 + tanh(...), then the product with x and 0.5 in any grouping.
    auto onePlus = llvm::dyn_cast<AddOp>(*tanh->user_begin());
    if (!onePlus || !(isConstant(onePlus.getLhs(), 1.0) || isConstant(onePlus.getRhs(), 1.0)) ||
        !single(onePlus.getResult()))
      return false;
    auto first = llvm::dyn_cast<MulOp>(*onePlus->user_begin());
    if (!first)
      return false;
    Value other = first.getLhs() == onePlus.getResult() ? first.getRhs() : first.getLhs();
    Operation *root = nullptr;
    auto isHalfX = [&](Value value) {
      return single(value) &&
             commuted<MulOp>(value, [&](Value a, Value h) { return a == x && isConstant(h, 0.5); });
    };
    if (isHalfX(other)) {
      root = first;
    } else if ((other == x || isConstant(other, 0.5)) && single(first.getResult())) {
      auto second = llvm::dyn_cast<MulOp>(*first->user_begin());
      Value last = second
                       ? (second.getLhs() == first.getResult() ? second.getRhs() : second.getLhs())
                       : Value();
      if (second &&
          ((other == x && isConstant(last, 0.5)) || (isConstant(other, 0.5) && last == x)))
        root = second;
    }
    if (!root || root->getResult(0).getType() != x.getType())
      return false;
    OpBuilder builder(root);
    auto gelu = builder.create<GeluOp>(
        root->getLoc(), GeluApproximationAttr::get(builder.getContext(), GeluApproximation::tanh),
        x);
    root->getResult(0).replaceAllUsesWith(gelu.getResult());
    return true;
  }

  /// Whether \p mask is a constant laid out causally for scores [..., T, S]: every element with
  /// j > i + (S - T) satisfies \p masked, every other \p kept, the same in every leading slice.
  template <typename Masked, typename Kept>
  static bool isCausal(Value mask, llvm::ArrayRef<int64_t> scores, Masked masked, Kept kept) {
    auto constant = mask.getDefiningOp<ConstantOp>();
    auto dense = constant ? llvm::dyn_cast<DenseFPElementsAttr>(constant.getValue()) : nullptr;
    if (!dense)
      return false;
    auto shape = llvm::cast<RankedTensorType>(mask.getType()).getShape();
    const int64_t rank = shape.size(), t = scores[scores.size() - 2], s = scores.back();
    if (rank < 2 || shape[rank - 2] != t || shape[rank - 1] != s || s < t)
      return false;
    int64_t e = 0;
    for (APFloat element : dense.getValues<APFloat>()) {
      const int64_t j = e % s, i = (e / s) % t;
      const double value = element.convertToDouble();
      if (j > i + (s - t) ? !masked(value) : !kept(value))
        return false;
      ++e;
    }
    return true;
  }

  /// softmax(s + causal mask) -> softmax causal s, the mask 0 or -inf (or below -1e30). Also the
  /// exact form of a masked fill with a finite fill f <= -1e4 (HF's -1e4, -1e9):
  /// softmax(s * keep + fill) with keep 1 or 0 and fill 0 or f, whose masked probabilities
  /// underflow to 0 in f32.
  static bool raiseCausalSoftmax(SoftmaxOp op) {
    auto add = op.getInput().getDefiningOp<AddOp>();
    if (op.getCausal() || !add || !single(add.getResult()))
      return false;
    auto shape = op.getType().getShape();
    auto zero = [](double v) { return v == 0; };
    Value scores;
    for (int side = 0; side < 2 && !scores; ++side) {
      Value term = side ? add.getRhs() : add.getLhs();
      Value mask = side ? add.getLhs() : add.getRhs();
      if (term.getType() == op.getType() &&
          isCausal(
              mask, shape, [](double v) { return v <= -1e30; }, zero)) {
        scores = term;
        continue;
      }
      if (!isCausal(
              mask, shape, [](double v) { return v <= -1e4; }, zero) ||
          !single(term))
        continue;
      commuted<MulOp>(term, [&](Value x, Value keep) {
        if (x.getType() != op.getType() ||
            !isCausal(keep, shape, zero, [](double v) { return v == 1; }))
          return false;
        scores = x;
        return true;
      });
    }
    if (!scores)
      return false;
    OpBuilder builder(op);
    op.replaceAllUsesWith(
        builder.create<SoftmaxOp>(op.getLoc(), scores, builder.getUnitAttr()).getResult());
    return true;
  }

  /// cross_entropy(reshape(logits [.., C] -> [N, C]), reshape(labels [..] -> [N])) ->
  /// cross_entropy(logits, labels): exporters flatten the rows first (logits.view(-1, V)); the
  /// mean or sum over the rows is the same, and the fused kernel reads the logits in place.
  static bool unflattenCrossEntropy(CrossEntropyOp op) {
    auto logits = op.getLogits().getDefiningOp<ReshapeOp>();
    auto labels = op.getLabels().getDefiningOp<ReshapeOp>();
    if (!logits || !labels || !single(op.getLogits()) || !single(op.getLabels()))
      return false;
    auto from = llvm::cast<RankedTensorType>(logits.getInput().getType()).getShape();
    auto labelShape = llvm::cast<RankedTensorType>(labels.getInput().getType()).getShape();
    auto to = op.getLogits().getType().getShape();
    if (from.empty() || from.back() != to.back() || from.drop_back() != labelShape)
      return false;
    OpBuilder builder(op);
    op.replaceAllUsesWith(builder
                              .create<CrossEntropyOp>(op.getLoc(), logits.getInput(),
                                                      labels.getInput(), op.getIgnoreIndexAttr(),
                                                      op.getReductionAttr())
                              .getResult());
    return true;
  }

  /// matmul(softmax(matmul(q, k^T) * c), v) -> attention(q, k, v, scale c).
  static bool raiseAttention(MatmulOp op) {
    auto softmax = op.getLhs().getDefiningOp<SoftmaxOp>();
    if (!softmax || op.getTransposeLhs() || op.getTransposeRhs() || op.getResultElement() ||
        !single(softmax.getResult()))
      return false;
    // The scale: a multiplication or division by a constant, or none.
    Value scores = softmax.getInput();
    double scale = 1.0;
    if (auto mul = scores.getDefiningOp<MulOp>()) {
      for (int side = 0; side < 2; ++side)
        if (std::optional<double> c = splatValue(side ? mul.getLhs() : mul.getRhs());
            c && single(scores) &&
            mul.getType() == (side ? mul.getRhs() : mul.getLhs()).getType()) {
          scale = *c;
          scores = side ? mul.getRhs() : mul.getLhs();
          break;
        }
    } else if (auto div = scores.getDefiningOp<DivOp>()) {
      std::optional<double> c = splatValue(div.getRhs());
      if (c && *c != 0 && single(scores) && div.getType() == div.getLhs().getType()) {
        scale = 1.0 / *c;
        scores = div.getLhs();
      }
    }
    auto product = scores.getDefiningOp<MatmulOp>();
    if (!product || !single(scores) || product.getTransposeLhs() || product.getResultElement())
      return false;
    Value q = product.getLhs(), v = op.getRhs();
    auto qType = llvm::cast<RankedTensorType>(q.getType());
    auto vType = llvm::cast<RankedTensorType>(v.getType());
    const int64_t rank = qType.getRank();
    if (rank < 3 || vType.getRank() != rank ||
        llvm::cast<RankedTensorType>(product.getRhs().getType()).getRank() != rank)
      return false;
    OpBuilder builder(op);
    // k [..., S, Dh]: the rhs itself under transpose_rhs; else the rhs transposed back (folded
    // into the transpose that made it, if one did).
    Value k = product.getRhs();
    if (!product.getTransposeRhs()) {
      llvm::SmallVector<int64_t> swap = swapLastTwo(rank), permutation = swap;
      Value source = k;
      if (auto transpose = k.getDefiningOp<TransposeOp>()) {
        for (int64_t d = 0; d < rank; ++d)
          permutation[d] = transpose.getPermutation()[swap[d]];
        source = transpose.getInput();
      }
      bool identity = true;
      for (int64_t d = 0; d < rank; ++d)
        identity &= permutation[d] == d;
      k = identity ? source
                   : builder
                         .create<TransposeOp>(op.getLoc(), source,
                                              builder.getDenseI64ArrayAttr(permutation))
                         .getResult();
    }
    auto kType = llvm::cast<RankedTensorType>(k.getType());
    // Equal leading dimensions, as graph.attention requires (no broadcasting).
    if (qType.getShape().drop_back(2) != kType.getShape().drop_back(2) ||
        qType.getShape().drop_back(2) != vType.getShape().drop_back(2) ||
        kType.getShape().back() != qType.getShape().back() ||
        kType.getDimSize(rank - 2) != vType.getDimSize(rank - 2) ||
        qType.getElementType() != kType.getElementType() ||
        qType.getElementType() != vType.getElementType()) {
      if (k.use_empty())
        k.getDefiningOp()->erase();
      return false;
    }
    auto attention = builder.create<AttentionOp>(
        op.getLoc(), q, k, v, softmax.getCausal() ? builder.getUnitAttr() : nullptr,
        builder.getF64FloatAttr(scale));
    op.replaceAllUsesWith(attention.getResult());
    return true;
  }
};

} // namespace
