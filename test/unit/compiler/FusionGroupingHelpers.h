//===- FusionGroupingHelpers.h - hand-built fusion graphs -------*- C++ -*-===//
//
// What the FusionGrouping*Test.cpp files share: a builder of FusionGraphs, op by op; planning
// with the checks every grouping must pass (valid and deterministic); shorthands for the
// expectations.
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_TEST_UNIT_COMPILER_FUSIONGROUPINGHELPERS_H
#define AMPC_TEST_UNIT_COMPILER_FUSIONGROUPINGHELPERS_H

#include "passes/FusionGrouping.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace ampc::test::fusion {

// The fusion types the helpers use (using-declarations, not directives: a file that includes
// this header sees only these).
using graph::checkFusionPlan;
using graph::FusionGraph;
using graph::FusionGroup;
using graph::FusionOp;
using graph::FusionOpClass;
using graph::FusionPlan;
using graph::FusionRole;
using graph::FusionShape;
using graph::FusionValue;
using graph::planFusion;

/// Builds a FusionGraph op by op.
struct GraphBuilder {
  FusionGraph graph;

  int op(const std::string &name, FusionOpClass opClass, FusionRole role,
         const std::vector<int> &inputs, std::vector<FusionShape> results) {
    FusionOp node;
    node.name = name;
    node.opClass = opClass;
    node.role = role;
    for (int input : inputs)
      node.operands.push_back(graph.operand(input));
    node.results = std::move(results);
    return graph.add(std::move(node));
  }
  /// A value with no kernel of its own (get_input, get_param).
  int source(const FusionShape &shape) {
    return op("graph.get_input", FusionOpClass::Other, FusionRole::None, {}, {shape});
  }
  /// An elementwise op with the shape of its first operand.
  int elementwise(const std::string &name, const std::vector<int> &inputs,
                  FusionRole role = FusionRole::None) {
    return op(name, FusionOpClass::Elementwise, role, inputs, {shapeOf(inputs[0])});
  }
  int matmul(int lhs, int rhs, const FusionShape &result, bool transposeLhs = false,
             bool transposeRhs = false) {
    int index = op("graph.matmul", FusionOpClass::MatMul, FusionRole::None, {lhs, rhs}, {result});
    graph.ops[index].transposeLhs = transposeLhs;
    graph.ops[index].transposeRhs = transposeRhs;
    return index;
  }
  int sum(int input, std::vector<int64_t> axes, const FusionShape &result) {
    int index = op("graph.sum", FusionOpClass::Reduction, FusionRole::Sum, {input}, {result});
    graph.ops[index].axes = std::move(axes);
    return index;
  }
  /// func.return of the given values.
  int ret(const std::vector<int> &inputs) {
    return op("func.return", FusionOpClass::Other, FusionRole::None, inputs, {});
  }
  const FusionShape &shapeOf(int op) const { return graph.ops[op].results[0]; }
};

/// Plans `graph` and checks the grouping is valid and deterministic.
inline FusionPlan plan(const FusionGraph &graph) {
  FusionPlan result = planFusion(graph);
  auto problem = checkFusionPlan(graph, result);
  EXPECT_FALSE(problem) << *problem;
  EXPECT_EQ(planFusion(graph).groupOf, result.groupOf) << "the grouping is not deterministic";
  return result;
}

inline const FusionGroup &groupOf(const FusionPlan &plan, int op) {
  return plan.groups[plan.groupOf[op]];
}

inline std::vector<FusionValue> values(std::initializer_list<int> ops) {
  std::vector<FusionValue> result;
  for (int op : ops)
    result.push_back(FusionValue{op, 0});
  return result;
}

} // namespace ampc::test::fusion

#endif // AMPC_TEST_UNIT_COMPILER_FUSIONGROUPINGHELPERS_H
