//===- PlanDeviceTest.cpp - The device program: encoding and validation ---===//
//
// A small plan with a hand-written device program (a matmul with a bias
// epilogue, a view, a kernel launch with every kind of scalar argument, a
// memset) round-trips through the binary format; every rule of the device
// program's validation rejects a plan that breaks it with a one-line error;
// truncated and corrupted DEVP sections are rejected without crashing.
//
//===----------------------------------------------------------------------===//

#include "DeviceProgramCompare.h"
#include "PlanTestUtils.h"
#include "PlanValidateTestUtils.h"

#include <gtest/gtest.h>

#include <sstream>

using namespace ampc;
using namespace ampc::test;
using plan::Plan;
using plan::PlanError;

namespace {

std::string encode(const Plan &plan) {
  std::ostringstream out;
  plan::writePlan(plan, out);
  return out.str();
}

std::string readError(const std::string &bytes) {
  try {
    std::istringstream in(bytes);
    plan::readPlan(in);
  } catch (const PlanError &error) {
    std::string message = error.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    return message;
  }
  return "";
}

/// The buffers of devicePlan().
struct DeviceBuffers {
  uint32_t x, w, b, y, z, r, loss, sum;
};

/// loss = sum(reshape(x @ w + b)) with a device program: group 0 is a
/// cuBLASLt matmul with a bias epilogue covering the matmul and the add,
/// the reshape is a view of the sum z, group 1 zeroes a buffer and launches
/// a reduction kernel reading the view.
Plan devicePlan(DeviceBuffers *ids = nullptr) {
  PlanBuilder b("device");
  DeviceBuffers d;
  d.x = b.input("x", DType::BF16, {4, 8});
  d.w = b.parameter("w", DType::BF16, {8, 16});
  d.b = b.parameter("b", DType::BF16, {16});
  d.y = b.op(OpCode::MatMul, {d.x, d.w}, DType::BF16, {4, 16},
             {{"transpose_a", int64_t(0)}, {"transpose_b", int64_t(0)}}, "device.mlir:3:5");
  d.z = b.op(OpCode::Add, {d.y, d.b}, DType::BF16, {4, 16});
  d.r = b.op(OpCode::Reshape, {d.z}, DType::BF16, {64});
  d.loss = b.op(OpCode::Sum, {d.r}, DType::F32, {},
                {{"axes", std::vector<int64_t>{0}}, {"keepdims", int64_t(0)}}, "device.mlir:6:5");
  d.sum = d.loss;
  b.plan.loss = d.loss;

  plan::DeviceProgram &device = b.plan.device;
  plan::DeviceModule module;
  module.name = "ampc_reduction_sum_0123abcd";
  module.cubinSm90 = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0};
  module.ptx = ".version 8.0\n.target sm_90\n.visible .entry "
               "ampc_reduction_sum_0123abcd(\n)\n{\n}\n";
  device.modules.push_back(module);
  device.kernels.push_back({0, "ampc_reduction_sum_0123abcd"});

  plan::DeviceFunction &micro = device.microStep;
  plan::MatmulStep matmul;
  matmul.a = d.x;
  matmul.b = d.w;
  matmul.d = d.z;
  matmul.bias = d.b;
  matmul.m = 4;
  matmul.n = 16;
  matmul.k = 8;
  matmul.epilogue = plan::Epilogue::Bias;
  micro.groups.push_back({"matmul_epilogue", {0, 1}, {matmul}});

  plan::LaunchStep launch;
  launch.kernel = 0;
  launch.grid[0] = 1;
  launch.block[0] = 256;
  launch.space = plan::LaunchSpace::Single;
  launch.elements = 64;
  auto argument = [](plan::ArgKind kind, const std::string &name) {
    plan::DeviceArgument arg;
    arg.kind = kind;
    arg.name = name;
    return arg;
  };
  plan::DeviceArgument in = argument(plan::ArgKind::Buffer, "in0");
  in.buffer = d.r;
  plan::DeviceArgument out = argument(plan::ArgKind::Buffer, "out0");
  out.buffer = d.loss;
  out.access = plan::Access::ReadWrite;
  plan::DeviceArgument n = argument(plan::ArgKind::Int64, "n");
  n.value = 64;
  plan::DeviceArgument partials = argument(plan::ArgKind::Scratch, "partials");
  partials.value = 256;
  partials.bytes = 8;
  partials.access = plan::Access::ReadWrite;
  launch.args = {in,
                 out,
                 n,
                 partials,
                 argument(plan::ArgKind::RunScalars, "runScalars"),
                 argument(plan::ArgKind::ErrorRecord, "errors")};
  micro.groups.push_back({"reduction", {3}, {plan::MemsetStep{d.loss}, launch}});
  micro.views.push_back({d.r, d.z});
  micro.placements = {{d.z, 0}, {d.loss, 256}};
  micro.arenaBytes = 512;
  micro.scratchBytes = 512;
  if (ids)
    *ids = d;
  return b.plan;
}

