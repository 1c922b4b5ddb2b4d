//===- GraphChunkClassifier.cpp - the output head and its loss in row chunks ----===//
//
// A language model's last matmul (hidden states times the vocabulary, often the tied embedding)
// feeds cross-entropy, and the training step keeps its logits, rows x vocabulary, whole: for
// GPT-124M at 16 x 1024 tokens that is 16384 x 50304 values, 1.6 GB in bf16, the largest value
// of the step. Its gradient needs nothing else of the step, so the rows can be handled a chunk at
// a time, each chunk's loss, logits gradient and matmul gradients computed at once and its
// logits dropped before the next chunk's exist. This pass rewrites the training step that way:
//
//   per chunk i of c rows:  l_i = h_i W^T;  loss_i = cross_entropy(l_i, t_i)
//                           g_i = cross_entropy_grad(l_i, t_i, seed / k)
//                           dh_i = g_i W;   dW += g_i^T h_i
//   loss = (loss_0 + ... + loss_{k-1}) / k;  dh = concat(dh_i)
//
// (k equal chunks; a mean over equal chunks is the mean of their means). The backward pass
// derived for the whole matmul is replaced; the gradients are built by the same rules
// (GradientRules.h). The mean is exact only when no row is ignored: the pass rewrites a mean
// loss only when its labels are a model input, whose values the runtime checks to lie in
// [0, classes), and its ignore_index is outside that range; a sum loss always.
//
//===--------------------------------------------------------------------------===//

#include "passes/GradientRules.h"
#include "passes/Passes.h"
#include "passes/RematAdapter.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"

namespace ampc::graph {
#define GEN_PASS_DEF_GRAPHCHUNKCLASSIFIER
#include "passes/Passes.h.inc"
} // namespace ampc::graph

using namespace mlir;
using namespace ampc::graph;

