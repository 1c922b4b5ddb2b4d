//===- PlanIOTest.cpp - Binary plan encoding: round trips and rejections --===//

#include "DeviceProgramCompare.h"
#include "PlanTestUtils.h"

#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <sys/resource.h>
#include <unistd.h>

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

Plan decode(const std::string &bytes) {
  std::istringstream in(bytes);
  return plan::readPlan(in);
}

/// The PlanError message readPlan gives for \p bytes ("" if it accepts them).
std::string readError(const std::string &bytes) {
  try {
    decode(bytes);
  } catch (const PlanError &error) {
    std::string message = error.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_FALSE(message.empty());
    return message;
  }
  return "";
}

void expectSameInstructions(const std::vector<plan::Instruction> &a,
                            const std::vector<plan::Instruction> &b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].op, b[i].op);
    EXPECT_EQ(a[i].operands, b[i].operands);
    EXPECT_EQ(a[i].results, b[i].results);
    EXPECT_EQ(a[i].attrs, b[i].attrs);
    EXPECT_EQ(a[i].location, b[i].location);
  }
}

void expectSamePlan(const Plan &a, const Plan &b) {
  EXPECT_EQ(a.modelName, b.modelName);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.accumulationSteps, b.accumulationSteps);
  EXPECT_EQ(a.gradNorm, b.gradNorm);
  EXPECT_EQ(a.learningRate, b.learningRate);
  EXPECT_EQ(a.trainingSummary, b.trainingSummary);
  ASSERT_EQ(a.buffers.size(), b.buffers.size());
  for (size_t i = 0; i < a.buffers.size(); ++i) {
    EXPECT_EQ(a.buffers[i].name, b.buffers[i].name);
    EXPECT_EQ(a.buffers[i].dtype, b.buffers[i].dtype);
    EXPECT_EQ(a.buffers[i].shape, b.buffers[i].shape);
    EXPECT_EQ(a.buffers[i].role, b.buffers[i].role);
  }
  ASSERT_EQ(a.parameters.size(), b.parameters.size());
  for (size_t i = 0; i < a.parameters.size(); ++i) {
    EXPECT_EQ(a.parameters[i].name, b.parameters[i].name);
    EXPECT_EQ(a.parameters[i].buffer, b.parameters[i].buffer);
    EXPECT_EQ(a.parameters[i].init, b.parameters[i].init);
    EXPECT_EQ(a.parameters[i].a, b.parameters[i].a);
    EXPECT_EQ(a.parameters[i].b, b.parameters[i].b);
    EXPECT_EQ(a.parameters[i].weightDecay, b.parameters[i].weightDecay);
  }
  ASSERT_EQ(a.inputs.size(), b.inputs.size());
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    EXPECT_EQ(a.inputs[i].name, b.inputs[i].name);
    EXPECT_EQ(a.inputs[i].buffer, b.inputs[i].buffer);
    EXPECT_EQ(a.inputs[i].bound, b.inputs[i].bound);
    EXPECT_EQ(a.inputs[i].use, b.inputs[i].use);
  }
  ASSERT_EQ(a.constants.size(), b.constants.size());
  for (size_t i = 0; i < a.constants.size(); ++i) {
    EXPECT_EQ(a.constants[i].buffer, b.constants[i].buffer);
    EXPECT_EQ(a.constants[i].bytes, b.constants[i].bytes);
  }
  expectSameInstructions(a.instructions, b.instructions);
  expectSameInstructions(a.optimizerInstructions, b.optimizerInstructions);
  ASSERT_EQ(a.parameterCopies.size(), b.parameterCopies.size());
  for (size_t i = 0; i < a.parameterCopies.size(); ++i) {
    EXPECT_EQ(a.parameterCopies[i].buffer, b.parameterCopies[i].buffer);
    EXPECT_EQ(a.parameterCopies[i].source, b.parameterCopies[i].source);
  }
  const plan::LossScaling &x = a.lossScaling, &y = b.lossScaling;
  EXPECT_EQ(x.mode, y.mode);
  EXPECT_EQ(x.initialScale, y.initialScale);
  EXPECT_EQ(x.growthFactor, y.growthFactor);
  EXPECT_EQ(x.backoffFactor, y.backoffFactor);
  EXPECT_EQ(x.growthInterval, y.growthInterval);
  EXPECT_EQ(x.minScale, y.minScale);
  EXPECT_EQ(x.scale, y.scale);
  EXPECT_EQ(x.growthTracker, y.growthTracker);
  EXPECT_EQ(x.foundNonFinite, y.foundNonFinite);
  EXPECT_EQ(x.appliedSteps, y.appliedSteps);
  EXPECT_EQ(x.floorHits, y.floorHits);
  EXPECT_EQ(a.debugNonFinite, b.debugNonFinite);
  EXPECT_TRUE(expectSameDeviceProgram(a.device, b.device));
}