plan::LaunchStep &launchOf(Plan &plan) {
  return std::get<plan::LaunchStep>(plan.device.microStep.groups[1].steps[1]);
}
plan::MatmulStep &matmulOf(Plan &plan) {
  return std::get<plan::MatmulStep>(plan.device.microStep.groups[0].steps[0]);
}

TEST(PlanDevice, TheTestPlanIsValid) {
  const Plan plan = devicePlan();
  EXPECT_NO_THROW(plan::validatePlan(plan));
  EXPECT_FALSE(plan.device.empty());
  EXPECT_TRUE(Plan().device.empty());
}

TEST(PlanDevice, RoundTrip) {
  const Plan original = devicePlan();
  std::istringstream in(encode(original));
  const Plan decoded = plan::readPlan(in);
  EXPECT_TRUE(expectSameDeviceProgram(original.device, decoded.device));
  // Spot checks, so a field neither written nor read cannot pass.
  ASSERT_EQ(decoded.device.microStep.groups.size(), 2u);
  EXPECT_EQ(decoded.device.microStep.groups[0].instructions, (std::vector<uint32_t>{0, 1}));
  const auto &matmul = std::get<plan::MatmulStep>(decoded.device.microStep.groups[0].steps[0]);
  EXPECT_EQ(matmul.epilogue, plan::Epilogue::Bias);
  EXPECT_EQ(matmul.k, 8);
  const auto &launch = std::get<plan::LaunchStep>(decoded.device.microStep.groups[1].steps[1]);
  EXPECT_EQ(launch.args[3].kind, plan::ArgKind::Scratch);
  EXPECT_EQ(launch.args[3].value, 256);
  EXPECT_EQ(launch.args[1].access, plan::Access::ReadWrite);
  EXPECT_EQ(launch.args[4].kind, plan::ArgKind::RunScalars);
  EXPECT_EQ(launch.args[5].kind, plan::ArgKind::ErrorRecord);
  EXPECT_EQ(decoded.device.modules[0].cubinSm90.size(), 8u);
  EXPECT_TRUE(decoded.device.modules[0].cubinSm80.empty());
  // Identical plans give identical bytes.
  EXPECT_EQ(encode(decoded), encode(original));
}

TEST(PlanDevice, RejectsBadKernelsAndModules) {
  Plan plan = devicePlan();
  launchOf(plan).kernel = 5;
  expectInvalid(plan, {"device program, micro step group 1 (reduction) step 1 "
                       "(launch)",
                       "kernel 5 is out of range (the program has 1 kernels)"});
  plan = devicePlan();
  plan.device.modules[0].cubinSm90.clear();
  plan.device.modules[0].ptx.clear();
  expectInvalid(plan, {"module 0 'ampc_reduction_sum_0123abcd' has neither a "
                       "cubin nor PTX"});
  plan = devicePlan();
  plan.device.modules[0].cubinSm80 = {'n', 'o', 't', 'E', 'L', 'F'};
  expectInvalid(plan, {"a cubin that is not an ELF file"});
  plan = devicePlan();
  plan.device.kernels[0].entry = "ampc_missing";
  expectInvalid(plan, {"kernel 0 'ampc_missing'", "has no such entry"});
  plan = devicePlan();
  plan.device.kernels[0].module = 3;
  expectInvalid(plan, {"module 3 is out of range"});
}

