//===- MemoryPlannerTest.cpp - the arena planner on hand-built lifetimes --===//

#include "passes/MemoryPlanner.h"

#include <gtest/gtest.h>

#include <random>

using namespace ampc::graph;

namespace {

TEST(MemoryPlanner, ChainReusesTwoSlots) {
  // a -> b -> c -> d: each value is read only by the next op, so two slots suffice.
  std::vector<BufferLifetime> values = {{256, 0, 1}, {256, 1, 2}, {256, 2, 3}, {256, 3, 4}};
  MemoryPlan plan = planMemory(values, 256);
  EXPECT_EQ(plan.arenaBytes, 512);
  EXPECT_EQ(plan.peakLiveBytes, 512);
  EXPECT_EQ(plan.offsets, (std::vector<int64_t>{0, 256, 0, 256}));
  EXPECT_TRUE(isValidPlan(values, plan, 256));
}

TEST(MemoryPlanner, DisjointLifetimesShareOffsetZero) {
  std::vector<BufferLifetime> values = {{1000, 0, 0}, {3000, 1, 1}, {2000, 2, 2}};
  MemoryPlan plan = planMemory(values, 256);
  EXPECT_EQ(plan.offsets, (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(plan.arenaBytes, 3072); // 3000 aligned up to 256
}

TEST(MemoryPlanner, SizesAndOffsetsAreAligned) {
  std::vector<BufferLifetime> values = {{1, 0, 2}, {65, 0, 2}, {3, 1, 2}};
  MemoryPlan plan = planMemory(values, 64);
  for (int64_t offset : plan.offsets)
    EXPECT_EQ(offset % 64, 0);
  EXPECT_EQ(plan.arenaBytes, 64 + 128 + 64);
  EXPECT_TRUE(isValidPlan(values, plan, 64));
}

TEST(MemoryPlanner, BestFitTakesTheSmallestGapThatFits) {
  // Live throughout: x at [0, 512), gap, y at [768, 1024), gap, z at [1536, 2048) -- built by
  // placing large values first. Then a 256-byte value alive at the same time goes into the
  // 256-byte gap at 512, not the 512-byte gap at 1024.
  std::vector<BufferLifetime> values = {
      {512, 0, 10}, // x
      {256, 0, 0},  // filler that ends before the others start
      {512, 0, 10}, // y
      {512, 0, 10}, // z
  };
  MemoryPlan plan = planMemory(values, 256);
  EXPECT_TRUE(isValidPlan(values, plan, 256));
  // Largest first: x, y, z at 0, 512, 1024; the filler (alive at op 0 too) goes on top.
  EXPECT_EQ(plan.offsets[0], 0);
  EXPECT_EQ(plan.offsets[2], 512);
  EXPECT_EQ(plan.offsets[3], 1024);
  EXPECT_EQ(plan.offsets[1], 1536);

  // Two holes open up when short-lived values end: 512 bytes low in the arena, 256 bytes
  // higher up. A late 256-byte value takes the 256-byte hole (best fit), where first fit would
  // have taken the lower, larger one.
  std::vector<BufferLifetime> holes = {
      {512, 0, 10}, // L1: 0
      {512, 0, 1},  // short: 512, ends at op 1
      {512, 0, 10}, // L2: 1024
      {256, 0, 1},  // short: 1536, ends at op 1
      {256, 0, 10}, // L3: 1792
      {256, 5, 10}, // late
  };
  MemoryPlan holePlan = planMemory(holes, 256);
  ASSERT_TRUE(isValidPlan(holes, holePlan, 256));
  EXPECT_EQ(holePlan.offsets, (std::vector<int64_t>{0, 512, 1024, 1536, 1792, 1536}));
  EXPECT_EQ(holePlan.arenaBytes, 2048);
}

TEST(MemoryPlanner, ValidityCheckRejectsOverlap) {
  std::vector<BufferLifetime> values = {{256, 0, 2}, {256, 1, 3}};
  MemoryPlan plan;
  plan.offsets = {0, 0};
  plan.arenaBytes = 256;
  EXPECT_FALSE(isValidPlan(values, plan, 256));
  plan.offsets = {0, 128};
  plan.arenaBytes = 512;
  EXPECT_FALSE(isValidPlan(values, plan, 256)); // misaligned and overlapping
}

TEST(MemoryPlanner, RandomLifetimesGiveValidPlansAboveThePeak) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    int n = 1 + static_cast<int>(rng() % 60);
    std::vector<BufferLifetime> values;
    for (int i = 0; i < n; ++i) {
      int64_t first = rng() % 40;
      values.push_back({int64_t(1 + rng() % 5000), first, first + int64_t(rng() % 12)});
    }
    MemoryPlan plan = planMemory(values, 256);
    ASSERT_TRUE(isValidPlan(values, plan, 256)) << "trial " << trial;
    EXPECT_GE(plan.arenaBytes, plan.peakLiveBytes);
    // Greedy best fit on these short-lived values stays close to the peak.
    EXPECT_LE(plan.arenaBytes, 2 * plan.peakLiveBytes) << "trial " << trial;
    // The same input gives the same plan.
    EXPECT_EQ(planMemory(values, 256).offsets, plan.offsets);
  }
}

TEST(MemoryPlanner, TrainingShapedLifetimesMeetThePeak) {
  // A forward pass whose activations all live until their mirror-image backward op: the live
  // set grows to the middle and shrinks again, and the arena equals the peak.
  std::vector<BufferLifetime> values;
  const int layers = 12;
  for (int i = 0; i < layers; ++i)
    values.push_back({4096, i, 2 * layers - i});
  for (int i = 0; i < layers; ++i)
    values.push_back({4096, layers + i, layers + i + 1}); // backward temporaries
  MemoryPlan plan = planMemory(values, 256);
  EXPECT_TRUE(isValidPlan(values, plan, 256));
  EXPECT_EQ(plan.arenaBytes, plan.peakLiveBytes);
  EXPECT_EQ(plan.peakLiveBytes, (layers + 2) * 4096);
}

} // namespace
