//===- GraphPackQkvAttention.cpp - attention reads q, k, v where they were written --===//
//
// A transformer block computes q, k and v with one projection, [..., T, 3 H Dh], and hands
// graph.attention head-major slices [..., H, T, Dh]: split, reshape to [..., T, H, Dh],
// transpose. The result goes back the same way to the output projection. On a device each of
// those transposes is a copy kernel and a stored tensor. This pass replaces the whole pattern by
// one graph.qkv_attention, which reads the packed projection in place and writes the result
// token-major; autodiff then gives it one graph.qkv_attention_grad writing the packed gradient,
// so the backward has no layout copies either (no transposes, no concatenation).
//
// A match needs: one graph.split of the last axis into three equal parts, used in order as q,
// k and v; each part reshaped to [..., T, H, Dh] with the same H and Dh and transposed by the
// permutation that swaps T and H (and possibly reshaped to [B H, T, Dh], the heads merged into
// the batch as exports of bmm-based attention have it); and those values used by nothing else. A result that
// something other than transpose + reshape reads is rebuilt for it from the packed result.
//
//===---------------------------------------------------------------------------===//

#include "passes/EraseUnused.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace ampc::graph {
#define GEN_PASS_DEF_GRAPHPACKQKVATTENTION
#include "passes/Passes.h.inc"
} // namespace ampc::graph

using namespace mlir;
using namespace ampc::graph;

