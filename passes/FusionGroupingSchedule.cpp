//===- FusionGroupingSchedule.cpp - the order of fused groups, and checks -===//
//
// What a finished plan's groups must satisfy as a graph of kernels: the order they run in
// (Kahn's algorithm, the lowest-numbered ready group first) and the check that a plan is a valid
// grouping (every op in one group, outputs exactly the values read outside, no cycle).
//
//===--------------------------------------------------------------------------===//

#include "passes/FusionGrouping.h"

#include <algorithm>
#include <queue>

namespace ampc::graph {

std::vector<int> scheduleFusionGroups(const FusionGraph &graph, const FusionPlan &plan) {
  const int numGroups = static_cast<int>(plan.groups.size());
  std::vector<std::vector<int>> next(numGroups);
  std::vector<int> incoming(numGroups, 0);
  auto addEdge = [&](int from, int to) {
    const int a = plan.groupOf[from], b = plan.groupOf[to];
    if (a != b) {
      next[a].push_back(b);
      ++incoming[b];
    }
  };
  for (int op = 0; op < static_cast<int>(graph.ops.size()); ++op) {
    for (const FusionOperand &operand : graph.ops[op].operands)
      if (operand.value.op >= 0)
        addEdge(operand.value.op, op);
    for (int before : graph.ops[op].orderAfter)
      addEdge(before, op);
  }
  // Kahn's algorithm with the lowest-numbered ready group first.
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int g = 0; g < numGroups; ++g)
    if (incoming[g] == 0)
      ready.push(g);
  std::vector<int> order;
  order.reserve(numGroups);
  while (!ready.empty()) {
    const int g = ready.top();
    ready.pop();
    order.push_back(g);
    for (int successor : next[g])
      if (--incoming[successor] == 0)
        ready.push(successor);
  }
  if (static_cast<int>(order.size()) != numGroups)
    return {};
  return order;
}

std::optional<std::string> checkFusionPlan(const FusionGraph &graph, const FusionPlan &plan) {
  int numOps = static_cast<int>(graph.ops.size());
  int numGroups = static_cast<int>(plan.groups.size());
  auto opName = [&](int op) {
    return "op " + std::to_string(op) + " (" + graph.ops[op].name + ")";
  };
  if (static_cast<int>(plan.groupOf.size()) != numOps)
    return "the plan has " + std::to_string(plan.groupOf.size()) + " group numbers for " +
           std::to_string(numOps) + " ops";
  // Membership: groupOf and the member lists agree; groups are numbered by their first op.
  std::vector<int> seen(numOps, 0);
  int firstOfPrevious = -1;
  for (int g = 0; g < numGroups; ++g) {
    const FusionGroup &group = plan.groups[g];
    if (group.ops.empty())
      return "group " + std::to_string(g) + " is empty";
    if (!std::is_sorted(group.ops.begin(), group.ops.end()))
      return "the ops of group " + std::to_string(g) + " are not in program order";
    if (group.ops.front() <= firstOfPrevious)
      return "group " + std::to_string(g) + " is not numbered by its first op";
    firstOfPrevious = group.ops.front();
    for (int op : group.ops) {
      if (op < 0 || op >= numOps || plan.groupOf[op] != g || seen[op]++)
        return "group " + std::to_string(g) +
               " lists an op that is not its own: " + std::to_string(op);
    }
  }
  for (int op = 0; op < numOps; ++op)
    if (!seen[op])
      return opName(op) + " is in no group";

  // Edges between groups (data and order), and the values each group writes out.
  std::vector<std::vector<int>> next(numGroups);
  std::vector<int> incoming(numGroups, 0);
  std::vector<std::vector<FusionValue>> outputs(numGroups);
  auto addEdge = [&](int from, int to) {
    int a = plan.groupOf[from], b = plan.groupOf[to];
    if (a == b)
      return;
    next[a].push_back(b);
    ++incoming[b];
  };
  for (int op = 0; op < numOps; ++op) {
    for (const FusionOperand &operand : graph.ops[op].operands) {
      if (operand.value.op < 0)
        continue;
      addEdge(operand.value.op, op);
      if (plan.groupOf[operand.value.op] != plan.groupOf[op]) {
        auto &list = outputs[plan.groupOf[operand.value.op]];
        if (std::find(list.begin(), list.end(), operand.value) == list.end())
          list.push_back(operand.value);
      }
    }
    for (int before : graph.ops[op].orderAfter)
      addEdge(before, op);
  }
  for (int g = 0; g < numGroups; ++g) {
    std::vector<FusionValue> expected = outputs[g], listed = plan.groups[g].outputs;
    auto byPosition = [](const FusionValue &a, const FusionValue &b) {
      return a.op != b.op ? a.op < b.op : a.result < b.result;
    };
    std::sort(expected.begin(), expected.end(), byPosition);
    std::sort(listed.begin(), listed.end(), byPosition);
    if (expected != listed)
      return "the outputs of group " + std::to_string(g) + " are not the values read outside it";
  }

  // No cycle: every group can be scheduled once the groups it reads have run (Kahn).
  std::vector<int> ready;
  for (int g = 0; g < numGroups; ++g)
    if (incoming[g] == 0)
      ready.push_back(g);
  int scheduled = 0;
  while (!ready.empty()) {
    int g = ready.back();
    ready.pop_back();
    ++scheduled;
    for (int successor : next[g])
      if (--incoming[successor] == 0)
        ready.push_back(successor);
  }
  if (scheduled != numGroups) {
    for (int g = 0; g < numGroups; ++g)
      if (incoming[g] > 0)
        return "group " + std::to_string(g) + " (from " + opName(plan.groups[g].ops.front()) +
               ") is on a cycle of groups: it cannot run as one kernel";
  }
  return std::nullopt;
}

} // namespace ampc::graph