TEST(PlanDevice, RejectsBadBuffersAndArguments) {
  Plan plan = devicePlan();
  launchOf(plan).args[0].buffer = 99;
  expectInvalid(plan, {"argument 'in0': buffer 99 is out of range"});
  DeviceBuffers d;
  plan = devicePlan(&d);
  launchOf(plan).args[0].buffer = d.y; // the matmul's product: never stored
  expectInvalid(plan, {"is a temporary the micro step does not place"});
  plan = devicePlan(&d);
  matmulOf(plan).d = d.x; // writing an input
  expectInvalid(plan, {"D: writes buffer 0 'x'", "which has role input"});
  plan = devicePlan();
  launchOf(plan).args[3].bytes = 1024;
  expectInvalid(plan, {"argument 'partials'", "runs past the scratch region "
                                              "of 512 bytes"});
  plan = devicePlan();
  launchOf(plan).block[0] = 2048;
  expectInvalid(plan, {"a block of 2048 threads exceeds CUDA's 1024"});
  plan = devicePlan();
  launchOf(plan).grid[1] = 0;
  expectInvalid(plan, {"grid and block sizes must be at least 1"});
  // A per-run value passed by value would be replayed unchanged by a captured graph.
  for (plan::ArgKind kind : {plan::ArgKind::Seed, plan::ArgKind::Step, plan::ArgKind::TotalSteps}) {
    plan = devicePlan();
    launchOf(plan).args[4].kind = kind;
    const std::string message = "argument 'runScalars': argument kind " +
                                std::string(plan::argKindName(kind)) + " passes a per-run value";
    expectInvalid(plan, {message.c_str(), "run_scalars argument"});
  }
}

TEST(PlanDevice, RejectsBadArenas) {
  Plan plan = devicePlan();
  plan.device.microStep.placements[1].offset = 100;
  expectInvalid(plan, {"placement 1", "at arena offset 100 is not 256-byte "
                                      "aligned"});
  plan = devicePlan();
  plan.device.microStep.arenaBytes = 256;
  expectInvalid(plan, {"placement 1", "runs past the arena of 256 bytes"});
  plan = devicePlan();
  // The loss (written in group 1) over the sum z (read in group 1).
  plan.device.microStep.placements[1].offset = 0;
  expectInvalid(plan, {"share arena bytes while both are live"});
  DeviceBuffers d;
  plan = devicePlan(&d);
  plan.device.microStep.placements.push_back({d.x, 0});
  expectInvalid(plan, {"placement 2", "is not a temporary of the micro step"});
  plan = devicePlan(&d);
  plan.device.microStep.placements.push_back({d.z, 0});
  expectInvalid(plan, {"placement 2", "is placed twice"});
  plan = devicePlan(&d);
  plan.device.microStep.placements.push_back({d.y, 0}); // nothing writes it
  plan.device.microStep.arenaBytes = 1024;
  plan.device.microStep.placements.back().offset = 512;
  expectInvalid(plan, {"is placed in the arena but no step writes it"});
}

TEST(PlanDevice, RejectsBadInPlaceReuse) {
  DeviceBuffers d;
  Plan plan = devicePlan(&d);
  plan.device.microStep.placements[1].reuses = d.z; // loss over z: other sizes
  expectInvalid(plan, {"placement 1", "reuses buffer 4", "does not have its offset and size"});
  plan = devicePlan(&d);
  plan.device.microStep.placements[1].reuses = d.y; // not placed
  expectInvalid(plan, {"reuses buffer 3, which is not another placed buffer"});
  plan = devicePlan(&d);
  plan.device.microStep.placements[1].reuses = d.loss;
  expectInvalid(plan, {"reuses buffer 6, which is not another placed buffer"});
}

TEST(PlanDevice, RejectsBadViews) {
  DeviceBuffers d;
  Plan plan = devicePlan(&d);
  plan.device.microStep.views[0].source = d.y;
  expectInvalid(plan, {"view 0", "is not a chain of reshapes of buffer 3"});
  plan = devicePlan(&d);
  plan.device.microStep.views.clear();
  expectInvalid(plan, {"instruction 2 (reshape)", "is computed by no step "
                                                  "group and is no view"});
  plan = devicePlan(&d);
  plan.device.microStep.groups[1].instructions = {2, 3};
  expectInvalid(plan, {"covers instruction 2 (reshape)", "a view, which runs "
                                                         "as no step"});
}

TEST(PlanDevice, RejectsBadCoverageAndOrder) {
  Plan plan = devicePlan();
  plan.device.microStep.groups[1].instructions = {};
  expectInvalid(plan, {"instruction 3 (sum at device.mlir:6:5) is computed "
                       "by no step group"});
  plan = devicePlan();
  plan.device.microStep.groups[1].instructions = {1, 3};
  expectInvalid(plan, {"instruction 1 (add) is covered by groups 0 and 1"});
  plan = devicePlan();
  plan.device.microStep.groups[0].instructions = {1, 0};
  expectInvalid(plan, {"listed in increasing order"});
  plan = devicePlan();
  plan.device.microStep.groups[0].instructions = {0, 9};
  expectInvalid(plan, {"covers instruction 9, out of range"});
  plan = devicePlan();
  std::swap(plan.device.microStep.groups[0], plan.device.microStep.groups[1]);
  expectInvalid(plan, {"argument 'in0': reads buffer 5", "before any step of "
                                                         "the micro step "
                                                         "writes it"});
  plan = devicePlan();
  plan.device.microStep.groups[1].steps = {};
  expectInvalid(plan, {"group 1 (reduction) has no steps"});
  plan = devicePlan();
  plan.device.optimizerStep.arenaBytes = 256;
  expectInvalid(plan, {"it has an optimizer step, but the plan has none"});
}

