//===- FusionGrouping.h - which ops of a function run as one kernel -*- C++ -*-===//
//
// The grouping graph-fuse applies, as plain C++ over a plain op graph (no MLIR), so that it can
// be unit-tested on hand-built graphs. The input is a function's ops in program order, each with
// a class (elementwise, data movement, reduction-like, matmul, ...), a role for the few ops the
// rules name (cast, add, tanh gelu, sum, ...), its operands (a result of an earlier op, or a
// value from outside the function) with their shapes, and its result shapes. The output gives
// every op a group and every group a kind; each group runs as one kernel (or, for the kinds
// `none` and `view`, as no kernel at all).
//
// The rules, applied in this order (an op joins at most one group; earlier rules win):
//   1. cross_entropy: a cross_entropy and the cross_entropy_grad of the same logits, with the
//      cast that produces the logits (when nothing else reads it) and the casts of the gradient.
//   2. matmul_epilogue: a matmul whose only reader is a bias add (a 1-D operand of the size of
//      the result's last dimension), then optionally a tanh gelu of the sum: cuBLASLt's BIAS and
//      GELU_BIAS epilogues. The pre-gelu sum may have other readers (GELU_AUX writes it out).
//      Without a gelu, a residual: when the product (or its biased sum) has one reader, an
//      add of a value of the same shape, cuBLASLt's C with beta = 1 (D = A B + bias + C).
//      Also a matmul whose only reader is a tanh gelu's gradient (bf16 or f16: the adapter gives
//      only those the role) taking the product as its incoming gradient, the gelu's input of the
//      product's shape with a last dimension that is a multiple of 8: cuBLASLt's DGELU epilogue
//      (the input read as its aux matrix).
//   3. bias_grad: a sum over every dimension but the last, of a value that one operand of a 2-D
//      matmul also reads (through reshapes, and widening casts on the sum's side), when the
//      matmul contracts that operand over its rows (cuBLASLt's BGRADA / BGRADB epilogues): the
//      sum, and its widening casts read by nothing else, join the matmul.
//   4. matmul_accumulate: an accumulate_grad that adds its f32 gradient unchanged (no loss-scale
//      division), when that gradient is the result of a matmul read by nothing else: the matmul
//      writes into the accumulator itself (cuBLASLt's D = A B + 1 * C with C == D), and the
//      gradient is never stored. A bias_grad group takes the accumulate_grad of its matmul the
//      same way and keeps its kind.
//      accumulate: every other accumulate_grad, with the elementwise ops (a cast, the sum of a
//      tied parameter's gradients) producing its gradient that nothing else reads.
//   5. optimizer: every optimizer update of the function, as one multi-tensor kernel.
//   6. reduction: a reduction-like op (norms, softmax, losses, sum/mean/max, embedding and their
//      gradients) with the elementwise ops producing its largest operands that nothing else
//      reads (recursively), then the elementwise ops consuming its results (recursively).
//      Then an accumulate group of rule 4 that adds a column sum's f32 result unchanged (a sum
//      over a leading run of axes, in a bias_grad or reduction group; a norm gradient's dgamma
//      or dbeta), read by nothing else, joins the sum's group: the sum's second stage adds
//      each column's total into the accumulator, and the gradient is never stored.
//   7. elementwise: elementwise ops fuse with elementwise producers into chains; then a
//      broadcast whose readers are all in one elementwise group joins it.
//   8. copy: data-movement ops (transpose, split, concat, slice, pad, broadcast) fuse with the
//      data-movement ops producing their operands, through reshapes: one gather kernel.
//   9. A reshape read by one kernel's group only joins it (the kernel reads the input in the
//      new shape).
//  10. Every other op is a group of its own: matmul, attention, copy, view (a reshape: no
//      kernel, it aliases its input), and none (get_param, constant, loss, grad_seed,
//      global_norm, lr_schedule, update_loss_scale, return, ...: no kernel).
//
// Members of elementwise work share one iteration space: an elementwise op joins a group only
// through an operand with as many elements as its result, so a value smaller than the group's
// space is always read from outside, broadcast. A value read outside its group is written out
// and listed among the group's outputs; a group may have several. A merge that would let a path
// leave a group and come back (through other groups, or the order edges of side effects on the
// training state) is refused, so the groups always form a DAG and each runs as one kernel. The
// result depends only on the graph: ops are visited in program order and groups are numbered by
// their first op.
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_PASSES_FUSIONGROUPING_H
#define AMPC_PASSES_FUSIONGROUPING_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ampc::graph {

/// What kind of kernel an op needs, as far as fusion is concerned.
enum class FusionOpClass {
  Elementwise,  ///< one output element from the same element of each operand (broadcasting)
  DataMovement, ///< reshape (free), transpose, broadcast, slice, pad, concat, split (copies)
  Reduction,    ///< norms, softmax, losses, sum/mean/max, embedding, and their gradients
  MatMul,
  Attention,  ///< attention and its gradient
  Accumulate, ///< accumulate_grad
  Optimizer,  ///< adamw, sgd
  Other,      ///< no kernel of its own or unknown to fusion: never fused
};

