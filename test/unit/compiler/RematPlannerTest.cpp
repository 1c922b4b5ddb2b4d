//===- RematPlannerTest.cpp - the remat planner on hand-built training steps
//--===//
//
// The simulator on schedules whose peaks are worked out by hand; the planner
// against the sqrt(n) law on chains, against exhaustive search on small random
// graphs, and for monotonicity, infeasible budgets, matmul avoidance, dropout,
// and speed on a GPT-sized step.
//
//===--------------------------------------------------------------------------===//

#include "passes/RematPlanner.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

using namespace ampc::graph;

namespace {

int64_t addOp(RematProblem &problem, std::string name, int64_t bytes, double cost,
              std::vector<int64_t> operands, bool isMatmul = false) {
  RematOp op;
  op.name = std::move(name);
  op.bytes = bytes;
  op.cost = cost;
  op.operands = std::move(operands);
  op.isMatmul = isMatmul;
  problem.ops.push_back(op);
  return static_cast<int64_t>(problem.ops.size()) - 1;
}

/// x -> y -> z forward; gz reads z, gy reads y and gz.
RematProblem threeOpStep() {
  RematProblem problem;
  problem.persistentBytes = 1000;
  addOp(problem, "x", 100, 1, {});
  addOp(problem, "y", 200, 2, {0});
  addOp(problem, "z", 50, 4, {1});
  problem.numForward = 3;
  addOp(problem, "gz", 10, 8, {2});
  addOp(problem, "gy", 20, 16, {1, 3});
  return problem;
}

TEST(RematPlanner, SimulatorKeepAll) {
  RematProblem problem = threeOpStep();
  RematSimulation sim = simulateRemat(problem, std::vector<bool>(5, false));
  // Steps x y z gz gy; live: 100, 300, 250, 260, 230.
  EXPECT_EQ(sim.peakBytes, 1300);
  EXPECT_EQ(sim.peakStep, 1);
  EXPECT_EQ(sim.extraCost, 0);
  ASSERT_EQ(sim.schedule.size(), 5u);
  // Every forward value something reads is decided; x only by the forward.
  EXPECT_EQ(rematCandidates(problem), (std::vector<bool>{true, true, true, false, false}));
}

TEST(RematPlanner, SimulatorRecomputeDragsInForwardOnlyOperands) {
  RematProblem problem = threeOpStep();
  std::vector<bool> recompute(5, false);
  recompute[0] = true; // x is dropped after the forward
  recompute[1] = true;
  RematSimulation sim = simulateRemat(problem, recompute);
  // Steps x y z gz x' y' gy; live: 100, 300, 250, 60, 110, 310, 230.
  ASSERT_EQ(sim.schedule.size(), 7u);
  EXPECT_TRUE(sim.schedule[4].isClone);
  EXPECT_EQ(sim.schedule[4].op, 0);
  EXPECT_EQ(sim.schedule[5].op, 1);
  EXPECT_EQ(sim.peakBytes, 1310);
  EXPECT_EQ(sim.peakStep, 5);
  EXPECT_EQ(sim.extraCost, 1 + 2);
  // At the peak: persistent, then y' (200), x' (100), gz (10).
  ASSERT_EQ(sim.atPeak.size(), 4u);
  EXPECT_EQ(sim.atPeak[0].op, -1);
  EXPECT_EQ(sim.atPeak[1].name, "y");
  EXPECT_TRUE(sim.atPeak[1].isClone);
}

TEST(RematPlanner, KeptForwardOnlyValueIsACheckpoint) {
  // x is read only by the forward; keeping it lets the clone of y start from it.
  RematProblem problem = threeOpStep();
  std::vector<bool> recompute(5, false);
  recompute[1] = true;
  RematSimulation sim = simulateRemat(problem, recompute);
  // Steps x y z gz y' gy; x lives until y': 100, 300, 350, 160, 310, 230.
  ASSERT_EQ(sim.schedule.size(), 6u);
  EXPECT_EQ(sim.peakBytes, 1350);
  EXPECT_EQ(sim.extraCost, 2);
}

TEST(RematPlanner, SimulatorPinnedOperandStaysAlive) {
  RematProblem problem = threeOpStep();
  problem.ops[0].pinned = true;
  std::vector<bool> recompute(5, false);
  recompute[1] = true;
  RematSimulation sim = simulateRemat(problem, recompute);
  // Steps x y z gz y' gy; x lives until y': 100, 300, 350, 160, 310, 230.
  ASSERT_EQ(sim.schedule.size(), 6u);
  EXPECT_EQ(sim.peakBytes, 1350);
  EXPECT_EQ(sim.peakStep, 2);
  EXPECT_EQ(sim.extraCost, 2);
}

/// n layers; the backward op of layer i reads activation i and the previous
/// gradient.
RematProblem chain(int n, int64_t activation = 1000) {
  RematProblem problem;
  for (int i = 0; i < n; ++i)
    addOp(problem, "a" + std::to_string(i), activation, 1,
          i ? std::vector<int64_t>{i - 1} : std::vector<int64_t>{});
  problem.numForward = n;
  for (int j = 0; j < n; ++j) {
    std::vector<int64_t> operands = {n - 1 - j};
    if (j)
      operands.push_back(n + j - 1);
    addOp(problem, "g" + std::to_string(n - 1 - j), activation, 1, operands);
  }
  return problem;
}

TEST(RematPlanner, ChainPeakGrowsLikeSqrtN) {
  const int64_t activation = 1000;
  std::vector<double> ratios;
  for (int n : {16, 64, 256}) {
    RematProblem problem = chain(n, activation);
    RematPlan infeasible = planRemat(problem, 0);
    ASSERT_FALSE(infeasible.feasible);
    double minimum = double(infeasible.minimumBudgetBytes) / activation;
    double ratio = minimum / std::sqrt(double(n));
    ratios.push_back(ratio);
    std::printf("chain n=%d: smallest peak %.0f activations = %.2f * sqrt(n), "
                "cost %.0f\n",
                n, minimum, ratio, infeasible.simulation.extraCost);
    EXPECT_GE(ratio, 1.0);
    EXPECT_LE(ratio, 3.0);
    // About 2 sqrt(n) activations (plus the two gradients in flight) is enough.
    int64_t budget = int64_t((2 * std::sqrt(double(n)) + 2) * activation);
    RematPlan plan = planRemat(problem, budget);
    EXPECT_TRUE(plan.feasible) << "n=" << n;
    EXPECT_LE(plan.simulation.peakBytes, budget);
    // Recomputing each activation at most once.
    EXPECT_LE(plan.simulation.extraCost, n);
  }
  double lo = *std::min_element(ratios.begin(), ratios.end());
  double hi = *std::max_element(ratios.begin(), ratios.end());
  EXPECT_LE(hi / lo, 1.5);
}

/// A random forward DAG and a mirror backward: each backward op reads its
/// forward value, the running gradient, and sometimes one of the value's
/// operands.
RematProblem randomStep(std::mt19937 &rng, int numForward) {
  RematProblem problem;
  problem.persistentBytes = 5000;
  for (int i = 0; i < numForward; ++i) {
    std::vector<int64_t> operands;
    if (i) {
      operands.push_back(i - 1);
      if (i > 2 && rng() % 3 == 0)
        operands.push_back(rng() % (i - 1));
    }
    bool isMatmul = rng() % 4 == 0;
    double cost = isMatmul ? 100 + rng() % 400 : 1 + rng() % 20;
    int64_t id =
        addOp(problem, "f" + std::to_string(i), 100 * (1 + rng() % 10), cost, operands, isMatmul);
    problem.ops[id].pinned = i == 0 || rng() % 8 == 0;
  }
  problem.numForward = numForward;
  int64_t grad = -1;
  for (int i = numForward - 1; i >= 0; --i) {
    if (rng() % 5 == 0)
      continue; // some values are forward-only
    std::vector<int64_t> operands = {i};
    if (grad >= 0)
      operands.push_back(grad);
    if (!problem.ops[i].operands.empty() && rng() % 2 == 0)
      operands.push_back(problem.ops[i].operands.front());
    grad = addOp(problem, "g" + std::to_string(i), 100 * (1 + rng() % 5), 1, operands);
  }
  return problem;
}

TEST(RematPlanner, WithinTenPercentOfExhaustiveOptimum) {
  std::mt19937 rng(11);
  int compared = 0, exact = 0;
  double worst = 1.0;
  for (int trial = 0; trial < 40; ++trial) {
    RematProblem problem = randomStep(rng, 10 + trial % 5);
    std::vector<bool> candidate = rematCandidates(problem);
    std::vector<int64_t> ids;
    for (size_t v = 0; v < candidate.size(); ++v)
      if (candidate[v])
        ids.push_back(v);
    ASSERT_LE(ids.size(), 14u);
    // Every subset, simulated.
    std::vector<std::pair<int64_t, double>> all;
    for (uint32_t mask = 0; mask < (1u << ids.size()); ++mask) {
      std::vector<bool> recompute(problem.ops.size(), false);
      for (size_t k = 0; k < ids.size(); ++k)
        recompute[ids[k]] = (mask >> k) & 1;
      RematSimulation sim = simulateRemat(problem, recompute);
      all.push_back({sim.peakBytes, sim.extraCost});
    }
    int64_t lowest = all.front().first, highest = all.front().first;
    for (auto [peak, cost] : all) {
      lowest = std::min(lowest, peak);
      highest = std::max(highest, peak);
    }
    RematFrontier frontier = rematFrontier(problem);
    for (int step = 0; step <= 6; ++step) {
      int64_t budget = lowest + (highest - lowest) * step / 6;
      double optimum = 1e300;
      for (auto [peak, cost] : all)
        if (peak <= budget)
          optimum = std::min(optimum, cost);
      RematPlan plan = planRemat(problem, frontier, budget);
      EXPECT_TRUE(plan.feasible) << "trial " << trial << " budget " << budget;
      EXPECT_LE(plan.simulation.peakBytes, budget);
      EXPECT_LE(plan.simulation.extraCost, 1.1 * optimum + 1e-9)
          << "trial " << trial << " budget " << budget;
      ++compared;
      if (plan.simulation.extraCost <= optimum + 1e-9)
        ++exact;
      else
        worst = std::max(worst, plan.simulation.extraCost / optimum);
    }
  }
  std::printf("exhaustive comparison: %d budgets, %d at the optimum, worst "
              "ratio %.3f\n",
              compared, exact, worst);
}

TEST(RematPlanner, SmallerBudgetsNeverRaiseThePeakOrLowerTheCost) {
  std::mt19937 rng(3);
  std::vector<RematProblem> problems = {chain(64), randomStep(rng, 14), randomStep(rng, 40)};
  for (const RematProblem &problem : problems) {
    RematFrontier frontier = rematFrontier(problem);
    int64_t highest = simulateRemat(problem, std::vector<bool>(problem.ops.size())).peakBytes;
    int64_t lowest = frontier.simulations.front().peakBytes;
    int64_t previousPeak = INT64_MAX;
    double previousCost = -1;
    for (int64_t budget = highest; budget >= lowest;
         budget -= std::max<int64_t>(1, (highest - lowest) / 50)) {
      RematPlan plan = planRemat(problem, frontier, budget);
      ASSERT_TRUE(plan.feasible);
      EXPECT_LE(plan.simulation.peakBytes, budget);
      EXPECT_LE(plan.simulation.peakBytes, previousPeak);
      EXPECT_GE(plan.simulation.extraCost, previousCost);
      previousPeak = plan.simulation.peakBytes;
      previousCost = plan.simulation.extraCost;
      // The one-shot entry point agrees (deterministic).
      if (budget == highest)
        EXPECT_EQ(planRemat(problem, budget).recompute, plan.recompute);
    }
    // At the keep-all peak nothing is recomputed.
    EXPECT_EQ(planRemat(problem, frontier, highest).simulation.extraCost, 0);
  }
}

TEST(RematPlanner, InfeasibleBudgetNamesWhatDominates) {
  RematProblem problem = chain(16);
  problem.persistentBytes = 1 << 20;
  RematPlan plan = planRemat(problem, 1000);
  EXPECT_FALSE(plan.feasible);
  EXPECT_GT(plan.minimumBudgetBytes, 1 << 20);
  EXPECT_TRUE(planRemat(problem, plan.minimumBudgetBytes).feasible);
  EXPECT_FALSE(planRemat(problem, plan.minimumBudgetBytes - 1).feasible);
  ASSERT_FALSE(plan.simulation.atPeak.empty());
  EXPECT_EQ(plan.simulation.atPeak[0].op, -1);
  EXPECT_NE(plan.diagnostic.find("persistent state (1048576 bytes)"), std::string::npos)
      << plan.diagnostic;

  // A huge pinned value dominates instead.
  RematProblem pinnedBig = chain(8);
  pinnedBig.ops[3].pinned = true;
  pinnedBig.ops[3].bytes = 1 << 24;
  RematPlan big = planRemat(pinnedBig, 1000);
  EXPECT_FALSE(big.feasible);
  ASSERT_GE(big.simulation.atPeak.size(), 2u);
  EXPECT_EQ(big.simulation.atPeak[1].name, "a3");
  EXPECT_NE(big.diagnostic.find("a3 (16777216 bytes)"), std::string::npos) << big.diagnostic;
}

TEST(RematPlanner, MatmulsAreRecomputedOnlyWhenNeeded) {
  // x -> matmul -> gelu -> loss; a 200-byte backward temporary comes before the
  // backward reads matmul and gelu. Recomputing either one of them lowers the
  // peak by 100 bytes: the gelu is the cheap one.
  RematProblem problem;
  addOp(problem, "x", 100, 1, {});
  addOp(problem, "matmul", 100, 1000, {0}, /*isMatmul=*/true);
  addOp(problem, "gelu", 100, 10, {1});
  addOp(problem, "loss", 1, 1, {2});
  problem.numForward = 4;
  addOp(problem, "temporary", 200, 1, {3});
  addOp(problem, "g_gelu", 1, 1, {2});
  addOp(problem, "g_matmul", 1, 1, {1, 5});
  int64_t keepAll = simulateRemat(problem, std::vector<bool>(7)).peakBytes;
  EXPECT_EQ(keepAll, 401);
  // Recomputing the matmul alone would also fit.
  std::vector<bool> matmulOnly(7, false);
  matmulOnly[0] = matmulOnly[1] = true;
  EXPECT_EQ(simulateRemat(problem, matmulOnly).peakBytes, 301);
  RematPlan plan = planRemat(problem, 301);
  ASSERT_TRUE(plan.feasible);
  EXPECT_TRUE(plan.recompute[2]);
  EXPECT_FALSE(plan.recompute[1]);
  EXPECT_EQ(plan.simulation.matmulCost, 0);
  EXPECT_EQ(plan.simulation.extraCost, 10);
  // Below that, the matmul has to go too.
  RematPlan tight = planRemat(problem, 300);
  if (tight.feasible)
    EXPECT_GT(tight.simulation.matmulCost, 0);
}

TEST(RematPlanner, DropoutMayBeRecomputed) {
  RematProblem problem = chain(8);
  for (int i = 0; i < 8; ++i)
    problem.ops[i].isRandom = true;
  int64_t keepAll = simulateRemat(problem, std::vector<bool>(16)).peakBytes;
  RematPlan plan = planRemat(problem, keepAll - 2000);
  ASSERT_TRUE(plan.feasible);
  EXPECT_GT(plan.simulation.extraCost, 0);
}

/// A GPT-like step: an embedding, `layers` blocks of 30 forward ops (matmuls,
/// elementwise, dropout, residual adds) with two backward ops per forward op,
/// and a head.
RematProblem gptLike(int layers) {
  RematProblem problem;
  const int64_t activation = 768 * 1024 * 2;
  int64_t input = addOp(problem, "embedding", activation, 1e6, {});
  std::vector<int64_t> layerOps;
  for (int layer = 0; layer < layers; ++layer) {
    int64_t layerInput = problem.ops.size() - 1;
    for (int position = 0; position < 30; ++position) {
      int64_t previous = problem.ops.size() - 1;
      std::vector<int64_t> operands = {previous};
      bool isMatmul = position % 5 == 1;
      bool isRandom = position % 5 == 3;
      if (position % 10 == 9)
        operands.push_back(layerInput); // residual
      int64_t bytes = position % 10 == 6 ? 4 * activation : activation;
      double cost = isMatmul ? 2.0 * 768 * 768 * 1024 * (bytes / activation) : 1024.0 * 768;
      int64_t id = addOp(problem, "l" + std::to_string(layer) + "." + std::to_string(position),
                         bytes, cost, operands, isMatmul);
      problem.ops[id].isRandom = isRandom;
      problem.ops[id].blockId = layer;
      problem.ops[id].positionInBlock = position;
      layerOps.push_back(id);
    }
  }
  int64_t logits =
      addOp(problem, "logits", 8 * activation, 1e9, {int64_t(problem.ops.size()) - 1}, true);
  problem.numForward = problem.ops.size();
  int64_t grad = addOp(problem, "g_logits", 8 * activation, 1e6, {logits});
  for (auto it = layerOps.rbegin(); it != layerOps.rend(); ++it) {
    const RematOp &op = problem.ops[*it];
    grad = addOp(problem, "g_" + op.name, op.bytes, op.cost, {grad, *it});
    addOp(problem, "gw_" + op.name, 0, op.cost, {grad, op.operands.front()});
  }
  addOp(problem, "g_embedding", activation, 1e6, {grad, input});
  problem.persistentBytes = int64_t(124e6) * 16;
  return problem;
}

TEST(RematPlanner, GptSizedStepPlansQuickly) {
  RematProblem problem = gptLike(12);
  std::printf("GPT-like step: %zu ops\n", problem.ops.size());
  int64_t keepAll = simulateRemat(problem, std::vector<bool>(problem.ops.size())).peakBytes;
  auto start = std::chrono::steady_clock::now();
  RematFrontier frontier = rematFrontier(problem);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int64_t lowest = frontier.simulations.front().peakBytes;
  std::printf("planned in %.3f s: %zu frontier plans; activation peak %.1f MB "
              "(keep all) down to "
              "%.1f MB\n",
              seconds, frontier.plans.size(), (keepAll - problem.persistentBytes) / 1e6,
              (lowest - problem.persistentBytes) / 1e6);
  int64_t half = problem.persistentBytes + (keepAll - problem.persistentBytes) / 2;
  RematPlan plan = planRemat(problem, frontier, half);
  ASSERT_TRUE(plan.feasible);
  std::printf("half the activations: extra %.3g FLOPs, %.3g of it in matmuls\n",
              plan.simulation.extraCost, plan.simulation.matmulCost);
  EXPECT_LE(plan.simulation.peakBytes, half);
}

} // namespace
