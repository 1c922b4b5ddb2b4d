//===- LossScaleTest.cpp - the loss-scale state machine against GradScaler ===//
//
// The expected scales are written out by hand from torch.amp.GradScaler's documented rules
// (initial 2^16; x0.5 and skip on any inf/NaN, resetting the count; x2 after growth_interval
// consecutive finite steps), not recomputed with the code under test.
//
//===----------------------------------------------------------------------===//

#include "runtime/numerics/LossScale.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

using namespace ampc::numerics;

namespace {

/// Runs the pattern ('F' finite, 'I' overflow) and returns the scale after each step and
/// whether each step was applied.
std::pair<std::vector<float>, std::string> run(const LossScaleConfig &config,
                                               const std::string &pattern) {
  LossScaleState state = initialLossScale(config);
  std::vector<float> scales;
  std::string applied;
  for (char step : pattern) {
    LossScaleUpdate update = updateLossScale(state, config, step == 'I');
    scales.push_back(state.scale);
    applied += update.stepApplied ? 'F' : 'I';
  }
  return {scales, applied};
}

TEST(LossScale, StartsAtTwoToTheSixteen) {
  LossScaleState state = initialLossScale(LossScaleConfig());
  EXPECT_EQ(state.scale, 65536.0f);
  EXPECT_EQ(state.growthTracker, 0);
}

TEST(LossScale, TrajectoryWithShortGrowthInterval) {
  LossScaleConfig config;
  config.growthInterval = 3;
  //               step: 1      2      3       4      5      6      7      8      9      10
  const std::string pattern = "FFFIFFIFFF";
  std::vector<float> expected = {65536, 65536, 131072, 65536, 65536,
                                 65536, 32768, 32768,  32768, 65536};
  auto [scales, applied] = run(config, pattern);
  EXPECT_EQ(scales, expected);
  // Exactly the overflowing steps are skipped.
  EXPECT_EQ(applied, pattern);
}

TEST(LossScale, ConsecutiveOverflowsHalveEachTime) {
  auto [scales, applied] = run(LossScaleConfig(), "IIIF");
  EXPECT_EQ(scales, (std::vector<float>{32768, 16384, 8192, 8192}));
  EXPECT_EQ(applied, "IIIF");
}

TEST(LossScale, GrowsAfterTwoThousandFiniteSteps) {
  LossScaleConfig config;
  LossScaleState state = initialLossScale(config);
  for (int step = 1; step < 2000; ++step)
    updateLossScale(state, config, false);
  EXPECT_EQ(state.scale, 65536.0f);
  EXPECT_EQ(state.growthTracker, 1999);
  updateLossScale(state, config, false);
  EXPECT_EQ(state.scale, 131072.0f);
  EXPECT_EQ(state.growthTracker, 0);
}

TEST(LossScale, OverflowResetsTheGrowthCount) {
  LossScaleConfig config;
  LossScaleState state = initialLossScale(config);
  for (int step = 0; step < 1999; ++step)
    updateLossScale(state, config, false);
  updateLossScale(state, config, true); // step 2000 overflows: no growth, halve
  EXPECT_EQ(state.scale, 32768.0f);
  for (int step = 0; step < 1999; ++step)
    updateLossScale(state, config, false);
  EXPECT_EQ(state.scale, 32768.0f); // 1999 finite steps since the reset
  updateLossScale(state, config, false);
  EXPECT_EQ(state.scale, 65536.0f);
}

TEST(LossScale, GrowthThatWouldOverflowKeepsTheScale) {
  LossScaleConfig config;
  config.growthInterval = 1;
  LossScaleState state{std::ldexp(1.0f, 127), 0, 0}; // 2^127 * 2 = inf in f32
  LossScaleUpdate update = updateLossScale(state, config, false);
  EXPECT_TRUE(update.stepApplied);
  EXPECT_EQ(state.scale, std::ldexp(1.0f, 127));
  EXPECT_EQ(state.growthTracker, 0);
}

TEST(LossScale, FloorStopsTheBackoffAndIsReportedOnce) {
  LossScaleConfig config;
  config.initialScale = 4096;
  config.minScale = 1024;
  LossScaleState state = initialLossScale(config);
  std::vector<float> scales;
  std::vector<bool> warned;
  for (int step = 0; step < 4; ++step) {
    LossScaleUpdate update = updateLossScale(state, config, true);
    EXPECT_FALSE(update.stepApplied);
    scales.push_back(state.scale);
    warned.push_back(update.floorReached);
  }
  EXPECT_EQ(scales, (std::vector<float>{2048, 1024, 1024, 1024}));
  // 2048 * 0.5 = 1024 is not below the floor; the third backoff is the first it stops.
  EXPECT_EQ(warned, (std::vector<bool>{false, false, true, false}));
  EXPECT_EQ(state.floorHits, 2);
}

TEST(LossScale, WithoutAFloorTheScaleKeepsFalling) {
  LossScaleConfig config;
  config.initialScale = 1;
  LossScaleState state = initialLossScale(config);
  for (int step = 0; step < 10; ++step)
    EXPECT_FALSE(updateLossScale(state, config, true).floorReached);
  EXPECT_EQ(state.scale, 1.0f / 1024);
}

TEST(LossScale, FiniteCheck) {
  EXPECT_TRUE(isFiniteScale(65536.0f));
  EXPECT_TRUE(isFiniteScale(FLT_MAX));
  EXPECT_FALSE(isFiniteScale(std::numeric_limits<float>::infinity()));
  EXPECT_FALSE(isFiniteScale(std::numeric_limits<float>::quiet_NaN()));
}

} // namespace