TEST(PlanDevice, RejectsInconsistentMatmuls) {
  Plan plan = devicePlan();
  matmulOf(plan).k = 7;
  expectInvalid(plan, {"step 0 (matmul)", "A buffer 0 'x' (bf16 [4, 8]) must "
                                          "hold 28 elements"});
  plan = devicePlan();
  matmulOf(plan).batch = 2; // A and B shared by both batches, D not
  matmulOf(plan).strideD = 0;
  expectInvalid(plan, {"D's batch stride must be m * n = 64"});
  plan = devicePlan();
  matmulOf(plan).epilogue = plan::Epilogue::None;
  expectInvalid(plan, {"epilogue none takes no bias buffer"});
  plan = devicePlan();
  matmulOf(plan).epilogue = plan::Epilogue::GeluAuxBias;
  expectInvalid(plan, {"an aux buffer goes with epilogues gelu_aux_bias and dgelu"});
  plan = devicePlan();
  matmulOf(plan).epilogue = plan::Epilogue::DGelu;
  expectInvalid(plan, {"epilogue dgelu takes no bias buffer"});
  plan = devicePlan();
  matmulOf(plan).epilogue = plan::Epilogue::DGelu;
  matmulOf(plan).bias = plan::kNoBuffer;
  expectInvalid(plan, {"an aux buffer goes with epilogues gelu_aux_bias and dgelu"});
  plan = devicePlan();
  matmulOf(plan).epilogue = plan::Epilogue::DGelu;
  matmulOf(plan).bias = plan::kNoBuffer;
  matmulOf(plan).aux = matmulOf(plan).d;
  expectInvalid(plan, {"dgelu reads its aux matrix while it writes D"});
  plan = devicePlan();
  matmulOf(plan).beta = 1;
  matmulOf(plan).c = matmulOf(plan).a; // bf16 [4, 8]: not D's element count
  expectInvalid(plan, {"C buffer 0 'x' (bf16 [4, 8]) must have D's 64 elements"});

  plan = devicePlan();
  matmulOf(plan).beta = 1;
  expectInvalid(plan, {"beta must be non-zero exactly when there is a C "
                       "operand"});
  plan = devicePlan();
  matmulOf(plan).n = 8;
  expectInvalid(plan, {"B buffer 1 'w' (bf16 [8, 16]) must hold 64 elements"});
}

TEST(PlanDevice, ModulesAreStoredCompressed) {
  // A module with a long, repetitive PTX (as real PTX is) round-trips, and
  // its text is not in the file: the module records are one zlib stream.
  Plan original = devicePlan();
  std::string &ptx = original.device.modules[0].ptx;
  for (int i = 0; i < 2000; ++i)
    ptx += "\n  ld.global.nc.v4.f32 {%f1, %f2, %f3, %f4}, [%rd" + std::to_string(i % 7) + "];";
  const std::string bytes = encode(original);
  EXPECT_EQ(bytes.find("ld.global.nc.v4.f32"), std::string::npos);
  EXPECT_LT(bytes.size(), ptx.size() / 4);
  std::istringstream in(bytes);
  const Plan decoded = plan::readPlan(in);
  EXPECT_EQ(decoded.device.modules[0].ptx, ptx);
  EXPECT_TRUE(expectSameDeviceProgram(original.device, decoded.device));
}

