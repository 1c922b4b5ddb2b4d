//===- CudaExecutorTest.cpp - the CUDA executor's host-side logic, no GPU -===//
//
// What cuda::Executor computes before anything reaches a GPU: kernel
// arguments resolved against buffer addresses (buffers, literals, the
// per-run scalars, scratch slices, tables, the error record), the device
// tables' byte layout (docs/plan-format.md), the buffers a step group reads
// and writes, the memory a plan needs, and the error for a plan without GPU
// code. The GPU runs are in test/unit/compiler/CudaExecutorGpuTest.cpp.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Executor.h"

#include <gtest/gtest.h>

#include <cstring>

using namespace ampc;
using namespace ampc::cuda;

namespace {

plan::DeviceArgument argument(plan::ArgKind kind, const std::string &name) {
  plan::DeviceArgument arg;
  arg.kind = kind;
  arg.name = name;
  return arg;
}

TEST(CudaExecutorArguments, ResolvesEveryKind) {
  plan::LaunchStep launch;
  plan::DeviceArgument in = argument(plan::ArgKind::Buffer, "in0");
  in.buffer = 1;
  plan::DeviceArgument n = argument(plan::ArgKind::Int64, "n");
  n.value = -7;
  plan::DeviceArgument scratch = argument(plan::ArgKind::Scratch, "partial");
  scratch.value = 512;
  scratch.bytes = 64;
  launch.args = {in,
                 n,
                 argument(plan::ArgKind::RunScalars, "runScalars"),
                 scratch,
                 argument(plan::ArgKind::Table, "table"),
                 argument(plan::ArgKind::ErrorRecord, "errors")};
  AddressMap map;
  map.buffers = {0, 0x10000, 0x20000};
  map.scratch = 0x40000;
  map.errorRecord = 0x50000;
  map.runScalars = 0x58000;
  map.tables = {0x60000, 0x70000};
  size_t nextTable = 1;
  std::vector<ResolvedArgument> resolved = resolveArguments(launch, map, nextTable);
  ASSERT_EQ(resolved.size(), 6u);
  EXPECT_EQ(resolved[0].value, 0x10000u);
  EXPECT_EQ(static_cast<int64_t>(resolved[1].value), -7);
  EXPECT_EQ(resolved[2].value, 0x58000u);
  EXPECT_EQ(resolved[3].value, 0x40000u + 512);
  EXPECT_EQ(resolved[4].value, 0x70000u);
  EXPECT_EQ(nextTable, 2u);
  EXPECT_EQ(resolved[5].value, 0x50000u);
}

TEST(CudaExecutorArguments, PerRunValuesByValueAreAnError) {
  // A captured graph replays its arguments: the seed, the step and the total steps must come
  // from the run-scalar block.
  for (plan::ArgKind kind : {plan::ArgKind::Seed, plan::ArgKind::Step, plan::ArgKind::TotalSteps}) {
    plan::LaunchStep launch;
    launch.args = {argument(kind, "value")};
    size_t nextTable = 0;
    try {
      resolveArguments(launch, AddressMap{}, nextTable);
      ADD_FAILURE() << plan::argKindName(kind) << " was resolved";
    } catch (const CudaError &error) {
      EXPECT_EQ(error.kind(), CudaErrorKind::InvalidArgument);
      EXPECT_NE(std::string(error.what())
                    .find("argument 'value' passes the " + std::string(plan::argKindName(kind)) +
                          " by value"),
                std::string::npos)
          << error.what();
    }
  }
}

TEST(CudaExecutorArguments, BufferWithoutMemoryIsAnError) {
  plan::LaunchStep launch;
  plan::DeviceArgument fused = argument(plan::ArgKind::Buffer, "in0");
  fused.buffer = 0;
  launch.args = {fused};
  AddressMap map;
  map.buffers = {0};
  size_t nextTable = 0;
  try {
    resolveArguments(launch, map, nextTable);
    FAIL() << "expected an error";
  } catch (const CudaError &error) {
    EXPECT_EQ(error.kind(), CudaErrorKind::InvalidArgument);
    EXPECT_EQ(std::string(error.what()),
              "argument 'in0' names buffer 0, which has no device memory");
  }
}

TEST(CudaExecutorTables, OptimizerAndNormLayouts) {
  plan::Plan plan;
  plan.buffers = {{"w", plan::DType::F32, {4}, plan::BufferRole::Parameter},
                  {"g", plan::DType::F32, {4}, plan::BufferRole::State},
                  {"m", plan::DType::F32, {4}, plan::BufferRole::State},
                  {"v", plan::DType::F32, {4}, plan::BufferRole::State},
                  {"w16", plan::DType::F16, {4}, plan::BufferRole::ParameterCopy}};
  const std::vector<uint64_t> addresses = {0x100, 0x200, 0x300, 0x400, 0x500};
  plan::DeviceTable optimizer;
  plan::TableEntry entry;
  entry.param = 0;
  entry.grad = 1;
  entry.firstMoment = 2;
  entry.secondMoment = 3;
  entry.copy = 4;
  entry.elements = 4;
  entry.firstBlock = 9;
  entry.beta1 = 0.9f;
  entry.momentum = 0.5f;
  optimizer.entries = {entry};
  std::vector<uint8_t> bytes = encodeTable(plan, optimizer, addresses);
  ASSERT_EQ(bytes.size(), 88u);
  auto u64 = [&](size_t at) {
    uint64_t value;
    std::memcpy(&value, bytes.data() + at, 8);
    return value;
  };
  EXPECT_EQ(u64(0), 0x100u);
  EXPECT_EQ(u64(8), 0x200u);
  EXPECT_EQ(u64(16), 0x300u);
  EXPECT_EQ(u64(24), 0x400u);
  EXPECT_EQ(u64(32), 0x500u);
  int32_t copyType;
  std::memcpy(&copyType, bytes.data() + 40, 4);
  EXPECT_EQ(copyType, 2); // f16
  EXPECT_EQ(u64(48), 4u);
  EXPECT_EQ(u64(56), 9u);
  float beta1, momentum;
  std::memcpy(&beta1, bytes.data() + 64, 4);
  std::memcpy(&momentum, bytes.data() + 84, 4);
  EXPECT_EQ(beta1, 0.9f);
  EXPECT_EQ(momentum, 0.5f);

  // SGD: no second moment and no copy are null pointers.
  optimizer.entries[0].secondMoment = plan::kNoBuffer;
  optimizer.entries[0].copy = plan::kNoBuffer;
  bytes = encodeTable(plan, optimizer, addresses);
  EXPECT_EQ(u64(24), 0u);
  EXPECT_EQ(u64(32), 0u);
  std::memcpy(&copyType, bytes.data() + 40, 4);
  EXPECT_EQ(copyType, 0);

  plan::DeviceTable norm;
  norm.kind = plan::TableKind::Norm;
  plan::TableEntry a, b;
  a.grad = 1;
  a.elements = 4;
  a.firstBlock = 0;
  b.grad = 3;
  b.elements = 4;
  b.firstBlock = 1;
  norm.entries = {a, b};
  bytes = encodeTable(plan, norm, addresses);
  ASSERT_EQ(bytes.size(), 48u);
  EXPECT_EQ(u64(0), 0x200u);
  EXPECT_EQ(u64(8), 4u);
  EXPECT_EQ(u64(24), 0x400u);
  EXPECT_EQ(u64(40), 1u);
}

TEST(CudaExecutorGroups, ReadAndWrittenBuffers) {
  plan::DeviceGroup group;
  plan::MemsetStep memset;
  memset.buffer = 7;
  plan::LaunchStep launch;
  plan::DeviceArgument in = argument(plan::ArgKind::Buffer, "in0");
  in.buffer = 3;
  plan::DeviceArgument inout = argument(plan::ArgKind::Buffer, "acc");
  inout.buffer = 4;
  inout.access = plan::Access::ReadWrite;
  plan::DeviceArgument out = argument(plan::ArgKind::Buffer, "out0");
  out.buffer = 7;
  out.access = plan::Access::Write;
  launch.args = {in, inout, out};
  plan::MatmulStep matmul;
  matmul.a = 3;
  matmul.b = 5;
  matmul.d = 8;
  matmul.bias = 9;
  matmul.epilogue = plan::Epilogue::GeluAuxBias;
  matmul.aux = 10;
  group.steps = {memset, launch, matmul};
  EXPECT_EQ(writtenBuffers(group), (std::vector<uint32_t>{7, 4, 8, 10}));
  EXPECT_EQ(readBuffers(group), (std::vector<uint32_t>{3, 4, 5, 9}));
}

TEST(CudaExecutorGroups, TablesNameTheBuffersTheyTouch) {
  // The multi-tensor optimizer reads and writes through its table: the
  // parameter, gradient (zeroed) and moments, and writes the copy; the
  // global norm only reads gradients.
  plan::TableEntry first, second;
  first.param = 1;
  first.grad = 2;
  first.firstMoment = 3;
  first.secondMoment = 4;
  first.copy = 5;
  second.param = 6;
  second.grad = 7;
  second.firstMoment = 8; // SGD: no second moment, no copy
  plan::DeviceArgument optimizer = argument(plan::ArgKind::Table, "table");
  optimizer.table.kind = plan::TableKind::Optimizer;
  optimizer.table.entries = {first, second};
  plan::LaunchStep update;
  update.args = {optimizer};
  plan::DeviceGroup group;
  group.steps = {update};
  EXPECT_EQ(writtenBuffers(group), (std::vector<uint32_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(readBuffers(group), (std::vector<uint32_t>{1, 2, 3, 4, 6, 7, 8}));

  plan::DeviceArgument norm = argument(plan::ArgKind::Table, "table");
  norm.table.kind = plan::TableKind::Norm;
  plan::TableEntry gradient;
  gradient.grad = 2;
  norm.table.entries = {gradient};
  plan::LaunchStep normLaunch;
  normLaunch.args = {norm};
  group.steps = {normLaunch};
  EXPECT_TRUE(writtenBuffers(group).empty());
  EXPECT_EQ(readBuffers(group), (std::vector<uint32_t>{2}));
}

TEST(CudaExecutorMemory, NeedsCountEveryRegion) {
  plan::Plan plan;
  plan.accumulationSteps = 2;
  plan.buffers = {{"w", plan::DType::F32, {1000}, plan::BufferRole::Parameter},
                  {"t", plan::DType::BF16, {4096}, plan::BufferRole::Temporary},
                  {"x", plan::DType::I32, {10}, plan::BufferRole::Input}};
  plan.device.microStep.arenaBytes = 8192;
  plan.device.optimizerStep.arenaBytes = 512;
  plan.device.microStep.scratchBytes = 100;
  const DeviceMemoryNeeds needs = deviceMemoryNeeds(plan);
  // 4000 -> 4096, 40 -> 256, error records 64 -> 256, the metrics' 56 bytes
  // -> 256, then the 24 bytes of run scalars (the last region is not padded).
  EXPECT_EQ(needs.persistent, 4096u + 256 + 256 + 256 + 24);
  EXPECT_EQ(needs.arena, 8192u);
  EXPECT_EQ(needs.scratch, 256u);
  EXPECT_EQ(needs.workspace, 32u << 20);
  EXPECT_EQ(needs.total(), needs.persistent + needs.arena + needs.scratch + needs.workspace);
}

TEST(CudaExecutorMemory, PoolLayoutHoldsEverythingItSizes) {
  // Sizing and allocation read one layout: buffers, then tables (micro step,
  // then optimizer step), then error records, metrics and the run scalars, each aligned and
  // disjoint, all inside the size deviceMemoryNeeds reports.
  plan::Plan plan;
  plan.accumulationSteps = 3;
  plan.buffers = {{"w", plan::DType::F32, {1000}, plan::BufferRole::Parameter},
                  {"t", plan::DType::BF16, {4096}, plan::BufferRole::Temporary},
                  {"g", plan::DType::F32, {1000}, plan::BufferRole::State},
                  {"x", plan::DType::I32, {10}, plan::BufferRole::Input}};
  auto tableLaunch = [](size_t entries, plan::TableKind kind) {
    plan::DeviceArgument argument;
    argument.kind = plan::ArgKind::Table;
    argument.table.kind = kind;
    argument.table.entries.resize(entries);
    plan::LaunchStep launch;
    launch.args = {argument};
    plan::DeviceGroup group;
    group.steps = {launch};
    return group;
  };
  plan.device.microStep.groups = {tableLaunch(3, plan::TableKind::Norm)};
  plan.device.optimizerStep.groups = {tableLaunch(2, plan::TableKind::Norm),
                                      tableLaunch(5, plan::TableKind::Optimizer)};
  const PoolLayout pool = layoutPool(plan);
  EXPECT_EQ(pool.buffers[1], PoolLayout::kNotInPool);
  ASSERT_EQ(pool.microTables.size(), 1u);
  ASSERT_EQ(pool.optimizerTables.size(), 2u);
  std::vector<std::pair<uint64_t, uint64_t>> spans = {
      {pool.buffers[0], 4000},
      {pool.buffers[2], 4000},
      {pool.buffers[3], 40},
      {pool.microTables[0], 3 * 24},
      {pool.optimizerTables[0], 2 * 24},
      {pool.optimizerTables[1], 5 * 88},
      {pool.errorRecords, 2 * sizeof(plan::DeviceErrorRecord)},
      {pool.metrics, 8 * (3 + 5)}, // a loss per micro step + 5 slots
      {pool.runScalars, sizeof(plan::RunScalarBlock)}};
  for (size_t i = 0; i < spans.size(); ++i) {
    EXPECT_EQ(spans[i].first % 256, 0u) << i;
    EXPECT_LE(spans[i].first + spans[i].second, pool.bytes) << i;
    if (i > 0)
      EXPECT_GE(spans[i].first, spans[i - 1].first + spans[i - 1].second) << i;
  }
  EXPECT_EQ(pool.bytes, spans.back().first + spans.back().second);
  EXPECT_EQ(deviceMemoryNeeds(plan).persistent, pool.bytes);
}

TEST(CudaExecutorMessages, NoDeviceProgram) {
  EXPECT_EQ(std::string(kNoDeviceProgramMessage),
            "this plan has no GPU code: it was compiled without the CUDA "
            "toolkit; use --device cpu");
  EXPECT_STREQ(planFunctionName(PlanFunction::MicroStep), "micro_step");
  EXPECT_STREQ(planFunctionName(PlanFunction::OptimizerStep), "optimizer_step");
}

TEST(CudaExecutorAttention, ChoicesSayWhatRanAndWhy) {
  EXPECT_EQ(formatAttentionChoices({}), "");
  AttentionChoice faster;
  faster.problem = "forward [B 16, H 12, T 1024, S 1024, D 64, causal, bf16]";
  faster.cudnn = true;
  faster.ownMs = 0.199;
  faster.cudnnMs = 0.109;
  faster.difference = 3.1e-3;
  faster.engine = "cuDNN 9.10.2 (libcudnn.so.9), forward engine 3, backward engine 5";
  AttentionChoice slower = faster;
  slower.problem = "backward [B 16, H 12, T 1024, S 1024, D 64, causal, bf16]";
  slower.cudnn = false;
  slower.ownMs = 0.3;
  slower.cudnnMs = 0.343;
  slower.why = "slower";
  AttentionChoice missing;
  missing.problem = "forward [B 4, H 4, T 64, S 64, D 16, causal, f16]";
  missing.why = "cuDNN not found (libcudnn.so.9 could not be loaded)";
  EXPECT_EQ(formatAttentionChoices({faster, slower, missing}),
            "attention (each distinct problem and pass, chosen at start):\n"
            "  forward [B 16, H 12, T 1024, S 1024, D 64, causal, bf16]: cuDNN 0.109 ms (ours "
            "0.199 ms; outputs agree to 3.1e-03), cuDNN 9.10.2 (libcudnn.so.9), forward engine 3, "
            "backward engine 5\n"
            "  backward [B 16, H 12, T 1024, S 1024, D 64, causal, bf16]: ours 0.300 ms (cuDNN "
            "0.343 ms, cuDNN 9.10.2 (libcudnn.so.9), forward engine 3, backward engine 5)\n"
            "  forward [B 4, H 4, T 64, S 64, D 16, causal, f16]: ours (cuDNN's not used: cuDNN "
            "not found (libcudnn.so.9 could not be loaded))\n");
  EXPECT_STREQ(attentionSelectionName(AttentionSelection::Timed), "timed");
  EXPECT_STREQ(attentionSelectionName(AttentionSelection::Own), "ampc");
  EXPECT_STREQ(attentionSelectionName(AttentionSelection::Cudnn), "cudnn");
}

} // namespace
