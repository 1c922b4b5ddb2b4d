//===- FusionGroupingImpl.h - The fusion planner's state --------*- C++ -*-===//
//
// Private to passes/FusionGrouping*.cpp: the Planner that groups a FusionGraph's ops.
// FusionGrouping.cpp holds its groups (a union-find over the ops whose merges never close a
// cycle between groups) and numbers the final plan; FusionGroupingRules.cpp holds the rules
// that merge ops, in the order FusionGrouping.h lists them.
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_PASSES_FUSIONGROUPINGIMPL_H
#define AMPC_PASSES_FUSIONGROUPINGIMPL_H

#include "passes/FusionGrouping.h"

#include <cstdint>
#include <vector>

namespace ampc::graph::fusiongrouping {

/// Groups the ops of one FusionGraph: each op starts as a group of its own, the rules merge
/// groups, and run() numbers what is left as the plan.
class Planner {
public:
  explicit Planner(const FusionGraph &graph);
  FusionPlan run();

private:
  // Rules, in the order they run.
  void groupCrossEntropy();
  void groupMatMulEpilogues();
  void groupBiasGradients();
  void groupAccumulations();
  void groupOptimizerUpdates();
  void groupReductions();
  void absorbAccumulatesIntoColumnSums();
  void groupElementwiseChains();
  void absorbBroadcasts();
  void groupCopyChains();
  void absorbViews();

  /// Pulls into `op`'s group the elementwise producers of its operands of `space` elements that
  /// nothing outside the group reads, and theirs in turn.
  void absorbProducers(int op, int64_t space);
  /// Pulls into `root`'s group the elementwise ops reading its values without broadcasting
  /// them, and their readers in turn.
  void absorbConsumers(int root);

  int find(int op);
  bool inGroup(int op, int root) { return find(op) == root; }
  /// An elementwise op no rule has claimed yet.
  bool isFreeElementwise(int op);
  /// Every reader of every result of `op` is in `root`'s group.
  bool readersWithin(int op, int root);
  /// Whether some path leads from group `from` to group `to` through a third group.
  bool reachesThroughOthers(int from, int to);
  /// Merges the groups of `into` and `other` unless that creates a cycle; the merged group
  /// keeps the kind and anchor of `into`'s. Returns whether both are now one group.
  bool merge(int into, int other);
  /// Starts a pattern group: `op`'s group gets `kind` and `op` as its anchor.
  void claim(int op, FusionKind kind);

  const FusionGraph &graph;
  int numOps;
  /// Readers of each result of each op, unique, in program order.
  std::vector<std::vector<std::vector<int>>> readers;
  /// Ops that must run after each op: its readers and the ops ordered after it.
  std::vector<std::vector<int>> successors;

  std::vector<int> parent;
  /// At each group's root: its members (unordered), kind and anchor.
  std::vector<std::vector<int>> members;
  std::vector<FusionKind> kind;
  std::vector<int> anchor;
  /// Marks for the search in reachesThroughOthers.
  std::vector<int> visited;
  int visitMark = 0;
};

} // namespace ampc::graph::fusiongrouping

#endif // AMPC_PASSES_FUSIONGROUPINGIMPL_H