namespace {

RankedTensorType typeOf(Value value) { return llvm::cast<RankedTensorType>(value.getType()); }

int64_t elementCount(Value value) {
  int64_t count = 1;
  for (int64_t size : typeOf(value).getShape())
    count *= size;
  return count;
}

/// A classifier the pass can rewrite: the matmul, its loss and the backward derived from them.
struct Classifier {
  MatmulOp matmul;
  CrossEntropyOp loss;
  CrossEntropyGradOp grad;
  GradSeedOp seed;
  /// The gradients of the matmul's operands in the derived backward pass (null when the
  /// operand gets none) and every op computing them from `grad`.
  Value hiddenGrad, weightGrad;
  llvm::SmallVector<Operation *> backward;
};

/// The value \p value reshaped from, through any reshapes.
Value throughReshapes(Value value) {
  while (auto reshape = value.getDefiningOp<ReshapeOp>())
    value = reshape.getInput();
  return value;
}

/// \p loss as a Classifier, or why not (empty: not a classifier at all, nothing to say).
std::optional<Classifier> match(CrossEntropyOp loss, std::string &why) {
  Classifier c;
  c.loss = loss;
  c.matmul = loss.getLogits().getDefiningOp<MatmulOp>();
  if (!c.matmul)
    return std::nullopt;
  Value hidden = c.matmul.getLhs(), weight = c.matmul.getRhs();
  if (c.matmul.getTransposeLhs() || typeOf(weight).getRank() != 2 || typeOf(hidden).getRank() < 2 ||
      c.matmul.getResultElementAttr()) {
    why = "the logits' matmul is not rows x a 2-D weight";
    return std::nullopt;
  }
  for (Operation *user : loss.getLogits().getUsers()) {
    if (user == loss.getOperation())
      continue;
    auto grad = llvm::dyn_cast<CrossEntropyGradOp>(user);
    if (!grad || c.grad || grad.getLabels() != loss.getLabels() ||
        grad.getIgnoreIndex() != loss.getIgnoreIndex() ||
        grad.getReduction() != loss.getReduction()) {
      why = "the logits are read by more than the loss and its gradient";
      return std::nullopt;
    }
    c.grad = grad;
  }
  if (!c.grad) {
    why = "the loss has no gradient (run after graph-build-training)";
    return std::nullopt;
  }
  c.seed = c.grad.getGrad().getDefiningOp<GradSeedOp>();
  if (!c.seed || c.seed.getScale()) {
    why = "the loss gradient does not start from graph.grad_seed";
    return std::nullopt;
  }
  const int64_t classes = typeOf(loss.getLogits()).getShape().back();
  const int64_t ignore = static_cast<int64_t>(loss.getIgnoreIndex());
  if (loss.getReduction() == LossReduction::mean &&
      (!throughReshapes(loss.getLabels()).getDefiningOp<GetInputOp>() ||
       (ignore >= 0 && ignore < classes))) {
    why = "a mean loss whose labels may hold ignore_index (they are not a model input, or "
          "ignore_index is a class)";
    return std::nullopt;
  }
  // The derived backward: reshapes of the logits gradient ending in the two matmuls that give
  // the operands' gradients.
  llvm::SmallVector<Value> work = {c.grad.getResult()};
  while (!work.empty()) {
    Value value = work.pop_back_val();
    for (Operation *user : value.getUsers()) {
      c.backward.push_back(user);
      if (auto reshape = llvm::dyn_cast<ReshapeOp>(user)) {
        work.push_back(reshape.getResult());
        continue;
      }
      // A matmul of the gradient with the weight gives the hidden states' gradient, one with
      // the hidden states the weight's.
      auto product = llvm::dyn_cast<MatmulOp>(user);
      Value other;
      if (product)
        other = throughReshapes(product.getLhs() == value ? product.getRhs() : product.getLhs());
      Value *slot = nullptr;
      if (product && other == weight && product.getType() == hidden.getType())
        slot = &c.hiddenGrad;
      else if (product && other == hidden && product.getType() == weight.getType())
        slot = &c.weightGrad;
      if (!slot || *slot) {
        why = "the logits gradient is read by something other than the matmul's gradients";
        return std::nullopt;
      }
      *slot = product.getResult();
    }
  }
  return c;
}

/// The rows of a [..., n] tensor as one dimension: [rows, n] (or [rows] for labels).
Value flatten(OpBuilder &b, Location loc, Value value, bool keepLast) {
  RankedTensorType type = typeOf(value);
  int64_t rows = elementCount(value) / (keepLast ? type.getShape().back() : 1);
  llvm::SmallVector<int64_t> shape = {rows};
  if (keepLast)
    shape.push_back(type.getShape().back());
  if (llvm::ArrayRef<int64_t>(shape) == type.getShape())
    return value;
  return b.create<ReshapeOp>(loc, RankedTensorType::get(shape, type.getElementType()), value);
}

/// Rows [begin, begin + count) of a 1-D or 2-D tensor.
Value rows(OpBuilder &b, Location loc, Value value, int64_t begin, int64_t count) {
  RankedTensorType type = typeOf(value);
  llvm::SmallVector<int64_t> starts(type.getRank(), 0), sizes(type.getShape());
  starts[0] = begin;
  sizes[0] = count;
  return b.create<SliceOp>(loc, value, b.getDenseI64ArrayAttr(starts),
                           b.getDenseI64ArrayAttr(sizes));
}

/// Erases the op computing \p value when nothing reads it, and the reshapes and transposes it
/// read that nothing else does.
void eraseUnused(Value value) {
  Operation *op = value ? value.getDefiningOp() : nullptr;
  if (!op || !op->use_empty())
    return;
  llvm::SmallVector<Value> inputs(op->getOperands());
  op->erase();
  for (Value input : inputs)
    if (input.getDefiningOp<ReshapeOp>() || input.getDefiningOp<TransposeOp>())
      eraseUnused(input);
}

/// Rewrites \p c into \p chunks chunks of rows.
void rewrite(Classifier &c, int64_t chunks) {
  OpBuilder b(c.matmul);
  GradientBuilder rules(b);
  // The seed starts the chunks' backward, so it comes first (it reads nothing).
  c.seed->moveBefore(c.matmul);
  Location matmulLoc = c.matmul.getLoc(), lossLoc = c.loss.getLoc(), gradLoc = c.grad.getLoc();
  Value hidden = flatten(b, matmulLoc, c.matmul.getLhs(), true);
  Value labels = flatten(b, lossLoc, c.loss.getLabels(), false);
  const int64_t total = typeOf(labels).getShape()[0], size = total / chunks;
  const bool mean = c.loss.getReduction() == LossReduction::mean;
  Type f32 = b.getF32Type();
  Value seed = c.seed.getResult();
  if (mean) // Each chunk's mean is over size rows, not total.
    seed = b.create<MulOp>(gradLoc, seed, rules.scalar(gradLoc, f32, 1.0 / double(chunks)));
  // When the weight's gradient only reaches its accumulator (through the adds that sum the
  // gradients of a weight read twice, as a tied embedding is), each chunk adds its part there
  // itself: no f32 sum of the parts lives across the chunks.
  AccumulateGradOp accumulator;
  AddOp firstAdd;
  if (c.weightGrad && c.weightGrad.hasOneUse()) {
    Value sum = c.weightGrad;
    while (sum.hasOneUse()) {
      Operation *user = *sum.getUsers().begin();
      if ((accumulator = llvm::dyn_cast<AccumulateGradOp>(user)))
        break;
      auto add = llvm::dyn_cast<AddOp>(user);
      if (!add || add.getLhs().getType() != add.getRhs().getType())
        break;
      if (!firstAdd)
        firstAdd = add;
      sum = add.getResult();
    }
  }
  Value lossSum, weightGrad;
  llvm::SmallVector<Value> hiddenGrads;
  for (int64_t i = 0; i < chunks; ++i) {
    Value h = rows(b, matmulLoc, hidden, i * size, size);
    Value t = rows(b, lossLoc, labels, i * size, size);
    auto logits =
        b.create<MatmulOp>(matmulLoc, h, c.matmul.getRhs(), c.matmul.getTransposeLhsAttr(),
                           c.matmul.getTransposeRhsAttr(), TypeAttr());
    auto loss = b.create<CrossEntropyOp>(lossLoc, logits.getResult(), t,
                                         c.loss.getIgnoreIndexAttr(), c.loss.getReductionAttr());
    lossSum = lossSum ? rules.add(lossLoc, lossSum, loss.getResult()) : loss.getResult();
    auto logitsGrad = rules.operandGradients(loss, {seed});
    assert(succeeded(logitsGrad) && (*logitsGrad)[0] && "cross_entropy has a gradient rule");
    auto grads = rules.operandGradients(logits, {(*logitsGrad)[0]});
    assert(succeeded(grads) && "matmul has a gradient rule");
    if (c.hiddenGrad)
      hiddenGrads.push_back((*grads)[0]);
    else
      eraseUnused((*grads)[0]); // The rules give both operands' gradients; one is not wanted.
    if (accumulator)
      b.create<AccumulateGradOp>(accumulator.getLoc(), (*grads)[1],
                                 accumulator.getAccumulatorAttr(), accumulator.getUnscaleAttr());
    else if (c.weightGrad)
      weightGrad = weightGrad ? rules.add(gradLoc, weightGrad, (*grads)[1]) : (*grads)[1];
    else
      eraseUnused((*grads)[1]);
  }
  Value loss =
      mean ? b.create<MulOp>(lossLoc, lossSum, rules.scalar(lossLoc, f32, 1.0 / double(chunks)))
                 .getResult()
           : lossSum;
  c.loss.getResult().replaceAllUsesWith(loss);
  if (c.hiddenGrad) {
    Value joined = b.create<ConcatOp>(gradLoc, hiddenGrads, b.getI64IntegerAttr(0));
    if (joined.getType() != c.hiddenGrad.getType())
      joined = b.create<ReshapeOp>(gradLoc, c.hiddenGrad.getType(), joined);
    c.hiddenGrad.replaceAllUsesWith(joined);
  }
  if (accumulator && firstAdd) {
    // The chunks accumulated their part: the sum goes on without it.
    Value rest = firstAdd.getLhs() == c.weightGrad ? firstAdd.getRhs() : firstAdd.getLhs();
    firstAdd.getResult().replaceAllUsesWith(rest);
    firstAdd->erase();
  } else if (accumulator) {
    accumulator->erase();
  } else if (c.weightGrad) {
    c.weightGrad.replaceAllUsesWith(weightGrad);
  }
  // The old backward, gradient, loss and matmul are unused now: erase them, users first, and
  // what only they read (the reshapes the derived gradients made of the hidden states).
  llvm::SetVector<Operation *> dead;
  for (Operation *op : llvm::reverse(c.backward))
    dead.insert(op);
  dead.insert(c.grad);
  dead.insert(c.loss);
  dead.insert(c.matmul);
  // One unused op at a time leaves the set and is erased, so none is looked at once erased (a
  // reshape read by an erased op may be in the set already); ops still in use stay.
  for (auto unused = llvm::find_if(dead, [](Operation *op) { return op->use_empty(); });
       unused != dead.end();
       unused = llvm::find_if(dead, [](Operation *op) { return op->use_empty(); })) {
    Operation *op = *unused;
    dead.remove(op);
    for (Value operand : op->getOperands())
      if (auto reshape = operand.getDefiningOp<ReshapeOp>())
        dead.insert(reshape);
    op->erase();
  }
}

struct GraphChunkClassifierPass
    : ampc::graph::impl::GraphChunkClassifierBase<GraphChunkClassifierPass> {
  using Base::Base;

  void runOnOperation() override {
    ModelOp model = getOperation();
    std::optional<ByteSize> limit = parseByteSize(chunkBytes);
    if (!limit || limit->percent) {
      model.emitError("graph-chunk-classifier: cannot read the chunk size '")
          << chunkBytes.getValue() << "' (write bytes, 256MiB or 1GB; 0 keeps logits whole)";
      return signalPassFailure();
    }
    const int64_t limitBytes = limit->resolve(0);
    if (limitBytes == 0)
      return;
    func::FuncOp micro = model.getEntryFunction();
    if (!micro || micro.getSymName() != "micro_step")
      return; // A forward-only model keeps its logits only until the loss: nothing to gain.
    llvm::SmallVector<CrossEntropyOp> losses(micro.getBody().front().getOps<CrossEntropyOp>());
    for (CrossEntropyOp loss : losses) {
      std::string why;
      std::optional<Classifier> found = match(loss, why);
      // Bytes of the logits as the step stores them at most: f32 before precision assignment.
      const int64_t rowsTotal = elementCount(loss.getLabels());
      const int64_t rowBytes = typeOf(loss.getLogits()).getShape().back() * 4;
      if (rowsTotal * rowBytes <= limitBytes)
        continue;
      if (!found) {
        if (!why.empty())
          loss.emitRemark("graph-chunk-classifier: the logits stay whole: ") << why;
        continue;
      }
      // The fewest equal chunks whose logits fit the limit (one row a chunk at worst).
      int64_t chunks = 2;
      while (chunks < rowsTotal &&
             (rowsTotal % chunks != 0 || (rowsTotal / chunks) * rowBytes > limitBytes))
        ++chunks;
      rewrite(*found, chunks);
    }
  }
};

} // namespace