TEST(PlanDevice, RejectsCorruptCompressedModules) {
  // DEVP's payload starts 16 bytes after its tag (tag, flags, size): the
  // module count, the records' size, the stream's size, then the stream.
  const std::string bytes = encode(devicePlan());
  const size_t device = bytes.rfind("DEVP");
  ASSERT_NE(device, std::string::npos);
  const size_t rawSize = device + 20, stream = device + 28;
  // A byte of the deflate data changed: the stream's checksum fails.
  std::string corrupted = bytes;
  corrupted[stream + 8] = static_cast<char>(corrupted[stream + 8] ^ 0x55);
  EXPECT_NE(readError(corrupted).find("do not inflate"), std::string::npos) << readError(corrupted);
  // A records size that disagrees with the stream, larger and smaller.
  for (int delta : {+1, -1}) {
    corrupted = bytes;
    corrupted[rawSize] = static_cast<char>(corrupted[rawSize] + delta);
    EXPECT_NE(readError(corrupted).find("do not inflate to their"), std::string::npos)
        << delta << ": " << readError(corrupted);
  }
  // A records size no zlib stream of this length inflates to (4 GiB) is refused before it is
  // allocated.
  corrupted = bytes;
  corrupted.replace(rawSize, 4, std::string("\xf0\xff\xff\xff", 4));
  EXPECT_NE(readError(corrupted).find("the module records' size 4294967280 is more than zlib "
                                      "inflates"),
            std::string::npos)
      << readError(corrupted);
}

TEST(PlanDevice, RejectsEveryTruncationOfTheDeviceSection) {
  const std::string bytes = encode(devicePlan());
  ASSERT_EQ(readError(bytes), "");
  const size_t device = bytes.rfind("DEVP");
  ASSERT_NE(device, std::string::npos);
  for (size_t length = device; length < bytes.size(); ++length)
    EXPECT_NE(readError(bytes.substr(0, length)), "")
        << "a prefix of " << length << " bytes was accepted";
  EXPECT_NE(readError(bytes.substr(0, bytes.size() - 3)).find("truncated"), std::string::npos);
  // Without the section at all (and counted out of the header).
  std::string missing = bytes.substr(0, device);
  missing[12] = static_cast<char>(missing[12] - 1);
  EXPECT_NE(readError(missing).find("section 'DEVP' is missing"), std::string::npos)
      << readError(missing);
}

TEST(PlanDevice, RejectsBadCodesInTheDeviceSection) {
  // The first group's first step is the matmul: its kind byte follows the
  // group's kind string and instruction list.
  const std::string bytes = encode(devicePlan());
  const size_t kind = bytes.find("matmul_epilogue");
  ASSERT_NE(kind, std::string::npos);
  const size_t stepKind = kind + 15 + 4 + 2 * 4 + 4;
  ASSERT_EQ(bytes[stepKind], '\x01');
  std::string corrupted = bytes;
  corrupted[stepKind] = 9;
  EXPECT_NE(readError(corrupted).find("bad device step kind code 9"), std::string::npos)
      << readError(corrupted);
  // The transpose flags follow the six buffer ids.
  corrupted = bytes;
  corrupted[stepKind + 1 + 24] = 2;
  EXPECT_NE(readError(corrupted).find("bad transpose flag 2"), std::string::npos)
      << readError(corrupted);
}

TEST(PlanDevice, CorruptedDeviceBytesAreRejectedOrValid) {
  // Every single-byte corruption of the device section either fails with a
  // PlanError or still decodes to a valid plan; nothing crashes or hangs.
  const std::string bytes = encode(devicePlan());
  const size_t device = bytes.rfind("DEVP");
  for (size_t offset = device; offset < bytes.size(); ++offset)
    for (uint8_t pattern : {0xffu, 0x01u, 0x80u}) {
      std::string corrupted = bytes;
      corrupted[offset] = static_cast<char>(corrupted[offset] ^ pattern);
      readError(corrupted);
    }
}

TEST(PlanDevice, DescribesDeviceErrorsAsTheCpuBackendDoes) {
  PlanBuilder b;
  const uint32_t logits = b.input("logits", DType::F32, {2, 5});
  const uint32_t labels = b.input("labels", DType::I32, {2}, 5);
  b.plan.loss = b.op(OpCode::CrossEntropy, {logits, labels}, DType::F32, {},
                     {{"ignore_index", int64_t(-100)}, {"reduction", int64_t(0)}}, "m.mlir:4:7");
  plan::DeviceErrorRecord record{plan::kDeviceErrorLabel, 0, 1, 7, 5};
  EXPECT_EQ(plan::describeDeviceError(b.plan, false, record),
            "instruction 0 (cross_entropy at m.mlir:4:7): label 7 at row 1 is "
            "outside the classes [0, 5) and is not ignore_index -100");
  record = {plan::kDeviceErrorEmbeddingId, 0, 3, -1, 256};
  EXPECT_EQ(plan::describeDeviceError(b.plan, false, record),
            "instruction 0 (cross_entropy at m.mlir:4:7): id -1 at index 3 is "
            "outside the table's rows [0, 256)");
}

} // namespace
