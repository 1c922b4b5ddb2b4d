//===- FusionGroupingRules.cpp - the rules that merge ops into kernels ----===//
//
// The rules of FusionGrouping.h, one planner method each, in the order Planner::run applies
// them, and the two walks they share (absorbProducers, absorbConsumers). Every merge goes
// through Planner::merge, which refuses one that would put the groups on a cycle.
//
//===--------------------------------------------------------------------------===//

#include "passes/FusionGroupingImpl.h"

#include <algorithm>

namespace ampc::graph::fusiongrouping {

namespace {

bool isCast(const FusionOp &op) {
  return op.role == FusionRole::Cast || op.role == FusionRole::WideningCast;
}

/// The iteration space of an elementwise op: the elements of its (largest) result.
int64_t resultElements(const FusionOp &op) {
  int64_t count = 1;
  for (const FusionShape &shape : op.results)
    count = std::max(count, numElements(shape));
  return count;
}

} // namespace

void Planner::groupCrossEntropy() {
  auto isLoss = [&](int op) {
    FusionRole role = graph.ops[op].role;
    return role == FusionRole::CrossEntropy || role == FusionRole::CrossEntropyGrad;
  };
  for (int op = 0; op < numOps; ++op) {
    if (!isLoss(op) || members[find(op)].size() != 1 || graph.ops[op].operands.empty())
      continue;
    claim(op, FusionKind::CrossEntropy);
    // The loss and its gradient read the same logits: one kernel computes the softmax once.
    FusionValue logits = graph.ops[op].operands[0].value;
    for (int other = op + 1; other < numOps; ++other)
      if (isLoss(other) && members[find(other)].size() == 1 && !graph.ops[other].operands.empty() &&
          graph.ops[other].operands[0].value == logits)
        merge(op, other);
    // The cast producing the logits (reduced to f32), read by nothing else.
    int root = find(op);
    if (logits.op >= 0 && isCast(graph.ops[logits.op]) && isFreeElementwise(logits.op) &&
        readersWithin(logits.op, root))
      merge(op, logits.op);
    // The casts of the gradient (f32 back to the reduced type).
    std::vector<int> sorted = members[find(op)];
    std::sort(sorted.begin(), sorted.end());
    for (int member : sorted) {
      if (graph.ops[member].role != FusionRole::CrossEntropyGrad || readers[member].empty())
        continue;
      for (int user : readers[member][0])
        if (isCast(graph.ops[user]) && isFreeElementwise(user))
          merge(op, user);
    }
  }
}

void Planner::groupMatMulEpilogues() {
  for (int op = 0; op < numOps; ++op) {
    const FusionOp &matmul = graph.ops[op];
    if (matmul.opClass != FusionOpClass::MatMul || members[find(op)].size() != 1 ||
        matmul.results.size() != 1 || readers[op][0].size() != 1)
      continue;
    const FusionShape &shape = matmul.results[0];
    if (shape.size() < 2)
      continue;
    FusionValue product{op, 0};
    // Or the only reader is a tanh gelu's gradient taking the product as its incoming gradient:
    // cuBLASLt's DGELU multiplies the product by gelu'(x), x read from an aux matrix of the
    // product's shape whose row stride must be a multiple of 8.
    int user = readers[op][0][0];
    const FusionOp &userOp = graph.ops[user];
    if (userOp.role == FusionRole::TanhGeluGrad) {
      if (userOp.operands.size() == 2 && userOp.operands[1].value == product &&
          userOp.operands[0].value != product && userOp.operands[0].shape == shape &&
          shape.back() % 8 == 0 && isFreeElementwise(user) && merge(op, user))
        claim(op, FusionKind::MatMulEpilogue);
      continue;
    }
    // The only reader adds a bias: a 1-D operand as long as the last dimension, broadcast over
    // the rows. cuBLASLt cannot write the product before the bias, hence the only reader.
    int tail = op; // the op whose value the epilogue has produced so far
    if (userOp.role == FusionRole::Add && userOp.operands.size() == 2 &&
        userOp.results.size() == 1 && userOp.results[0] == shape && isFreeElementwise(user)) {
      int productSide = userOp.operands[0].value == product ? 0 : 1;
      const FusionOperand &bias = userOp.operands[1 - productSide];
      if (userOp.operands[productSide].value == product && bias.value != product &&
          bias.shape.size() == 1 && bias.shape[0] == shape.back() && merge(op, user)) {
        claim(op, FusionKind::MatMulEpilogue);
        tail = user;
        // Then a tanh gelu of the sum (cuBLASLt's GELU is the tanh approximation); other
        // readers of the sum are served by writing it out as well (GELU_AUX).
        bool gelu = false;
        for (int reader : readers[user][0])
          if (graph.ops[reader].role == FusionRole::TanhGelu && isFreeElementwise(reader) &&
              merge(op, reader)) {
            gelu = true;
            break;
          }
        if (gelu)
          continue;
      }
    }
    // Then a residual: the only reader of the product (or of its biased sum) adds a value of
    // the same shape, which cuBLASLt reads as C with beta = 1 (D = A B + bias + C): the sum
    // before the residual is never stored.
    if (readers[tail][0].size() != 1)
      continue;
    const int residual = readers[tail][0][0];
    const FusionOp &residualOp = graph.ops[residual];
    const FusionValue sum{tail, 0};
    if (residualOp.role != FusionRole::Add || residualOp.operands.size() != 2 ||
        residualOp.results.size() != 1 || residualOp.results[0] != shape ||
        !isFreeElementwise(residual))
      continue;
    const int sumSide = residualOp.operands[0].value == sum ? 0 : 1;
    const FusionOperand &addend = residualOp.operands[1 - sumSide];
    if (residualOp.operands[sumSide].value != sum || addend.value == sum || addend.shape != shape)
      continue;
    if (merge(op, residual))
      claim(op, FusionKind::MatMulEpilogue);
  }
}

void Planner::groupBiasGradients() {
  for (int op = 0; op < numOps; ++op) {
    const FusionOp &sum = graph.ops[op];
    if (sum.role != FusionRole::Sum || sum.operands.size() != 1 || members[find(op)].size() != 1)
      continue;
    // A sum over the rows: every dimension but the last.
    const FusionShape &input = sum.operands[0].shape;
    if (input.size() < 2 || sum.axes.size() != input.size() - 1)
      continue;
    bool overRows = true;
    for (size_t i = 0; i < sum.axes.size(); ++i)
      overRows &= sum.axes[i] == static_cast<int64_t>(i);
    if (!overRows)
      continue;
    int64_t columns = input.back();
    int64_t rows = numElements(input) / std::max<int64_t>(columns, 1);

    // The values holding the same numbers as the sum's input: back through widening casts.
    std::vector<FusionValue> chain = {sum.operands[0].value};
    while (chain.back().op >= 0 && graph.ops[chain.back().op].role == FusionRole::WideningCast)
      chain.push_back(graph.ops[chain.back().op].operands[0].value);

    // A 2-D matmul reading one of them (through reshapes) as the operand it contracts over
    // its rows: the lhs when transposed, the rhs when not.
    int matmul = -1, reached = -1;
    for (size_t c = 0; c < chain.size() && matmul < 0; ++c) {
      if (chain[c].op < 0)
        break;
      std::vector<FusionValue> views = {chain[c]};
      for (size_t v = 0; v < views.size() && matmul < 0; ++v) {
        for (int user : readers[views[v].op][views[v].result]) {
          const FusionOp &reader = graph.ops[user];
          if (reader.role == FusionRole::Reshape) {
            views.push_back(FusionValue{user, 0});
            continue;
          }
          if (reader.opClass != FusionOpClass::MatMul || members[find(user)].size() != 1 ||
              reader.operands.size() != 2)
            continue;
          for (int side = 0; side < 2; ++side) {
            const FusionOperand &operand = reader.operands[side];
            bool contractsRows = side == 0 ? reader.transposeLhs : !reader.transposeRhs;
            if (operand.value == views[v] && contractsRows && operand.shape.size() == 2 &&
                operand.shape[0] == rows && operand.shape[1] == columns &&
                reader.operands[1 - side].shape.size() == 2) {
              matmul = user;
              reached = static_cast<int>(c);
              break;
            }
          }
          if (matmul >= 0)
            break;
        }
      }
    }
    if (matmul < 0 || !merge(matmul, op))
      continue;
    claim(matmul, FusionKind::BiasGrad);
    // The widening casts between the sum and the matmul's operand, when nothing else reads
    // them: the epilogue sums the operand itself.
    int root = find(matmul);
    for (int c = 0; c < reached; ++c) {
      int cast = chain[c].op;
      if (!isFreeElementwise(cast) || !readersWithin(cast, root) || !merge(matmul, cast))
        break;
      root = find(matmul);
    }
  }
}

void Planner::groupAccumulations() {
  for (int op = 0; op < numOps; ++op) {
    const FusionOp &accumulate = graph.ops[op];
    if (accumulate.opClass != FusionOpClass::Accumulate || accumulate.operands.empty())
      continue;
    // A gradient that is one matmul's product, read by nothing else: the matmul adds it into
    // the accumulator (beta = 1), so it is never written out and no kernel adds it. The
    // matmul is plain or carries a bias gradient's column sum (which keeps its kind).
    const int producer = accumulate.operands[0].value.op;
    if (accumulate.addsUnchanged && producer >= 0 &&
        graph.ops[producer].opClass == FusionOpClass::MatMul &&
        graph.ops[producer].results.size() == 1 && readers[producer][0].size() == 1) {
      const int root = find(producer);
      const bool plain = members[root].size() == 1 && kind[root] == FusionKind::MatMul;
      if ((plain || kind[root] == FusionKind::BiasGrad) && merge(producer, op)) {
        if (plain)
          claim(producer, FusionKind::MatMulAccumulate);
        continue;
      }
    }
    claim(op, FusionKind::Accumulate);
    absorbProducers(op, numElements(accumulate.operands[0].shape));
  }
}

void Planner::groupOptimizerUpdates() {
  int first = -1;
  for (int op = 0; op < numOps; ++op) {
    if (graph.ops[op].opClass != FusionOpClass::Optimizer)
      continue;
    if (first < 0) {
      first = op;
      claim(op, FusionKind::Optimizer);
    } else {
      merge(first, op);
    }
  }
}

void Planner::groupReductions() {
  // Producers first: a reduction computing its input on the fly saves writing it.
  std::vector<int> reductions;
  for (int op = 0; op < numOps; ++op) {
    const FusionOp &reduction = graph.ops[op];
    // Skip the reductions a pattern has claimed (cross-entropy, bias gradients).
    if (reduction.opClass != FusionOpClass::Reduction || members[find(op)].size() != 1 ||
        kind[find(op)] != FusionKind::Reduction)
      continue;
    claim(op, FusionKind::Reduction);
    reductions.push_back(op);
    int64_t space = 0;
    for (const FusionOperand &operand : reduction.operands)
      space = std::max(space, numElements(operand.shape));
    absorbProducers(op, space);
  }
  for (int op : reductions)
    absorbConsumers(find(op));
}

void Planner::absorbAccumulatesIntoColumnSums() {
  for (int op = 0; op < numOps; ++op) {
    const FusionOp &accumulate = graph.ops[op];
    if (accumulate.opClass != FusionOpClass::Accumulate ||
        !(accumulate.addsUnchanged || accumulate.unscalesF32) || accumulate.operands.empty() ||
        members[find(op)].size() != 1)
      continue;
    // The gradient: a column sum's result read by nothing else. A sum over a leading run of
    // axes (a bias gradient's, or a reduction's), or a norm gradient's dgamma or dbeta; the
    // sum's second stage then adds each column's total (divided by the loss scale, under
    // loss scaling) into the accumulator itself, so the gradient is never written and no
    // kernel of its own adds it.
    const FusionValue grad = accumulate.operands[0].value;
    if (grad.op < 0 || readers[grad.op][grad.result].size() != 1)
      continue;
    const FusionOp &producer = graph.ops[grad.op];
    const FusionKind producerKind = kind[find(grad.op)];
    bool leading = !producer.axes.empty();
    for (size_t k = 0; k < producer.axes.size(); ++k)
      leading = leading && producer.axes[k] == static_cast<int64_t>(k);
    const bool columnSum =
        producer.role == FusionRole::Sum && leading &&
        (producerKind == FusionKind::BiasGrad || producerKind == FusionKind::Reduction);
    const bool normParameters = producer.role == FusionRole::NormGrad && grad.result >= 1 &&
                                producerKind == FusionKind::Reduction;
    if (columnSum || normParameters)
      merge(grad.op, op);
  }
}

void Planner::groupElementwiseChains() {
  for (int op = 0; op < numOps; ++op) {
    const FusionOp &elementwise = graph.ops[op];
    if (elementwise.opClass != FusionOpClass::Elementwise ||
        kind[find(op)] != FusionKind::Elementwise)
      continue;
    int64_t space = resultElements(elementwise);
    for (const FusionOperand &operand : elementwise.operands) {
      int producer = operand.value.op;
      if (producer < 0 || graph.ops[producer].opClass != FusionOpClass::Elementwise ||
          kind[find(producer)] != FusionKind::Elementwise || numElements(operand.shape) != space)
        continue;
      merge(op, producer);
    }
  }
}

void Planner::absorbBroadcasts() {
  for (int op = 0; op < numOps; ++op) {
    if (graph.ops[op].role != FusionRole::Broadcast || members[find(op)].size() != 1 ||
        readers[op].empty() || readers[op][0].empty())
      continue;
    // Read by one elementwise group, in its iteration space: the group reads the smaller
    // input broadcast instead of a materialised copy.
    int group = find(readers[op][0][0]);
    if (kind[group] == FusionKind::Elementwise && readersWithin(op, group) &&
        resultElements(graph.ops[op]) == resultElements(graph.ops[readers[op][0][0]]))
      merge(readers[op][0][0], op);
  }
}

void Planner::groupCopyChains() {
  for (int op = 0; op < numOps; ++op) {
    const FusionOp &copy = graph.ops[op];
    if (copy.opClass != FusionOpClass::DataMovement || copy.role == FusionRole::Reshape ||
        kind[find(op)] != FusionKind::Copy)
      continue;
    for (const FusionOperand &operand : copy.operands) {
      // Back through the reshapes only this group reads, to the copy producing the operand:
      // every output element of the chain is one element of its input, found by composing the
      // index maps, so the chain is one gather.
      int producer = operand.value.op;
      while (producer >= 0 && graph.ops[producer].role == FusionRole::Reshape &&
             members[find(producer)].size() == 1 && readersWithin(producer, find(op)) &&
             merge(op, producer))
        producer = graph.ops[producer].operands[0].value.op;
      if (producer >= 0 && graph.ops[producer].opClass == FusionOpClass::DataMovement &&
          graph.ops[producer].role != FusionRole::Reshape &&
          kind[find(producer)] == FusionKind::Copy)
        merge(op, producer);
    }
  }
}

void Planner::absorbViews() {
  for (int op = 0; op < numOps; ++op) {
    if (graph.ops[op].role != FusionRole::Reshape || members[find(op)].size() != 1 ||
        readers[op].empty() || readers[op][0].empty())
      continue;
    // Read by one kernel only: the kernel reads the input with the new shape.
    int reader = readers[op][0][0];
    FusionKind readerKind = kind[find(reader)];
    if (readerKind != FusionKind::None && readerKind != FusionKind::View &&
        readersWithin(op, find(reader)))
      merge(reader, op);
  }
}

void Planner::absorbProducers(int op, int64_t space) {
  std::vector<int> work = {op};
  for (size_t next = 0; next < work.size(); ++next) {
    for (const FusionOperand &operand : graph.ops[work[next]].operands) {
      int producer = operand.value.op;
      if (producer < 0 || numElements(operand.shape) != space || !isFreeElementwise(producer) ||
          !readersWithin(producer, find(op)))
        continue;
      if (merge(op, producer))
        work.push_back(producer);
    }
  }
}

void Planner::absorbConsumers(int root) {
  std::vector<int> work = members[root];
  std::sort(work.begin(), work.end());
  int anchorOp = anchor[root];
  for (size_t next = 0; next < work.size(); ++next) {
    const FusionOp &op = graph.ops[work[next]];
    for (size_t result = 0; result < op.results.size(); ++result) {
      int64_t space = numElements(op.results[result]);
      for (int user : readers[work[next]][result]) {
        if (!isFreeElementwise(user) || resultElements(graph.ops[user]) != space)
          continue;
        if (merge(anchorOp, user))
          work.push_back(user);
      }
    }
  }
}

} // namespace ampc::graph::fusiongrouping