namespace {

llvm::ArrayRef<int64_t> shapeOf(Value value) {
  return llvm::cast<RankedTensorType>(value.getType()).getShape();
}

/// The permutation of a rank-\p rank tensor that swaps its axes rank - 3 and rank - 2
/// ([..., T, H, Dh] <-> [..., H, T, Dh]).
llvm::SmallVector<int64_t> headSwap(int64_t rank) {
  llvm::SmallVector<int64_t> permutation;
  for (int64_t axis = 0; axis < rank; ++axis)
    permutation.push_back(axis);
  std::swap(permutation[rank - 3], permutation[rank - 2]);
  return permutation;
}

/// One of q, k, v: the split part it came from and the head split [H, Dh], when \p value is
/// transpose(reshape(part of a split)) of the expected form and nothing else reads the chain.
struct Slice {
  SplitOp split;
  unsigned part;
  int64_t heads, headDim;
};

std::optional<Slice> sliceOf(Value value) {
  auto transpose = value.getDefiningOp<TransposeOp>();
  if (!transpose || !value.hasOneUse() || shapeOf(value).size() < 3 ||
      transpose.getPermutation() != llvm::ArrayRef(headSwap(shapeOf(value).size())))
    return std::nullopt;
  auto reshape = transpose.getInput().getDefiningOp<ReshapeOp>();
  if (!reshape || !transpose.getInput().hasOneUse())
    return std::nullopt;
  auto part = llvm::dyn_cast<OpResult>(reshape.getInput());
  auto split = part ? llvm::dyn_cast<SplitOp>(part.getOwner()) : nullptr;
  if (!split || !part.hasOneUse())
    return std::nullopt;
  // [..., T, H Dh] -> [..., T, H, Dh]
  llvm::ArrayRef<int64_t> flat = shapeOf(part), heads = shapeOf(reshape.getResult());
  if (heads.size() != flat.size() + 1 || !std::equal(flat.begin(), flat.end() - 1, heads.begin()) ||
      heads[heads.size() - 2] * heads.back() != flat.back())
    return std::nullopt;
  return Slice{split, part.getResultNumber(), heads[heads.size() - 2], heads.back()};
}

/// The head-major [..., H, T, Dh] value that \p value, an attention operand, is: the value
/// itself, or what a reshape merging its leading dimensions into one ([B H, T, Dh], as exporters
/// that batch the heads of a bmm write it) reads, when that reshape has no other reader.
Value headMajorOf(Value value) {
  auto merge = value.getDefiningOp<ReshapeOp>();
  if (!merge || !value.hasOneUse())
    return value;
  llvm::ArrayRef<int64_t> from = shapeOf(merge.getInput()), to = shapeOf(value);
  if (to.size() != 3 || from.size() < 4 || from.take_back(2) != to.take_back(2))
    return value;
  return merge.getInput();
}

/// Erases \p op if nothing reads it any more.
void eraseIfUnused(Operation *op) {
  if (op->use_empty())
    op->erase();
}

/// Replaces \p attention by a qkv_attention when its q, k, v are the head-major slices of one
/// packed projection; returns whether it did.
bool pack(AttentionOp attention) {
  if (attention.getWithLse())
    return false;
  const Value query = headMajorOf(attention.getQuery());
  const bool merged = query != attention.getQuery();
  std::optional<Slice> q = sliceOf(query), k = sliceOf(headMajorOf(attention.getKey())),
                       v = sliceOf(headMajorOf(attention.getValue()));
  if (!q || !k || !v || q->split != k->split || q->split != v->split || q->part != 0 ||
      k->part != 1 || v->part != 2 || k->heads != q->heads || v->heads != q->heads ||
      k->headDim != q->headDim || v->headDim != q->headDim)
    return false;
  SplitOp split = q->split;
  Value qkv = split.getInput();
  const int64_t rank = static_cast<int64_t>(shapeOf(qkv).size());
  if (split.getNumResults() != 3 || split.getAxis() != rank - 1)
    return false;

  OpBuilder builder(attention);
  auto packed = builder.create<QkvAttentionOp>(
      attention.getLoc(), qkv, builder.getI64IntegerAttr(q->heads), attention.getCausalAttr(),
      attention.getScaleAttr(), UnitAttr());
  // The usual reader: (a reshape back to [..., H, T, Dh] when the heads were merged,) a
  // transpose back to [..., T, H, Dh], a reshape to [..., T, H Dh]: the packed result itself.
  Value result = attention.getResult();
  const Type headMajorType = query.getType();
  auto replaceTokenMajorReaders = [&](Value headMajor) {
    for (Operation *user : llvm::make_early_inc_range(headMajor.getUsers())) {
      auto transpose = llvm::dyn_cast<TransposeOp>(user);
      if (!transpose || transpose.getPermutation() != llvm::ArrayRef(headSwap(rank + 1)))
        continue;
      for (Operation *reader : llvm::make_early_inc_range(transpose.getResult().getUsers()))
        if (auto reshape = llvm::dyn_cast<ReshapeOp>(reader);
            reshape && reshape.getType() == packed.getResult().getType()) {
          reshape.getResult().replaceAllUsesWith(packed.getResult());
          reshape.erase();
        }
      eraseIfUnused(transpose);
    }
  };
  if (!merged)
    replaceTokenMajorReaders(result);
  else
    for (Operation *user : llvm::make_early_inc_range(result.getUsers()))
      if (auto split = llvm::dyn_cast<ReshapeOp>(user); split && split.getType() == headMajorType) {
        replaceTokenMajorReaders(split.getResult());
        eraseIfUnused(split);
      }
  // Anyone else gets the result's layout rebuilt from it: [..., H, T, Dh] ([B H, T, Dh]).
  if (!result.use_empty()) {
    llvm::SmallVector<int64_t> tokenMajor(shapeOf(packed.getResult()));
    tokenMajor.back() = q->headDim;
    tokenMajor.insert(tokenMajor.end() - 1, q->heads);
    auto type = RankedTensorType::get(tokenMajor, getElementTypeOrSelf(result.getType()));
    Value unpacked = builder.create<ReshapeOp>(attention.getLoc(), type, packed.getResult());
    Value headMajor = builder.create<TransposeOp>(attention.getLoc(), unpacked,
                                                  builder.getDenseI64ArrayAttr(headSwap(rank + 1)));
    if (merged)
      headMajor = builder.create<ReshapeOp>(attention.getLoc(), result.getType(), headMajor);
    result.replaceAllUsesWith(headMajor);
  }
  attention.erase();
  return true;
}

struct GraphPackQkvAttentionPass
    : ampc::graph::impl::GraphPackQkvAttentionBase<GraphPackQkvAttentionPass> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp entry = getOperation().getEntryFunction();
    if (!entry)
      return;
    Block &body = entry.getBody().front();
    llvm::SmallVector<AttentionOp> candidates(body.getOps<AttentionOp>());
    bool changed = false;
    for (AttentionOp attention : candidates)
      changed |= pack(attention);
    if (changed)
      eraseUnusedOps(body); // the swallowed splits, reshapes and transposes
  }
};

} // namespace