/// The few op kinds the rules look for by name.
enum class FusionRole {
  None,
  Cast,         ///< a cast that may change the value (a narrowing, float <-> int)
  WideningCast, ///< a cast that loses nothing (bf16/f16 -> f32)
  Add,
  TanhGelu,
  TanhGeluGrad, ///< operands (x, dy): the gradient of a tanh gelu
  Reshape,
  Broadcast,
  Sum,
  CrossEntropy,
  CrossEntropyGrad,
  NormGrad, ///< layernorm_grad, rmsnorm_grad: results 1 (dgamma) and 2 (dbeta) are column sums
};

using FusionShape = std::vector<int64_t>;

/// Elements in a tensor of this shape (1 for a scalar).
int64_t numElements(const FusionShape &shape);

/// A value: result `result` of op `op`, or with op == -1 the value numbered `result` among those
/// defined outside the function (block arguments).
struct FusionValue {
  int op = -1;
  int result = 0;
  bool operator==(const FusionValue &other) const {
    return op == other.op && result == other.result;
  }
  bool operator!=(const FusionValue &other) const { return !(*this == other); }
};

struct FusionOperand {
  FusionValue value;
  FusionShape shape;
};

/// One op of the function, in program order.
struct FusionOp {
  /// For messages: "graph.add".
  std::string name;
  FusionOpClass opClass = FusionOpClass::Other;
  FusionRole role = FusionRole::None;
  std::vector<FusionOperand> operands;
  std::vector<FusionShape> results;
  /// Earlier ops that must run before this one although it reads none of their results (both
  /// touch the same training state and one of them writes it).
  std::vector<int> orderAfter;
  /// MatMul: which operands are transposed (their last two dimensions swapped) before the
  /// product.
  bool transposeLhs = false;
  bool transposeRhs = false;
  /// Sum: the reduced dimensions, increasing.
  std::vector<int64_t> axes;
  /// Accumulate: adds its gradient as it is (f32, not divided by a loss scale), which a matmul
  /// producing the gradient can do itself with beta = 1.
  bool addsUnchanged = false;
  /// Accumulate: divides an f32 gradient by the loss scale before adding it (and raises the
  /// non-finite flag), which a column sum's second stage can do but a matmul cannot.
  bool unscalesF32 = false;
};

/// A function's ops in program order: operands name results of earlier ops only.
struct FusionGraph {
  std::vector<FusionOp> ops;

  /// Appends `op` and returns its index.
  int add(FusionOp op);
  /// An operand reading result `result` of op `op`, with that result's shape.
  FusionOperand operand(int op, int result = 0) const;
};

/// What a group runs as.
enum class FusionKind {
  None,             ///< no kernel (reads a parameter, marks the loss, returns, ...)
  View,             ///< a reshape: no kernel, its result aliases its input
  Elementwise,      ///< a loop over one iteration space
  Copy,             ///< a data-movement kernel
  Reduction,        ///< a reduction-like op with its elementwise producers and consumers
  CrossEntropy,     ///< the fused classifier: loss, its gradient and the casts around them
  MatMul,           ///< a cuBLASLt matmul
  MatMulEpilogue,   ///< a cuBLASLt matmul with a bias (and gelu, or a residual C) or DGELU
  BiasGrad,         ///< a cuBLASLt matmul whose epilogue sums an operand into a bias gradient
  Attention,        ///< a fused attention kernel
  Accumulate,       ///< a gradient added into its accumulator
  Optimizer,        ///< every optimizer update of the step
  MatMulAccumulate, ///< a cuBLASLt matmul adding its product into an accumulator (beta = 1)
};

/// "none", "view", "elementwise", "copy", "reduction", "cross_entropy", "matmul",
/// "matmul_epilogue", "bias_grad", "attention", "accumulate", "optimizer", "matmul_accumulate".
const char *fusionKindName(FusionKind kind);

struct FusionGroup {
  FusionKind kind = FusionKind::None;
  /// The op the kernel is built around (the matmul, the reduction, the accumulate_grad, the
  /// first optimizer update), or the group's first op.
  int anchor = 0;
  /// Members, in program order.
  std::vector<int> ops;
  /// Values of the group read outside it (written out by the kernel), in program order.
  std::vector<FusionValue> outputs;
};

struct FusionPlan {
  /// The group of every op.
  std::vector<int> groupOf;
  /// Numbered by their first op in program order.
  std::vector<FusionGroup> groups;
};

/// Groups the ops of `graph` by the rules above.
FusionPlan planFusion(const FusionGraph &graph);

/// The order the groups of `plan` run in: every group after the groups whose values it reads and
/// after those its order edges point back to; among the groups ready to run, the lowest-numbered
/// first, so the order is the numbering wherever the numbering is itself a valid order (a group
/// whose members span the program, such as a bias gradient's sum and matmul, may have to wait for
/// a later-numbered group it reads). Empty if the groups form a cycle (checkFusionPlan says where).
std::vector<int> scheduleFusionGroups(const FusionGraph &graph, const FusionPlan &plan);

/// Checks that `plan` is a valid grouping of `graph`: every op in exactly one group, groups
/// numbered by their first op, outputs exactly the values read outside their group, and no cycle
/// between groups (each can run as one kernel once the groups it reads have run). Returns a
/// description of the first problem, or nullopt.
std::optional<std::string> checkFusionPlan(const FusionGraph &graph, const FusionPlan &plan);

} // namespace ampc::graph

#endif // AMPC_PASSES_FUSIONGROUPING_H
