//===- FusionGroupingTest.cpp - the fusion grouping on hand-built graphs --===//
//
// One hand-built graph per rule of passes/FusionGrouping.h that needs no matmul or training
// state (elementwise chains, reductions with their producers and consumers, copies), the
// guarantees every grouping keeps (no cycle between groups, outputs listed, determinism), the
// schedule of the groups, and graph-fuse on the tiny GPT's training step. The matmul rules are
// in FusionGroupingMatMulTest.cpp, the training step's in FusionGroupingTrainingTest.cpp.
//
//===--------------------------------------------------------------------------===//

#include "FusionGroupingHelpers.h"

#include "CompileHelpers.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

using namespace ampc::graph;
using namespace ampc::test::fusion;

namespace {

//===----------------------------------------------------------------------===//
// Elementwise chains
//===----------------------------------------------------------------------===//

TEST(FusionGrouping, ElementwiseChainIsOneKernel) {
  GraphBuilder b;
  int x = b.source({4, 8});
  int bias = b.source({8});
  int e = b.elementwise("graph.exp", {x});
  int m = b.elementwise("graph.mul", {e, e});
  // A smaller operand from outside is read broadcast into the group's iteration space.
  int a = b.elementwise("graph.add", {m, bias}, FusionRole::Add);
  b.ret({a});
  FusionPlan p = plan(b.graph);
  EXPECT_EQ(p.groupOf[e], p.groupOf[m]);
  EXPECT_EQ(p.groupOf[e], p.groupOf[a]);
  EXPECT_NE(p.groupOf[x], p.groupOf[e]);
  EXPECT_EQ(groupOf(p, e).kind, FusionKind::Elementwise);
  EXPECT_EQ(groupOf(p, e).ops, (std::vector<int>{e, m, a}));
  EXPECT_EQ(groupOf(p, e).anchor, e);
  EXPECT_EQ(groupOf(p, e).outputs, values({a}));
  // Sources and the return run no kernel; each is a group of its own.
  EXPECT_EQ(groupOf(p, x).kind, FusionKind::None);
  EXPECT_EQ(p.groups.size(), 4u);
}

TEST(FusionGrouping, ElementwiseOnlyFusesOverTheSameElementCount) {
  GraphBuilder b;
  int row = b.source({8});
  int x = b.source({4, 8});
  // exp over 8 elements, then its result broadcast into an add over 32: different spaces.
  int small = b.elementwise("graph.exp", {row});
  int big = b.op("graph.add", FusionOpClass::Elementwise, FusionRole::Add, {x, small}, {{4, 8}});
  int after = b.elementwise("graph.neg", {big});
  b.ret({after});
  FusionPlan p = plan(b.graph);
  EXPECT_NE(p.groupOf[small], p.groupOf[big]);
  EXPECT_EQ(p.groupOf[big], p.groupOf[after]);
  EXPECT_EQ(groupOf(p, small).outputs, values({small}));
}

TEST(FusionGrouping, BroadcastReadOnlyByTheGroupJoinsIt) {
  GraphBuilder b;
  int x = b.source({4, 8});
  int row = b.source({8});
  int wide =
      b.op("graph.broadcast", FusionOpClass::DataMovement, FusionRole::Broadcast, {row}, {{4, 8}});
  int e = b.elementwise("graph.exp", {x});
  int sum = b.elementwise("graph.add", {e, wide}, FusionRole::Add);
  b.ret({sum});
  FusionPlan p = plan(b.graph);
  EXPECT_EQ(p.groupOf[wide], p.groupOf[e]);
  EXPECT_EQ(p.groupOf[sum], p.groupOf[e]);
  EXPECT_EQ(groupOf(p, e).kind, FusionKind::Elementwise);
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

TEST(FusionGrouping, ReductionTakesItsProducersAndConsumers) {
  GraphBuilder b;
  int x = b.source({4, 8});
  int gain = b.source({8});
  int shift = b.source({8});
  int residual = b.source({4, 8});
  // bf16 -> f32, layernorm, f32 -> bf16, residual add: one kernel.
  int widened = b.elementwise("graph.cast", {x}, FusionRole::WideningCast);
  int norm = b.op("graph.layernorm", FusionOpClass::Reduction, FusionRole::None,
                  {widened, gain, shift}, {{4, 8}});
  int narrowed = b.elementwise("graph.cast", {norm}, FusionRole::Cast);
  int added = b.elementwise("graph.add", {narrowed, residual}, FusionRole::Add);
  b.ret({added});
  FusionPlan p = plan(b.graph);
  const FusionGroup &group = groupOf(p, norm);
  EXPECT_EQ(group.kind, FusionKind::Reduction);
  EXPECT_EQ(group.anchor, norm);
  EXPECT_EQ(group.ops, (std::vector<int>{widened, norm, narrowed, added}));
  EXPECT_EQ(group.outputs, values({added}));
}

TEST(FusionGrouping, ReductionLeavesAProducerReadElsewhere) {
  GraphBuilder b;
  int x = b.source({4, 8});
  int gain = b.source({8});
  int widened = b.elementwise("graph.cast", {x}, FusionRole::WideningCast);
  int norm =
      b.op("graph.rmsnorm", FusionOpClass::Reduction, FusionRole::None, {widened, gain}, {{4, 8}});
  // The backward pass reads the widened input too: it must be written out by its own kernel,
  // not recomputed inside the norm.
  int other = b.elementwise("graph.exp", {widened});
  b.ret({norm, other});
  FusionPlan p = plan(b.graph);
  EXPECT_NE(p.groupOf[widened], p.groupOf[norm]);
  EXPECT_EQ(p.groupOf[widened], p.groupOf[other]);
  EXPECT_EQ(groupOf(p, widened).outputs, values({widened, other}));
}

TEST(FusionGrouping, ReductionConsumersKeepTheReducedSpace) {
  GraphBuilder b;
  int x = b.source({4, 8});
  int big = b.source({4, 8});
  int total = b.sum(x, {1}, {4});
  // Over the 4 sums: fused. Broadcasting the sums back over 32 elements: not fused.
  int scaled = b.elementwise("graph.mul", {total, total});
  int spread =
      b.op("graph.sub", FusionOpClass::Elementwise, FusionRole::None, {big, scaled}, {{4, 8}});
  b.ret({spread});
  FusionPlan p = plan(b.graph);
  EXPECT_EQ(p.groupOf[total], p.groupOf[scaled]);
  EXPECT_NE(p.groupOf[total], p.groupOf[spread]);
  EXPECT_EQ(groupOf(p, total).kind, FusionKind::Reduction);
}

//===----------------------------------------------------------------------===//
// Guarantees
//===----------------------------------------------------------------------===//

TEST(FusionGrouping, DiamondThroughAMatmulIsNotFused) {
  // a = exp(x); m = a @ w; s = a * m. Fusing a and s would put the matmul both after and
  // before one kernel.
  GraphBuilder b;
  int x = b.source({4, 4});
  int w = b.source({4, 4});
  int a = b.elementwise("graph.exp", {x});
  int m = b.matmul(a, w, {4, 4});
  int s = b.elementwise("graph.mul", {a, m});
  b.ret({s});
  FusionPlan p = plan(b.graph);
  EXPECT_NE(p.groupOf[a], p.groupOf[s]);
  EXPECT_EQ(groupOf(p, a).outputs, values({a}));

  // The checker rejects the grouping that would have fused them.
  FusionPlan bad = p;
  int merged = bad.groupOf[a], dropped = bad.groupOf[s];
  bad.groupOf[s] = merged;
  bad.groups[merged].ops.push_back(s);
  bad.groups[merged].outputs = values({a, s});
  bad.groups.erase(bad.groups.begin() + dropped);
  for (int &group : bad.groupOf)
    if (group > dropped)
      --group;
  auto problem = checkFusionPlan(b.graph, bad);
  ASSERT_TRUE(problem);
  EXPECT_NE(problem->find("cycle"), std::string::npos) << *problem;
}

TEST(FusionGrouping, DiamondThroughAReductionIsNotFused) {
  // The consumer of a reduction also reads, through another reduction, a value the first
  // reduction's group produces: absorbing it would close a cycle.
  GraphBuilder b;
  int x = b.source({4, 8});
  int norm = b.op("graph.softmax", FusionOpClass::Reduction, FusionRole::None, {x}, {{4, 8}});
  int rowSums = b.sum(norm, {1}, {4});
  int back = b.op("graph.broadcast", FusionOpClass::DataMovement, FusionRole::Broadcast, {rowSums},
                  {{4, 8}});
  int divided =
      b.op("graph.div", FusionOpClass::Elementwise, FusionRole::None, {norm, back}, {{4, 8}});
  b.ret({divided});
  FusionPlan p = plan(b.graph);
  EXPECT_NE(p.groupOf[norm], p.groupOf[divided]);
}

TEST(FusionGrouping, MultiOutputGroupListsEveryValueReadOutside) {
  GraphBuilder b;
  int x = b.source({4, 8});
  int e = b.elementwise("graph.exp", {x});
  int n = b.elementwise("graph.neg", {e});
  int t = b.elementwise("graph.tanh", {n});
  // e and n are read outside the chain as well: both are written out.
  int rowSums = b.sum(e, {1}, {4});
  int product = b.matmul(n, b.source({8, 8}), {4, 8});
  b.ret({t, rowSums, product});
  FusionPlan p = plan(b.graph);
  const FusionGroup &group = groupOf(p, e);
  EXPECT_EQ(group.kind, FusionKind::Elementwise);
  EXPECT_EQ(group.ops, (std::vector<int>{e, n, t}));
  EXPECT_EQ(group.outputs, values({e, n, t}));
  EXPECT_NE(p.groupOf[rowSums], p.groupOf[e]);
}

TEST(FusionGrouping, CopyChainsThroughReshapesAreOneGather) {
  // split -> reshape -> transpose, three times (the heads of q, k, v).
  GraphBuilder b;
  int qkv = b.source({2, 4, 24});
  int split = b.op("graph.split", FusionOpClass::DataMovement, FusionRole::None, {qkv},
                   {{2, 4, 8}, {2, 4, 8}, {2, 4, 8}});
  std::vector<int> heads;
  std::vector<int> chain = {split};
  for (int i = 0; i < 3; ++i) {
    FusionOp reshape;
    reshape.name = "graph.reshape";
    reshape.opClass = FusionOpClass::DataMovement;
    reshape.role = FusionRole::Reshape;
    reshape.operands = {b.graph.operand(split, i)};
    reshape.results = {{2, 4, 2, 4}};
    int r = b.graph.add(reshape);
    int t =
        b.op("graph.transpose", FusionOpClass::DataMovement, FusionRole::None, {r}, {{2, 2, 4, 4}});
    heads.push_back(t);
    chain.push_back(r);
    chain.push_back(t);
  }
  int attention =
      b.op("graph.attention", FusionOpClass::Attention, FusionRole::None, heads, {{2, 2, 4, 4}});
  int r = b.op("graph.reshape", FusionOpClass::DataMovement, FusionRole::Reshape, {attention},
               {{2, 2, 16}});
  b.ret({r});
  FusionPlan p = plan(b.graph);
  EXPECT_EQ(groupOf(p, split).kind, FusionKind::Copy);
  EXPECT_EQ(groupOf(p, split).ops, chain);
  EXPECT_EQ(groupOf(p, split).anchor, split);
  EXPECT_EQ(groupOf(p, split).outputs, values({heads[0], heads[1], heads[2]}));
  EXPECT_EQ(groupOf(p, attention).kind, FusionKind::Attention);
  // A reshape read by no kernel (only returned) is a view of its own.
  EXPECT_EQ(groupOf(p, r).kind, FusionKind::View);
}

TEST(FusionGrouping, ExternalValuesAndEmptyGraphs) {
  EXPECT_TRUE(planFusion(FusionGraph{}).groups.empty());
  // Function arguments (op -1) are read like any other input.
  FusionGraph graph;
  FusionOp e;
  e.name = "graph.exp";
  e.opClass = FusionOpClass::Elementwise;
  e.operands = {FusionOperand{FusionValue{-1, 0}, {4}}};
  e.results = {{4}};
  int first = graph.add(e);
  FusionOp n = e;
  n.name = "graph.neg";
  n.operands = {graph.operand(first)};
  graph.add(n);
  FusionPlan p = plan(graph);
  EXPECT_EQ(p.groups.size(), 1u);
  EXPECT_TRUE(p.groups[0].outputs.empty());
}

//===----------------------------------------------------------------------===//
// graph-fuse on the tiny GPT
//===----------------------------------------------------------------------===//

TEST(FusionGrouping, ScheduleRunsEachGroupAfterWhatItReads) {
  // The classifier's loss (op 2) and gradient (op 4) are one group, numbered by the loss; the
  // gradient reads the loss seed (op 3), a later-numbered group: that group must run first.
  GraphBuilder b;
  int logits = b.source({8, 10});
  int labels = b.source({8});
  int loss = b.op("graph.cross_entropy", FusionOpClass::Reduction, FusionRole::CrossEntropy,
                  {logits, labels}, {{}});
  int seed = b.op("graph.grad_seed", FusionOpClass::Other, FusionRole::None, {}, {{}});
  int grad = b.op("graph.cross_entropy_grad", FusionOpClass::Reduction,
                  FusionRole::CrossEntropyGrad, {logits, labels, seed}, {{8, 10}});
  b.ret({loss, grad});
  FusionPlan grouping = plan(b.graph);
  ASSERT_EQ(grouping.groupOf[loss], grouping.groupOf[grad]);
  std::vector<int> order = scheduleFusionGroups(b.graph, grouping);
  ASSERT_EQ(order.size(), grouping.groups.size());
  const int lossGroup = grouping.groupOf[loss], seedGroup = grouping.groupOf[seed];
  ASSERT_LT(lossGroup, seedGroup);
  std::vector<int> position(order.size());
  for (size_t i = 0; i < order.size(); ++i)
    position[order[i]] = static_cast<int>(i);
  EXPECT_LT(position[seedGroup], position[lossGroup]);
  // Every data edge points forward in the schedule; otherwise it keeps the numbering.
  for (size_t op = 0; op < b.graph.ops.size(); ++op)
    for (const FusionOperand &operand : b.graph.ops[op].operands)
      if (operand.value.op >= 0 && grouping.groupOf[operand.value.op] != grouping.groupOf[op])
        EXPECT_LT(position[grouping.groupOf[operand.value.op]], position[grouping.groupOf[op]]);
  EXPECT_EQ(order, (std::vector<int>{0, 1, seedGroup, lossGroup, seedGroup + 1}));
}

TEST(FusionGrouping, TinyGptTrainingStep) {
  mlir::MLIRContext context;
  ampc::registerModelDialects(context);
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &context);
  auto loaded =
      ampc::loadModel(ampc::test_support::examplePath("gpt/tiny.mlir"), sourceMgr, context);
  ASSERT_TRUE(succeeded(loaded));
  ModelOp model = loaded->model;
  GraphBuildTrainingOptions training;
  training.accumSteps = 2;
  ASSERT_TRUE(succeeded(ampc::buildTraining(model, training)));
  GraphAssignPrecisionOptions precision;
  precision.mode = "fp16";
  GraphInsertLossScalingOptions scaling;
  ASSERT_TRUE(succeeded(ampc::assignPrecision(model, precision, &scaling)));
  mlir::PassManager pm(&context, ModelOp::getOperationName());
  pm.addPass(createGraphFuse());
  ASSERT_TRUE(succeeded(pm.run(model)));

  const std::set<std::string> knownKinds = {
      "none",      "view",          "elementwise", "copy",
      "reduction", "cross_entropy", "matmul",      "matmul_epilogue",
      "bias_grad", "attention",     "accumulate",  "optimizer"};
  for (const char *name : {"micro_step", "optimizer_step"}) {
    SCOPED_TRACE(name);
    auto function = mlir::SymbolTable::lookupNearestSymbolFrom<mlir::func::FuncOp>(
        model, mlir::StringAttr::get(&context, name));
    ASSERT_TRUE(function);
    auto schedule = function->getAttrOfType<mlir::DenseI64ArrayAttr>(
        ampc::graph::GraphDialect::kFusionScheduleAttrName);
    ASSERT_TRUE(schedule);
    int64_t numGroups = schedule.size();
    // Every op has a group; groups are numbered by their first op; the ops of a group agree on
    // its kind.
    int64_t numOps = 0, nextGroup = 0;
    std::map<std::string, int> kinds;
    std::map<int64_t, ampc::graph::GroupKind> kindOf;
    for (mlir::Operation &op : function.getBody().front()) {
      ++numOps;
      auto fusion =
          op.getAttrOfType<ampc::graph::FusionAttr>(ampc::graph::GraphDialect::kFusionAttrName);
      ASSERT_TRUE(fusion) << "no group: " << op.getName().getStringRef().str();
      ASSERT_LE(fusion.getGroup(), nextGroup);
      auto [known, first] = kindOf.try_emplace(fusion.getGroup(), fusion.getKind());
      EXPECT_EQ(known->second, fusion.getKind());
      if (first) {
        std::string kind = ampc::graph::stringifyGroupKind(fusion.getKind()).str();
        EXPECT_TRUE(knownKinds.count(kind)) << kind;
        ++kinds[kind];
        ++nextGroup;
      }
    }
    EXPECT_EQ(nextGroup, numGroups);
    if (std::string(name) == "micro_step") {
      // Two layers: four matmuls with a bias epilogue each (the attention projection and the
      // second MLP matmul adding the residual as C) and one with the gelu's gradient (DGELU),
      // the tied head's weight gradient adding the embedding's (C), a bias gradient per bias,
      // one fused classifier, an accumulation kernel per weight matrix and for the tied
      // embedding (the 19 biases', norms' and positions' column totals are divided by the loss
      // scale and accumulated by their sums' second stages), and far fewer groups than ops.
      EXPECT_EQ(kinds["matmul_epilogue"], 11);
      EXPECT_EQ(kinds["bias_grad"], 8);
      EXPECT_EQ(kinds["cross_entropy"], 1);
      EXPECT_EQ(kinds["accumulate"], 9);
      EXPECT_EQ(kinds["attention"], 4);
      EXPECT_LT(numGroups * 3, numOps * 2) << numGroups << " groups for " << numOps << " ops";
    } else {
      // global_norm, lr_schedule, the updates, update_loss_scale, return.
      EXPECT_EQ(kinds["optimizer"], 1);
      EXPECT_EQ(numGroups, 5);
    }
  }
}

} // namespace