/// A fresh scratch directory for file tests.
std::filesystem::path scratchDirectory(const std::string &name) {
  auto path = std::filesystem::temp_directory_path() /
              ("ampc_plan_io_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(path);
  std::filesystem::create_directories(path);
  return path;
}

std::string fileContents(const std::filesystem::path &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(PlanIO, EveryOpcodePlanCoversTheFormat) {
  Plan plan = everyOpcodePlan();
  std::set<plan::OpCode> ops;
  std::set<size_t> attrKinds;
  for (const auto *list : {&plan.instructions, &plan.optimizerInstructions})
    for (const plan::Instruction &instruction : *list) {
      ops.insert(instruction.op);
      for (const auto &attr : instruction.attrs)
        attrKinds.insert(attr.second.index());
    }
  EXPECT_EQ(ops.size(), plan::kNumOpCodes);
  EXPECT_EQ(attrKinds.size(), 3u);
  std::set<plan::BufferRole> roles;
  for (const plan::Buffer &buffer : plan.buffers)
    roles.insert(buffer.role);
  EXPECT_EQ(roles.size(), 6u);
  std::set<plan::InputUse> uses;
  for (const plan::Input &input : plan.inputs)
    uses.insert(input.use);
  EXPECT_EQ(uses.size(), 3u);
  EXPECT_FALSE(plan.optimizerInstructions.empty());
  EXPECT_NE(plan.accumulationSteps, 1);
  EXPECT_NE(plan.gradNorm, 0u);
  EXPECT_NE(plan.learningRate, 0u);
  EXPECT_FALSE(plan.trainingSummary.empty());
  EXPECT_NO_THROW(plan::validatePlan(plan));
}

TEST(PlanIO, RoundTripEveryOpcode) {
  Plan original = everyOpcodePlan();
  original.parameters[0].a = -0.125;
  original.parameters[0].b = 1e-300;
  std::string bytes = encode(original);
  EXPECT_EQ(bytes.substr(0, 8), "AMPCPLAN");
  Plan decoded = decode(bytes);
  expectSamePlan(original, decoded);
  // Encoding is deterministic: re-encoding gives the same bytes.
  EXPECT_EQ(encode(decoded), bytes);
}

TEST(PlanIO, SaveAndLoad) {
  auto dir = scratchDirectory("save");
  const std::string path = (dir / "model.plan").string();
  Plan original = everyOpcodePlan();
  plan::savePlan(original, path);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  expectSamePlan(original, plan::loadPlan(path));
  // Saving again replaces the file.
  original.modelName = "renamed";
  plan::savePlan(original, path);
  EXPECT_EQ(plan::loadPlan(path).modelName, "renamed");
  std::filesystem::remove_all(dir);
}

TEST(PlanIO, LoadMissingFileNamesThePath) {
  try {
    plan::loadPlan("/nonexistent/dir/model.plan");
    FAIL() << "expected PlanError";
  } catch (const PlanError &error) {
    EXPECT_NE(std::string(error.what()).find("/nonexistent/dir/model.plan"), std::string::npos);
  }
}

TEST(PlanIO, LoadMalformedFileNamesThePath) {
  auto dir = scratchDirectory("malformed");
  const std::string path = (dir / "bad.plan").string();
  std::ofstream(path) << "AMPCPLAN but not really";
  try {
    plan::loadPlan(path);
    FAIL() << "expected PlanError";
  } catch (const PlanError &error) {
    EXPECT_NE(std::string(error.what()).find(path), std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

TEST(PlanIO, FailedSaveLeavesExistingFileUntouched) {
  auto dir = scratchDirectory("blocked");
  const std::string path = (dir / "model.plan").string();
  Plan plan = everyOpcodePlan();
  plan::savePlan(plan, path);
  const std::string before = fileContents(path);
  // The temporary path is taken by a directory, so the save cannot start.
  std::filesystem::create_directory(path + ".tmp");
  plan.modelName = "changed";
  try {
    plan::savePlan(plan, path);
    FAIL() << "expected PlanError";
  } catch (const PlanError &error) {
    EXPECT_NE(std::string(error.what()).find(path), std::string::npos);
  }
  EXPECT_EQ(fileContents(path), before);
  std::filesystem::remove_all(dir);
}

TEST(PlanIO, FullDiskLeavesExistingFileUntouched) {
  auto dir = scratchDirectory("full");
  const std::string path = (dir / "model.plan").string();
  Plan plan = everyOpcodePlan();
  plan::savePlan(plan, path);
  const std::string before = fileContents(path);
  // A large constant, and a file-size limit far below it: writes beyond the
  // limit fail with EFBIG exactly like a full disk (SIGXFSZ ignored).
  PlanBuilder builder;
  builder.input("x", DType::F32, {1 << 20});
  builder.constant("big", DType::F32, {1 << 20}, std::vector<double>(1 << 20, 1.0));
  builder.plan.loss = builder.op(OpCode::Sum, {0}, DType::F32, {},
                                 {{"axes", std::vector<int64_t>{0}}, {"keepdims", int64_t(0)}});
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  auto oldHandler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit limited = old;
  limited.rlim_cur = 64 * 1024;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limited), 0);
  std::string message;
  try {
    plan::savePlan(builder.plan, path);
  } catch (const PlanError &error) {
    message = error.what();
  }
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, oldHandler);
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_EQ(fileContents(path), before);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  std::filesystem::remove_all(dir);
}

TEST(PlanIO, RejectsEveryTruncation) {
  PlanBuilder builder("tiny");
  uint32_t x = builder.input("x", DType::F32, {2});
  uint32_t c = builder.constant("c", DType::F32, {2}, {1.0, 2.0});
  uint32_t sum = builder.op(OpCode::Add, {x, c}, DType::F32, {2}, {}, "tiny.mlir:1:1");
  builder.plan.loss = builder.op(OpCode::Mean, {sum}, DType::F32, {},
                                 {{"axes", std::vector<int64_t>{0}}, {"keepdims", int64_t(0)}});
  const std::string bytes = encode(builder.plan);
  ASSERT_EQ(readError(bytes), "");
  for (size_t length = 0; length < bytes.size(); ++length)
    EXPECT_NE(readError(bytes.substr(0, length)), "")
        << "a prefix of " << length << " bytes was accepted";
  EXPECT_NE(readError(bytes.substr(0, 100)).find("truncated"), std::string::npos);
}

TEST(PlanIO, RejectsBadMagic) {
  std::string bytes = encode(everyOpcodePlan());
  bytes[0] = 'X';
  EXPECT_NE(readError(bytes).find("not an ampc plan"), std::string::npos);
  EXPECT_NE(readError("hello world, this is not a plan").find("not an ampc"), std::string::npos);
  EXPECT_NE(readError("").find("empty"), std::string::npos);
}

TEST(PlanIO, WritesVersion12) {
  const std::string bytes = encode(everyOpcodePlan());
  EXPECT_EQ(bytes.substr(8, 4), std::string("\x0c\x00\x00\x00", 4));
  // Nine sections, PREC then DEVP (an empty device program) last.
  EXPECT_EQ(bytes.substr(12, 4), std::string("\x09\x00\x00\x00", 4));
  const size_t precision = bytes.find("PREC"), device = bytes.rfind("DEVP");
  ASSERT_NE(precision, std::string::npos);
  ASSERT_NE(device, std::string::npos);
  EXPECT_LT(precision, device);
  // Required flag; an empty program is two u32 counts and two empty
  // functions (two u64 sizes and three u32 counts each).
  EXPECT_EQ(bytes.substr(device + 4, 4), std::string("\x01\x00\x00\x00", 4));
  EXPECT_EQ(bytes.size() - device - 16, 8u + 2 * (16u + 12u));
}

TEST(PlanIO, RejectsWrongVersion) {
  // Version 1 (forward-only plans, before training fields existed), version
  // 3 (before the device program), version 4 (uncompressed device modules),
  // 5 to 11, and any future version are refused with
  // the same actionable message.
  std::string bytes = encode(everyOpcodePlan());
  bytes[8] = 1; // the u32 version follows the magic
  EXPECT_EQ(readError(bytes), "plan format version 1, this runtime reads version 12: recompile "
                              "the model with a matching ampc");
  bytes[8] = 3; // before the device program
  EXPECT_EQ(readError(bytes), "plan format version 3, this runtime reads version 12: recompile "
                              "the model with a matching ampc");
  bytes[8] = 4; // before the compressed device modules
  EXPECT_EQ(readError(bytes), "plan format version 4, this runtime reads version 12: recompile "
                              "the model with a matching ampc");
  bytes[8] = 5; // before given initial values
  EXPECT_EQ(readError(bytes), "plan format version 5, this runtime reads version 12: recompile "
                              "the model with a matching ampc");
  bytes[8] = 6; // before the rows per block of attention steps
  EXPECT_EQ(readError(bytes), "plan format version 6, this runtime reads version 12: recompile "
                              "the model with a matching ampc");
  bytes[8] = 7; // before attention's saved log-sum-exp
  EXPECT_EQ(readError(bytes), "plan format version 7, this runtime reads version 12: recompile "
                              "the model with a matching ampc");
  bytes[8] = 8; // before the attention operands' layouts
  EXPECT_EQ(readError(bytes), "plan format version 8, this runtime reads version 12: recompile "
                              "the model with a matching ampc");
  bytes[8] = 9; // before the dgelu matmul epilogue
  EXPECT_EQ(readError(bytes), "plan format version 9, this runtime reads version 12: recompile "
                              "the model with a matching ampc");
  bytes[8] = 10; // before the activation opcodes and the attribute table
  EXPECT_EQ(readError(bytes), "plan format version 10, this runtime reads version 12: recompile "
                              "the model with a matching ampc");
  bytes[8] = 11; // before the untrained parameter flag
  EXPECT_EQ(readError(bytes), "plan format version 11, this runtime reads version 12: recompile "
                              "the model with a matching ampc");
  bytes[8] = 13;
  EXPECT_EQ(readError(bytes), "plan format version 13, this runtime reads version 12: recompile "
                              "the model with a matching ampc");
}

/// A version-1 file as the previous runtime wrote it: header, then the six
/// sections with their version-1 payloads (no training fields, no input
/// use, no OPTI section).
std::string version1File() {
  auto u32 = [](uint32_t value) {
    std::string bytes;
    for (int i = 0; i < 4; ++i)
      bytes.push_back(static_cast<char>(value >> (8 * i)));
    return bytes;
  };
  auto u64 = [&](uint64_t value) {
    return u32(static_cast<uint32_t>(value)) + u32(static_cast<uint32_t>(value >> 32));
  };
  auto section = [&](const char *tag, const std::string &payload) {
    return std::string(tag, 4) + u32(1) + u64(payload.size()) + payload;
  };
  // One f32 input x [] and loss = neg(x).
  const std::string model = u32(2) + "v1" + u32(1);
  const std::string buffers =
      u32(2) + u32(1) + "x" + '\0' + '\1' + u32(0) + u32(0) + '\0' + '\3' + u32(0);
  const std::string inputs = u32(1) + u32(1) + "x" + u32(0) + u64(0);
  const std::string instructions =
      u32(1) + std::string("\x04\x00", 2) + u32(1) + u32(0) + u32(1) + u32(1) + u32(0) + u32(0);
  return "AMPCPLAN" + u32(1) + u32(6) + section("MODL", model) + section("BUFS", buffers) +
         section("PARM", u32(0)) + section("INPT", inputs) + section("CNST", u32(0)) +
         section("INST", instructions);
}

TEST(PlanIO, RejectsVersion1Files) {
  EXPECT_EQ(readError(version1File()),
            "plan format version 1, this runtime reads version 12: recompile "
            "the model with a matching ampc");
}

TEST(PlanIO, RoundTripTrainingFields) {
  const Plan original = everyOpcodePlan();
  const Plan decoded = decode(encode(original));
  // Spot checks on top of expectSamePlan, so a field that is neither
  // written nor read (and so keeps its default) cannot pass unnoticed.
  EXPECT_EQ(decoded.accumulationSteps, 2);
  EXPECT_EQ(decoded.gradNorm, original.gradNorm);
  EXPECT_EQ(decoded.learningRate, original.learningRate);
  EXPECT_EQ(decoded.trainingSummary.substr(0, 10), "adamw lr=3");
  EXPECT_EQ(decoded.inputs[1].use, plan::InputUse::Indices);
  EXPECT_EQ(decoded.inputs[2].use, plan::InputUse::Labels);
  ASSERT_EQ(decoded.optimizerInstructions.size(), 5u);
  EXPECT_EQ(decoded.optimizerInstructions[2].op, plan::OpCode::AdamW);
  EXPECT_EQ(decoded.optimizerInstructions[2].results.size(), 4u);
  EXPECT_EQ(decoded.optimizerInstructions[3].location, "every.mlir:40:2");
  EXPECT_EQ(decoded.buffers[plan::findBuffer(decoded, "table.m")].role, plan::BufferRole::State);
  expectSamePlan(original, decoded);
  // A forward-only plan round-trips as one: no optimizer step, defaults.
  PlanBuilder forward;
  const uint32_t x = forward.input("x", DType::F32, {3});
  forward.plan.loss = forward.op(OpCode::Sum, {x}, DType::F32, {},
                                 {{"axes", std::vector<int64_t>{0}}, {"keepdims", int64_t(0)}});
  const Plan forwardDecoded = decode(encode(forward.plan));
  EXPECT_TRUE(forwardDecoded.optimizerInstructions.empty());
  EXPECT_EQ(forwardDecoded.accumulationSteps, 1);
  EXPECT_EQ(forwardDecoded.inputs[0].use, plan::InputUse::None);
  expectSamePlan(forward.plan, forwardDecoded);
}

/// A plan whose one parameter w [2, 3] has given values; loss = sum(w).
Plan givenValuesPlan() {
  PlanBuilder b;
  const uint32_t w = b.parameter("w", DType::F32, {2, 3}, plan::InitKind::Given);
  b.plan.parameters[0].values = {1.5f, -2.0f, 0.25f, 3.0f, 0.0f, -0.5f};
  b.plan.loss = b.op(OpCode::Sum, {w}, DType::F32, {},
                     {{"axes", std::vector<int64_t>{0, 1}}, {"keepdims", int64_t(0)}});
  return b.plan;
}

TEST(PlanIO, RoundTripGivenValues) {
  const Plan original = givenValuesPlan();
  const Plan decoded = decode(encode(original));
  ASSERT_EQ(decoded.parameters.size(), 1u);
  EXPECT_EQ(decoded.parameters[0].init, plan::InitKind::Given);
  EXPECT_EQ(decoded.parameters[0].values, original.parameters[0].values);
  EXPECT_EQ(plan::initKindName(plan::InitKind::Given), std::string("given"));
  // A truncated value list is an error, not a short read.
  const std::string bytes = encode(original);
  for (size_t cut = 1; cut <= 24; ++cut)
    EXPECT_FALSE(readError(bytes.substr(0, bytes.size() - cut)).empty());
}

TEST(PlanIO, ValidatesGivenValues) {
  Plan plan = givenValuesPlan();
  plan.parameters[0].values.pop_back();
  EXPECT_NE(readError(encode(plan)).find("given init has 5 values for 6 elements"),
            std::string::npos);
  plan = givenValuesPlan();
  plan.parameters[0].values[2] = std::numeric_limits<float>::infinity();
  EXPECT_NE(readError(encode(plan)).find("given init values must be finite"), std::string::npos);
  plan = givenValuesPlan();
  plan.parameters[0].init = plan::InitKind::Zeros;
  EXPECT_THROW(plan::validatePlan(plan), plan::PlanError);
}

TEST(PlanIO, RoundTripMixedPrecisionFields) {
  const Plan original = everyOpcodePlan();
  const Plan decoded = decode(encode(original));
  // Spot checks against the values everyOpcodePlan sets, none of them a
  // default, so a field that is not written or not read shows up.
  ASSERT_EQ(decoded.parameterCopies.size(), 1u);
  EXPECT_EQ(decoded.parameterCopies[0].buffer, plan::findBuffer(decoded, "w.bf16"));
  EXPECT_EQ(decoded.parameterCopies[0].source, plan::findBuffer(decoded, "w"));
  EXPECT_EQ(decoded.buffers[plan::findBuffer(decoded, "w.bf16")].role,
            plan::BufferRole::ParameterCopy);
  const plan::LossScaling &scaling = decoded.lossScaling;
  EXPECT_EQ(scaling.mode, plan::LossScaleMode::Dynamic);
  EXPECT_EQ(scaling.initialScale, 1024.0f);
  EXPECT_EQ(scaling.growthFactor, 4.0f);
  EXPECT_EQ(scaling.backoffFactor, 0.25f);
  EXPECT_EQ(scaling.growthInterval, 3);
  EXPECT_EQ(scaling.minScale, 0.125f);
  EXPECT_EQ(scaling.scale, plan::findBuffer(decoded, "loss_scale"));
  EXPECT_EQ(scaling.growthTracker, plan::findBuffer(decoded, "loss_scale.growth_tracker"));
  EXPECT_EQ(scaling.foundNonFinite, plan::findBuffer(decoded, "loss_scale.found_non_finite"));
  EXPECT_EQ(scaling.appliedSteps, plan::findBuffer(decoded, "loss_scale.applied_steps"));
  EXPECT_EQ(scaling.floorHits, plan::findBuffer(decoded, "loss_scale.floor_hits"));
  EXPECT_TRUE(decoded.debugNonFinite);
  EXPECT_EQ(decoded.optimizerInstructions.back().op, plan::OpCode::UpdateLossScale);
  EXPECT_EQ(decoded.optimizerInstructions[3].operands.size(), 8u); // sgd
  EXPECT_EQ(decoded.optimizerInstructions[3].results.back(), decoded.parameterCopies[0].buffer);
  expectSamePlan(original, decoded);

  // A plan without mixed precision decodes to the defaults.
  PlanBuilder forward;
  const uint32_t x = forward.input("x", DType::F32, {3});
  forward.plan.loss = forward.op(OpCode::Sum, {x}, DType::F32, {},
                                 {{"axes", std::vector<int64_t>{0}}, {"keepdims", int64_t(0)}});
  const Plan plain = decode(encode(forward.plan));
  EXPECT_TRUE(plain.parameterCopies.empty());
  EXPECT_EQ(plain.lossScaling.mode, plan::LossScaleMode::None);
  EXPECT_EQ(plain.lossScaling.initialScale, 65536.0f);
  EXPECT_EQ(plain.lossScaling.growthInterval, 2000);
  EXPECT_FALSE(plain.debugNonFinite);

  // Static scaling and debugNonFinite off survive too (the opposite values
  // of everyOpcodePlan's).
  Plan scaled = original;
  scaled.lossScaling.mode = plan::LossScaleMode::Static;
  scaled.debugNonFinite = false;
  scaled.optimizerInstructions.back().attrs["dynamic"] = int64_t(0);
  const Plan staticDecoded = decode(encode(scaled));
  EXPECT_EQ(staticDecoded.lossScaling.mode, plan::LossScaleMode::Static);
  EXPECT_FALSE(staticDecoded.debugNonFinite);
}

TEST(PlanIO, RejectsBadDebugFlag) {
  std::string bytes = encode(everyOpcodePlan());
  // The debug flag is the last byte of the PREC section, just before the
  // DEVP section's header.
  const size_t flag = bytes.rfind("DEVP") - 1;
  ASSERT_EQ(bytes[flag], '\x01');
  bytes[flag] = 2;
  EXPECT_NE(readError(bytes).find("bad debug non-finite flag 2"), std::string::npos)
      << readError(bytes);
}

TEST(PlanIO, FindBuffer) {
  const Plan plan = everyOpcodePlan();
  EXPECT_EQ(plan.buffers[plan::findBuffer(plan, "w.grad")].name, "w.grad");
  EXPECT_EQ(plan::findBuffer(plan, "x"), 0u);
  try {
    plan::findBuffer(plan, "nope");
    FAIL() << "expected PlanError";
  } catch (const PlanError &error) {
    EXPECT_NE(std::string(error.what()).find("'nope'"), std::string::npos);
  }
}

TEST(PlanIO, RejectsOutOfRangeBufferId) {
  Plan plan = everyOpcodePlan();
  plan.instructions[3].operands[1] = 999;
  std::string message = readError(encode(plan));
  EXPECT_NE(message.find("operand buffer 999 is out of range"), std::string::npos) << message;
  plan = everyOpcodePlan();
  plan.inputs[0].buffer = 12345;
  EXPECT_NE(readError(encode(plan)).find("buffer 12345"), std::string::npos);
}

TEST(PlanIO, RejectsBadEnumValues) {
  Plan plan = everyOpcodePlan();
  plan.buffers[0].dtype = static_cast<plan::DType>(9);
  EXPECT_NE(readError(encode(plan)).find("bad dtype code 9"), std::string::npos);
  plan = everyOpcodePlan();
  plan.instructions[0].op = static_cast<plan::OpCode>(500);
  EXPECT_NE(readError(encode(plan)).find("bad opcode code 500"), std::string::npos);
  plan = everyOpcodePlan();
  plan.buffers[0].role = static_cast<plan::BufferRole>(6);
  EXPECT_NE(readError(encode(plan)).find("bad buffer role"), std::string::npos);
  plan = everyOpcodePlan();
  plan.inputs[0].use = static_cast<plan::InputUse>(3);
  EXPECT_NE(readError(encode(plan)).find("bad input use code 3"), std::string::npos);
  plan = everyOpcodePlan();
  // The first code past the table: an opcode of a newer compiler.
  plan.optimizerInstructions[0].op = static_cast<plan::OpCode>(plan::kNumOpCodes);
  const std::string newer = readError(encode(plan));
  EXPECT_NE(newer.find("bad opcode code " + std::to_string(plan::kNumOpCodes) +
                       ": this runtime knows opcodes 0 to " +
                       std::to_string(plan::kNumOpCodes - 1)),
            std::string::npos)
      << newer;
  EXPECT_NE(newer.find("written by a newer ampc"), std::string::npos) << newer;
  plan = everyOpcodePlan();
  plan.lossScaling.mode = static_cast<plan::LossScaleMode>(3);
  EXPECT_NE(readError(encode(plan)).find("bad loss scale mode code 3"), std::string::npos);
  plan = everyOpcodePlan();
  plan.parameters[0].init = static_cast<plan::InitKind>(7);
  EXPECT_NE(readError(encode(plan)).find("bad init kind"), std::string::npos);
}

/// \p bytes with one more section appended (and counted in the header).
std::string withExtraSection(std::string bytes, const char *tag, uint32_t flags,
                             const std::string &payload) {
  bytes[12] = static_cast<char>(bytes[12] + 1); // section count, low byte
  bytes.append(tag, 4);
  for (int i = 0; i < 4; ++i)
    bytes.push_back(static_cast<char>(flags >> (8 * i)));
  const uint64_t length = payload.size();
  for (int i = 0; i < 8; ++i)
    bytes.push_back(static_cast<char>(length >> (8 * i)));
  return bytes + payload;
}

TEST(PlanIO, SkipsUnknownOptionalSections) {
  const std::string bytes = encode(everyOpcodePlan());
  EXPECT_EQ(readError(withExtraSection(bytes, "KRNL", 0, "cubin")), "");
}

TEST(PlanIO, RejectsUnknownRequiredSections) {
  const std::string bytes = encode(everyOpcodePlan());
  EXPECT_NE(readError(withExtraSection(bytes, "KRNL", 1, "cubin")).find("section 'KRNL'"),
            std::string::npos);
}

TEST(PlanIO, RejectsLengthsPastTheEnd) {
  std::string bytes = encode(everyOpcodePlan());
  // The first section's u64 length sits at offset 16 + 8.
  bytes[16 + 8 + 5] = 1;
  EXPECT_NE(readError(bytes).find("truncated"), std::string::npos);
  // A corrupted element count: the buffer count of the second section (BUFS,
  // after the MODL section) set to 2^32 - 1 must not allocate, just fail.
  bytes = encode(everyOpcodePlan());
  const size_t modelLength = static_cast<uint8_t>(bytes[24]);
  const size_t bufferCount = 16 + 16 + modelLength + 16;
  ASSERT_EQ(bytes.substr(16 + 16 + modelLength, 4), "BUFS");
  for (int i = 0; i < 4; ++i)
    bytes[bufferCount + i] = '\xff';
  EXPECT_NE(readError(bytes).find("buffer count 4294967295"), std::string::npos);
}

TEST(PlanIO, RejectsTrailingAndDuplicateData) {
  const std::string bytes = encode(everyOpcodePlan());
  EXPECT_NE(readError(bytes + "x").find("after the last section"), std::string::npos);
  std::string duplicate = withExtraSection(bytes, "KRNL", 0, "a");
  duplicate = withExtraSection(duplicate, "KRNL", 0, "b");
  EXPECT_NE(readError(duplicate).find("appears twice"), std::string::npos);
}

TEST(PlanIO, CorruptedBytesAreRejectedOrValid) {
  // Every single-byte corruption of a small plan either fails with a
  // PlanError or still decodes to a plan that passes validation; nothing
  // crashes, hangs or throws anything else.
  const std::string bytes = encode(everyOpcodePlan());
  for (size_t offset = 0; offset < bytes.size(); ++offset) {
    for (uint8_t pattern : {0xffu, 0x01u, 0x80u}) {
      std::string corrupted = bytes;
      corrupted[offset] = static_cast<char>(corrupted[offset] ^ pattern);
      try {
        plan::validatePlan(decode(corrupted));
      } catch (const PlanError &) {
      }
    }
  }
}

} // namespace
