//===- FusionGrouping.cpp - which ops of a function run as one kernel -----===//
//
// The value types of FusionGrouping.h, the planner's groups and the numbering of the plan.
// Groups are kept in a union-find over the ops. Every merge is checked against the graph of
// groups: merging X and Y is refused when a path leads from one to the other through a third
// group, since the merged group would then have to run both before and after that group. As
// long as every merge passes the check, the groups form a DAG (the ops in program order are one
// to begin with). The rules (FusionGroupingRules.cpp) run in the order of FusionGrouping.h, each
// visiting ops in program order, so the result depends on nothing but the graph.
//
//===--------------------------------------------------------------------------===//

#include "passes/FusionGrouping.h"
#include "passes/FusionGroupingImpl.h"

#include <algorithm>
#include <cassert>

namespace ampc::graph {

int64_t numElements(const FusionShape &shape) {
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  return count;
}

int FusionGraph::add(FusionOp op) {
  ops.push_back(std::move(op));
  return static_cast<int>(ops.size()) - 1;
}

FusionOperand FusionGraph::operand(int op, int result) const {
  return FusionOperand{FusionValue{op, result}, ops[op].results[result]};
}

const char *fusionKindName(FusionKind kind) {
  switch (kind) {
  case FusionKind::None:
    return "none";
  case FusionKind::View:
    return "view";
  case FusionKind::Elementwise:
    return "elementwise";
  case FusionKind::Copy:
    return "copy";
  case FusionKind::Reduction:
    return "reduction";
  case FusionKind::CrossEntropy:
    return "cross_entropy";
  case FusionKind::MatMul:
    return "matmul";
  case FusionKind::MatMulEpilogue:
    return "matmul_epilogue";
  case FusionKind::BiasGrad:
    return "bias_grad";
  case FusionKind::Attention:
    return "attention";
  case FusionKind::Accumulate:
    return "accumulate";
  case FusionKind::Optimizer:
    return "optimizer";
  case FusionKind::MatMulAccumulate:
    return "matmul_accumulate";
  }
  return "none";
}

namespace fusiongrouping {

namespace {

/// The kind of a group of one op.
FusionKind singletonKind(const FusionOp &op) {
  switch (op.opClass) {
  case FusionOpClass::Elementwise:
    return FusionKind::Elementwise;
  case FusionOpClass::DataMovement:
    return op.role == FusionRole::Reshape ? FusionKind::View : FusionKind::Copy;
  case FusionOpClass::Reduction:
    return FusionKind::Reduction;
  case FusionOpClass::MatMul:
    return FusionKind::MatMul;
  case FusionOpClass::Attention:
    return FusionKind::Attention;
  case FusionOpClass::Accumulate:
    return FusionKind::Accumulate;
  case FusionOpClass::Optimizer:
    return FusionKind::Optimizer;
  case FusionOpClass::Other:
    return FusionKind::None;
  }
  return FusionKind::None;
}

/// Appends `value` to `list` unless it is there already.
void appendUnique(std::vector<int> &list, int value) {
  if (std::find(list.begin(), list.end(), value) == list.end())
    list.push_back(value);
}

} // namespace

Planner::Planner(const FusionGraph &graph)
    : graph(graph), numOps(static_cast<int>(graph.ops.size())), readers(numOps), successors(numOps),
      parent(numOps), members(numOps), kind(numOps), anchor(numOps), visited(numOps, 0) {
  for (int i = 0; i < numOps; ++i) {
    const FusionOp &op = graph.ops[i];
    readers[i].resize(op.results.size());
    parent[i] = i;
    members[i] = {i};
    kind[i] = singletonKind(op);
    anchor[i] = i;
  }
  for (int i = 0; i < numOps; ++i) {
    const FusionOp &op = graph.ops[i];
    for (const FusionOperand &operand : op.operands) {
      if (operand.value.op < 0)
        continue;
      assert(operand.value.op < i && "operands must be defined by earlier ops");
      assert(operand.value.result < static_cast<int>(readers[operand.value.op].size()));
      appendUnique(readers[operand.value.op][operand.value.result], i);
      appendUnique(successors[operand.value.op], i);
    }
    for (int before : op.orderAfter) {
      assert(before >= 0 && before < i && "order edges must point back in program order");
      appendUnique(successors[before], i);
    }
  }
}

int Planner::find(int op) {
  int root = op;
  while (parent[root] != root)
    root = parent[root];
  while (parent[op] != root) {
    int next = parent[op];
    parent[op] = root;
    op = next;
  }
  return root;
}

bool Planner::isFreeElementwise(int op) {
  return graph.ops[op].opClass == FusionOpClass::Elementwise && members[find(op)].size() == 1;
}

bool Planner::readersWithin(int op, int root) {
  for (const std::vector<int> &users : readers[op])
    for (int user : users)
      if (!inGroup(user, root))
        return false;
  return true;
}

bool Planner::reachesThroughOthers(int from, int to) {
  ++visitMark;
  std::vector<int> stack;
  // Groups one step away from `group`, other than `from`; true when `to` is one of them and
  // `group` is not `from` itself (a direct edge between the two is fine).
  auto expand = [&](int group) {
    for (int member : members[group])
      for (int next : successors[member]) {
        int target = find(next);
        if (target == from || target == group)
          continue;
        if (target == to) {
          if (group != from)
            return true;
          continue;
        }
        if (visited[target] != visitMark) {
          visited[target] = visitMark;
          stack.push_back(target);
        }
      }
    return false;
  };
  if (expand(from))
    return true;
  while (!stack.empty()) {
    int group = stack.back();
    stack.pop_back();
    if (expand(group))
      return true;
  }
  return false;
}

bool Planner::merge(int into, int other) {
  int a = find(into), b = find(other);
  if (a == b)
    return true;
  if (reachesThroughOthers(a, b) || reachesThroughOthers(b, a))
    return false;
  // The larger member list absorbs the smaller; the root then carries `into`'s kind.
  FusionKind mergedKind = kind[a];
  int mergedAnchor = anchor[a];
  int root = a, child = b;
  if (members[a].size() < members[b].size())
    std::swap(root, child);
  parent[child] = root;
  members[root].insert(members[root].end(), members[child].begin(), members[child].end());
  members[child].clear();
  members[child].shrink_to_fit();
  kind[root] = mergedKind;
  anchor[root] = mergedAnchor;
  return true;
}

void Planner::claim(int op, FusionKind newKind) {
  int root = find(op);
  kind[root] = newKind;
  anchor[root] = op;
}

//===----------------------------------------------------------------------===//
// The plan
//===----------------------------------------------------------------------===//

FusionPlan Planner::run() {
  groupCrossEntropy();
  groupMatMulEpilogues();
  groupBiasGradients();
  groupAccumulations();
  groupOptimizerUpdates();
  groupReductions();
  absorbAccumulatesIntoColumnSums();
  groupElementwiseChains();
  absorbBroadcasts();
  groupCopyChains();
  absorbViews();

  // Number the groups by their first op; list members and outputs in program order.
  FusionPlan plan;
  plan.groupOf.assign(numOps, -1);
  std::vector<int> numberOfRoot(numOps, -1);
  for (int op = 0; op < numOps; ++op) {
    int root = find(op);
    if (numberOfRoot[root] < 0) {
      numberOfRoot[root] = static_cast<int>(plan.groups.size());
      FusionGroup group;
      group.kind = kind[root];
      group.anchor = anchor[root];
      plan.groups.push_back(group);
    }
    int number = numberOfRoot[root];
    plan.groupOf[op] = number;
    plan.groups[number].ops.push_back(op);
    for (size_t result = 0; result < readers[op].size(); ++result)
      if (std::any_of(readers[op][result].begin(), readers[op][result].end(),
                      [&](int user) { return find(user) != root; }))
        plan.groups[number].outputs.push_back(FusionValue{op, static_cast<int>(result)});
  }
  // Groups that no single op defines (chains of loops or copies) are anchored at their first op.
  for (FusionGroup &group : plan.groups)
    if (group.kind == FusionKind::Elementwise || group.kind == FusionKind::Copy ||
        group.kind == FusionKind::View || group.kind == FusionKind::None)
      group.anchor = group.ops.front();
  return plan;
}

} // namespace fusiongrouping

FusionPlan planFusion(const FusionGraph &graph) { return fusiongrouping::Planner(graph).run(); }

} // namespace ampc::graph
