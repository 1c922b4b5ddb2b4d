//===- CudaProfileTest.cpp - the --profile report from made-up group times ===//
//
// The report's arithmetic needs no GPU: a hand-built device program, group
// times as cuda::Executor::groupTimes returns them, and the rows, costs and
// text that come out.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Profile.h"

#include <gtest/gtest.h>

using namespace ampc;
using namespace ampc::cuda;

namespace {

plan::Instruction at(const std::string &location) {
  plan::Instruction instruction{};
  instruction.op = plan::OpCode::Add;
  instruction.location = location;
  return instruction;
}

/// Two layers' matmul (same source line, two call sites), one elementwise
/// group, and an optimizer group; two micro steps per optimizer step.
plan::Plan profiledPlan() {
  plan::Plan plan;
  plan.modelName = "m";
  plan.accumulationSteps = 2;
  plan.buffers = {{"a", plan::DType::BF16, {64, 32}, plan::BufferRole::Temporary},
                  {"b", plan::DType::BF16, {32, 16}, plan::BufferRole::Parameter},
                  {"d", plan::DType::F32, {64, 16}, plan::BufferRole::Temporary},
                  {"e", plan::DType::F32, {64, 16}, plan::BufferRole::Temporary}};
  // Both forms a call site takes in a location: "<- 20:1" and "(called from ...)".
  plan.instructions = {at("m.mlir:5:3 <- 20:1"), at("m.mlir:5:3 (called from m.mlir:21:1)"),
                       at("m.mlir:9:1")};
  plan.optimizerInstructions = {at("m.mlir:30:2")};
  plan::MatmulStep matmul;
  matmul.a = 0;
  matmul.b = 1;
  matmul.d = 2;
  matmul.m = 64;
  matmul.n = 16;
  matmul.k = 32;
  plan::DeviceGroup layer0{"matmul", {0}, {matmul}};
  plan::DeviceGroup layer1{"matmul", {1}, {matmul}};
  plan::DeviceArgument in, out;
  in.buffer = 2;
  out.buffer = 3;
  out.access = plan::Access::Write;
  plan::LaunchStep launch;
  launch.args = {in, out};
  plan::DeviceGroup elementwise{"elementwise", {2}, {launch}};
  plan.device.microStep.groups = {layer0, layer1, elementwise};
  plan::DeviceGroup update{"optimizer", {0}, {plan::MemsetStep{3}}};
  plan.device.optimizerStep.groups = {update};
  return plan;
}

TEST(CudaProfile, GroupCostCountsReadsAndWritesAndMatmulFlops) {
  const plan::Plan plan = profiledPlan();
  const GroupCost matmul = groupCost(plan, plan.device.microStep.groups[0]);
  EXPECT_EQ(matmul.bytes, 64u * 32 * 2 + 32 * 16 * 2 + 64 * 16 * 4);
  EXPECT_DOUBLE_EQ(matmul.flops, 2.0 * 64 * 16 * 32);
  const GroupCost elementwise = groupCost(plan, plan.device.microStep.groups[2]);
  EXPECT_EQ(elementwise.bytes, 2u * 64 * 16 * 4);

  // A buffer read and written counts twice: an in-place update (read-write argument) and a
  // matmul adding into D (C = D, beta 1) move it both ways, as a copy's bandwidth counts.
  plan::DeviceGroup inPlace = plan.device.microStep.groups[2];
  std::get<plan::LaunchStep>(inPlace.steps[0]).args[1].access = plan::Access::ReadWrite;
  EXPECT_EQ(groupCost(plan, inPlace).bytes, 3u * 64 * 16 * 4);
  plan::DeviceGroup accumulating = plan.device.microStep.groups[0];
  auto &product = std::get<plan::MatmulStep>(accumulating.steps[0]);
  product.c = product.d;
  product.beta = 1.0f;
  EXPECT_EQ(groupCost(plan, accumulating).bytes, 64u * 32 * 2 + 32 * 16 * 2 + 2 * 64 * 16 * 4);
  EXPECT_EQ(elementwise.flops, 0);

  plan::AttentionStep attention;
  attention.batch = 2;
  attention.heads = 3;
  attention.queries = attention.keys = 128;
  attention.headDim = 64;
  attention.causal = true;
  plan::DeviceGroup forward{"attention", {}, {attention}};
  EXPECT_DOUBLE_EQ(groupCost(plan, forward).flops, 4.0 * 2 * 3 * 128 * 128 * 64 / 2);
  attention.pass = plan::AttentionPass::Backward;
  plan::DeviceGroup backward{"attention", {}, {attention}};
  EXPECT_DOUBLE_EQ(groupCost(plan, backward).flops, 2.5 * 4.0 * 2 * 3 * 128 * 128 * 64 / 2);
}

TEST(CudaProfile, RowsSumLayersPerOptimizerStep) {
  const plan::Plan plan = profiledPlan();
  // Four runs each: micro step groups ran 4 times (2 optimizer steps).
  const std::vector<GroupTime> times = {{PlanFunction::MicroStep, 0, 4.0, 4},
                                        {PlanFunction::MicroStep, 1, 6.0, 4},
                                        {PlanFunction::MicroStep, 2, 1.0, 4},
                                        {PlanFunction::OptimizerStep, 0, 3.0, 2}};
  const std::vector<ProfileRow> rows = profileRows(plan, times);
  ASSERT_EQ(rows.size(), 3u);
  // The two layers: (1 + 1.5) ms per run, two runs per optimizer step.
  EXPECT_EQ(rows[0].kind, "matmul");
  EXPECT_EQ(rows[0].instances, 2u);
  EXPECT_DOUBLE_EQ(rows[0].milliseconds, 5.0);
  // A matmul row names its problem: m x n x k, the types, and the epilogue if any.
  EXPECT_EQ(rows[0].locations, "[64x16x32 bf16->f32] m.mlir:5:3");
  EXPECT_DOUBLE_EQ(rows[0].flops, 4 * 2.0 * 64 * 16 * 32);
  EXPECT_EQ(rows[1].function, PlanFunction::OptimizerStep);
  EXPECT_DOUBLE_EQ(rows[1].milliseconds, 1.5);
  EXPECT_DOUBLE_EQ(rows[2].milliseconds, 0.5);
  EXPECT_EQ(rows[2].bytes, 2u * 2 * 64 * 16 * 4);

  const std::string text = formatProfile(plan, rows, 2, 2, 6.5);
  EXPECT_NE(text.find("profile of @m over 2 optimizer steps"), std::string::npos) << text;
  EXPECT_NE(text.find("7.00 ms of group time per step"), std::string::npos) << text;
  EXPECT_NE(text.find("without profiling: 6.50 ms"), std::string::npos) << text;
  EXPECT_NE(text.find("m.mlir:5:3"), std::string::npos) << text;
  // --profile-top 2: the elementwise row is left out of the table but not
  // out of the totals.
  EXPECT_EQ(text.find("m.mlir:9:1"), std::string::npos) << text;
  EXPECT_NE(text.find("matmuls"), std::string::npos) << text;
  EXPECT_NE(text.find("memory-bound groups     2 groups"), std::string::npos) << text;
  EXPECT_EQ(text.find("floor"), std::string::npos) << text;

  // With the measured copy bandwidth, memory-bound rows say their share of it: the elementwise
  // group moves 16384 bytes in 0.5 ms, a quarter of a 131.072 MB/s floor; the matmul row has no
  // share.
  const std::string floored = formatProfile(plan, rows, 3, 2, 6.5, 131.072e6);
  EXPECT_NE(floored.find("bandwidth floor: a device-to-device copy on this GPU moves 0.00 TB/s"),
            std::string::npos)
      << floored;
  EXPECT_NE(floored.find("%floor"), std::string::npos) << floored;
  EXPECT_NE(floored.find("   25% "), std::string::npos) << floored;
  EXPECT_NE(floored.find("     - "), std::string::npos) << floored;
  EXPECT_NE(floored.find("of the floor)"), std::string::npos) << floored;
}

// The time model (runtime/plan/StepTime.h) on hand-built groups: a memory-bound group takes its
// bytes at its kind's share of the copy bandwidth plus the launch; a matmul its FLOPs at its
// kind's throughput plus the launch, or its bytes at the full copy bandwidth when that is
// longer; the floor is the larger of bytes at the copy bandwidth and FLOPs at the tensor peak.
TEST(CudaProfile, TimeModelPredictsFromBytesAndFlops) {
  const plan::Plan plan = profiledPlan();
  const plan::GpuModel *h200 = plan::findGpuModel("h200");
  ASSERT_TRUE(h200);
  EXPECT_EQ(plan::findGpuModel("a100"), nullptr);
  EXPECT_LT(plan::findGpuModel("h100")->copyBandwidth, h200->copyBandwidth);

  const plan::DeviceGroup &elementwise = plan.device.microStep.groups[2];
  const plan::PredictedTime moved = plan::predictGroupTime(plan, elementwise, *h200);
  const double bytes = 2.0 * 64 * 16 * 4;
  EXPECT_DOUBLE_EQ(moved.seconds, h200->launchSeconds +
                                      bytes / (h200->efficiency.at("elementwise") *
                                               h200->copyBandwidth));
  EXPECT_DOUBLE_EQ(moved.floorSeconds, bytes / h200->copyBandwidth);
  EXPECT_STREQ(moved.bound, "launch"); // 8 KB: the launch dominates

  // A large matmul is compute-bound at its kind's throughput.
  plan::Plan large = plan;
  large.buffers[0].shape = {4096, 4096};
  large.buffers[1].shape = {4096, 4096};
  large.buffers[2].shape = {4096, 4096};
  plan::DeviceGroup matmul = large.device.microStep.groups[0];
  auto &product = std::get<plan::MatmulStep>(matmul.steps[0]);
  product.m = product.n = product.k = 4096;
  const double flops = 2.0 * 4096 * 4096 * 4096;
  const plan::PredictedTime computed = plan::predictGroupTime(large, matmul, *h200);
  EXPECT_DOUBLE_EQ(computed.seconds,
                   h200->launchSeconds + flops / h200->matmulThroughput.at("matmul"));
  EXPECT_DOUBLE_EQ(computed.floorSeconds, flops / h200->tensorPeak);
  EXPECT_STREQ(computed.bound, "compute");
  // The same matmul as a bias gradient runs at that kind's (lower) throughput.
  matmul.kind = "bias_grad";
  EXPECT_GT(plan::predictGroupTime(large, matmul, *h200).seconds, computed.seconds);
  // A kind the model has no figure for takes the default efficiency.
  plan::DeviceGroup copy = elementwise;
  copy.kind = "copy";
  EXPECT_DOUBLE_EQ(plan::predictGroupTime(plan, copy, *h200).seconds,
                   h200->launchSeconds + bytes / (h200->defaultEfficiency * h200->copyBandwidth));
}

// On a GPU the model knows, --profile ends with its prediction beside the measured time, per
// kind; on another GPU it says nothing.
TEST(CudaProfile, ProfileComparesTheTimeModelPerKind) {
  const plan::Plan plan = profiledPlan();
  const std::vector<GroupTime> times = {{PlanFunction::MicroStep, 0, 4.0, 4},
                                        {PlanFunction::MicroStep, 1, 6.0, 4},
                                        {PlanFunction::MicroStep, 2, 1.0, 4},
                                        {PlanFunction::OptimizerStep, 0, 3.0, 2}};
  const std::string text = formatTimeModel(plan, times, "NVIDIA H200");
  EXPECT_NE(text.find("time model (h200, ampc report time): "), std::string::npos) << text;
  EXPECT_NE(text.find("predicted for 7.00 ms measured"), std::string::npos) << text;
  EXPECT_NE(text.find("  matmul             measured     5.000 ms, model"), std::string::npos)
      << text;
  EXPECT_EQ(formatTimeModel(plan, times, "NVIDIA A100-SXM4-80GB"), "");
}

TEST(CudaProfile, MatmulChoicesListTheSlowestProblemFirstWithTheGain) {
  EXPECT_EQ(formatMatmulChoices({}), "");
  MatmulChoice small{"matmul m=64 n=64 k=64 bf16 x bf16 -> bf16", 3, 0, 0.010, 0.010};
  MatmulChoice large{"matmul m=16384 n=3072 k=768 bf16 x bf16 -> bf16", 8, 2, 0.200, 0.150};
  const std::string text = formatMatmulChoices({small, large});
  const size_t first = text.find("m=16384"), second = text.find("m=64 ");
  ASSERT_NE(first, std::string::npos) << text;
  ASSERT_NE(second, std::string::npos) << text;
  EXPECT_LT(first, second) << text;
  // 0.2 -> 0.15 ms is 25% less; the chosen was the third of 8 candidates.
  EXPECT_NE(text.find("    0.2000     0.1500   25.0%   3/8   matmul m=16384"), std::string::npos)
      << text;
  EXPECT_NE(text.find("    0.2100     0.1600   23.8%  total of 2 problems"), std::string::npos)
      << text;
}

} // namespace
