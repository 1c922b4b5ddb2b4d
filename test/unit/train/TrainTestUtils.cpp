//===- TrainTestUtils.cpp - Temporary files, processes and training plans -===//

#include "TrainTestUtils.h"

#include "test/unit/runtime/PlanTestUtils.h"

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>

namespace ampc::test {

using plan::BufferRole;
using plan::InitKind;
using plan::InputUse;
using plan::Instruction;

TempDir::TempDir() {
  const char *base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/ampc-train-test-XXXXXX";
  if (!::mkdtemp(pattern.data()))
    ADD_FAILURE() << "cannot create a temporary directory from " << pattern;
  root = pattern;
}

TempDir::~TempDir() {
  std::string command = "rm -rf '" + root + "'";
  if (std::system(command.c_str()) != 0)
    ADD_FAILURE() << "cannot remove " << root;
}

void writeFile(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string uint16Tokens(const std::vector<int64_t> &tokens) {
  std::string bytes;
  for (int64_t token : tokens) {
    bytes += static_cast<char>(token & 0xff);
    bytes += static_cast<char>((token >> 8) & 0xff);
  }
  return bytes;
}

CommandResult runCommand(const std::string &command) {
  CommandResult result;
  std::FILE *pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) {
    ADD_FAILURE() << "cannot run " << command;
    return result;
  }
  char chunk[4096];
  size_t count;
  while ((count = std::fread(chunk, 1, sizeof(chunk), pipe)) > 0)
    result.output.append(chunk, count);
  const int status = ::pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

namespace {

/// Appends an instruction writing \p results (existing buffers) to \p list.
void emit(std::vector<Instruction> &list, OpCode op, std::vector<uint32_t> operands,
          std::vector<uint32_t> results, Attrs attrs = {}) {
  Instruction instruction;
  instruction.op = op;
  instruction.operands = std::move(operands);
  instruction.results = std::move(results);
  instruction.attrs = std::move(attrs);
  instruction.location = "test.mlir:1:1";
  list.push_back(std::move(instruction));
}

/// A new temporary written by \p op in the optimizer step.
uint32_t optimizerOp(PlanBuilder &b, OpCode op, std::vector<uint32_t> operands, Attrs attrs = {}) {
  const uint32_t result = b.buffer("", DType::F32, {});
  emit(b.plan.optimizerInstructions, op, std::move(operands), {result}, std::move(attrs));
  return result;
}

/// The gradient accumulator of \p param and the optimizer step: global norm,
/// constant learning rate, then AdamW (or SGD with momentum when \p sgd).
void addOptimizer(PlanBuilder &b, uint32_t param, uint32_t gradient, double learningRate, bool sgd,
                  const std::string &summary) {
  const plan::Buffer shapeOf = b.plan.buffers[param];
  const uint32_t acc =
      b.buffer("grad." + shapeOf.name, DType::F32, shapeOf.shape, BufferRole::State);
  emit(b.plan.instructions, OpCode::Accumulate, {acc, gradient}, {acc});
  const uint32_t norm = optimizerOp(b, OpCode::GlobalNorm, {acc});
  const uint32_t lr = optimizerOp(b, OpCode::LrSchedule, {},
                                  {{"kind", int64_t(0)},
                                   {"lr", learningRate},
                                   {"warmup_steps", int64_t(0)},
                                   {"decay_steps", int64_t(0)},
                                   {"min_lr", 0.0}});
  if (sgd) {
    const uint32_t momentum =
        b.buffer("momentum." + shapeOf.name, DType::F32, shapeOf.shape, BufferRole::State);
    emit(b.plan.optimizerInstructions, OpCode::Sgd, {param, acc, momentum, lr, norm},
         {param, acc, momentum}, {{"momentum", 0.9}, {"weight_decay", 0.0}, {"clip_norm", 0.0}});
  } else {
    const uint32_t m = b.buffer("m." + shapeOf.name, DType::F32, shapeOf.shape, BufferRole::State);
    const uint32_t v = b.buffer("v." + shapeOf.name, DType::F32, shapeOf.shape, BufferRole::State);
    emit(b.plan.optimizerInstructions, OpCode::AdamW, {param, acc, m, v, lr, norm},
         {param, acc, m, v},
         {{"beta1", 0.9},
          {"beta2", 0.99},
          {"eps", 1e-8},
          {"weight_decay", 0.0},
          {"clip_norm", 1.0}});
  }
  b.plan.gradNorm = norm;
  b.plan.learningRate = lr;
  b.plan.trainingSummary = summary;
}

const Attrs kCrossEntropy = {{"ignore_index", int64_t(-100)}, {"reduction", int64_t(0)}};

} // namespace

plan::Plan bigramTrainingPlan(int64_t vocab, int64_t batch, int64_t sequence, int64_t accumulation,
                              double learningRate) {
  PlanBuilder b("bigram");
  const uint32_t table =
      b.parameter("table", DType::F32, {vocab, vocab}, InitKind::Normal, 0, 0.02);
  const uint32_t tokens = b.input("tokens", DType::I32, {batch, sequence}, vocab);
  b.plan.inputs.back().use = InputUse::Indices;
  const uint32_t targets = b.input("targets", DType::I64, {batch, sequence}, vocab);
  b.plan.inputs.back().use = InputUse::Labels;
  const uint32_t logits =
      b.op(OpCode::Embedding, {table, tokens}, DType::F32, {batch, sequence, vocab});
  b.plan.loss = b.op(OpCode::CrossEntropy, {logits, targets}, DType::F32, {}, kCrossEntropy);
  const uint32_t seed = b.op(OpCode::GradSeed, {}, DType::F32, {}, {{"accum_steps", accumulation}});
  const uint32_t dlogits = b.op(OpCode::CrossEntropyGrad, {logits, targets, seed}, DType::F32,
                                {batch, sequence, vocab}, kCrossEntropy);
  const uint32_t dtable =
      b.op(OpCode::EmbeddingGrad, {tokens, dlogits}, DType::F32, {vocab, vocab});
  b.plan.accumulationSteps = accumulation;
  addOptimizer(b, table, dtable, learningRate, false,
               "adamw lr=" + std::to_string(learningRate) + " clip=1");
  return b.plan;
}

plan::Plan classifierTrainingPlan(int64_t batch, int64_t features, int64_t classes,
                                  double learningRate) {
  PlanBuilder b("classifier");
  const uint32_t w = b.parameter("w", DType::F32, {features, classes}, InitKind::Normal, 0, 0.02);
  const uint32_t x = b.input("x", DType::F32, {batch, features});
  const uint32_t labels = b.input("labels", DType::I32, {batch}, classes);
  b.plan.inputs.back().use = InputUse::Labels;
  const Attrs plain = {{"transpose_a", int64_t(0)}, {"transpose_b", int64_t(0)}};
  const uint32_t logits = b.op(OpCode::MatMul, {x, w}, DType::F32, {batch, classes}, plain);
  b.plan.loss = b.op(OpCode::CrossEntropy, {logits, labels}, DType::F32, {}, kCrossEntropy);
  const uint32_t seed = b.op(OpCode::GradSeed, {}, DType::F32, {}, {{"accum_steps", int64_t(1)}});
  const uint32_t dlogits = b.op(OpCode::CrossEntropyGrad, {logits, labels, seed}, DType::F32,
                                {batch, classes}, kCrossEntropy);
  const uint32_t dw = b.op(OpCode::MatMul, {x, dlogits}, DType::F32, {features, classes},
                           {{"transpose_a", int64_t(1)}, {"transpose_b", int64_t(0)}});
  addOptimizer(b, w, dw, learningRate, false, "adamw");
  return b.plan;
}

plan::Plan regressionTrainingPlan(int64_t batch, int64_t features, int64_t outputs,
                                  double learningRate) {
  PlanBuilder b("regression");
  const uint32_t w = b.parameter("w", DType::F32, {features, outputs}, InitKind::Normal, 0, 1);
  const uint32_t x = b.input("x", DType::F32, {batch, features});
  const uint32_t y = b.input("y", DType::F32, {batch, outputs});
  const uint32_t pred = b.op(OpCode::MatMul, {x, w}, DType::F32, {batch, outputs},
                             {{"transpose_a", int64_t(0)}, {"transpose_b", int64_t(0)}});
  b.plan.loss = b.op(OpCode::MseLoss, {pred, y}, DType::F32, {});
  // d mse / d pred = 2 (pred - y) / (B O), times the seed.
  const uint32_t seed = b.op(OpCode::GradSeed, {}, DType::F32, {}, {{"accum_steps", int64_t(1)}});
  const uint32_t twoOverN =
      b.constant("two_over_n", DType::F32, {}, {2.0 / double(batch * outputs)});
  const uint32_t scale = b.op(OpCode::Mul, {seed, twoOverN}, DType::F32, {});
  const uint32_t diff = b.op(OpCode::Sub, {pred, y}, DType::F32, {batch, outputs});
  const uint32_t dpred = b.op(OpCode::Mul, {diff, scale}, DType::F32, {batch, outputs});
  const uint32_t dw = b.op(OpCode::MatMul, {x, dpred}, DType::F32, {features, outputs},
                           {{"transpose_a", int64_t(1)}, {"transpose_b", int64_t(0)}});
  addOptimizer(b, w, dw, learningRate, true, "sgd momentum=0.9");
  return b.plan;
}

plan::Plan withLossScaling(plan::Plan plan, plan::LossScaleMode mode, float initialScale,
                           float minScale, bool debugNonFinite) {
  auto state = [&](const std::string &name) {
    plan.buffers.push_back({name, DType::F32, {}, BufferRole::State});
    return static_cast<uint32_t>(plan.buffers.size() - 1);
  };
  plan::LossScaling &scaling = plan.lossScaling;
  scaling.mode = mode;
  scaling.initialScale = initialScale;
  scaling.minScale = minScale;
  scaling.scale = state("loss_scale");
  scaling.growthTracker = state("loss_scale.growth_tracker");
  scaling.foundNonFinite = state("loss_scale.found_non_finite");
  scaling.appliedSteps = state("loss_scale.applied_steps");
  scaling.floorHits = state("loss_scale.floor_hits");
  for (Instruction &instruction : plan.instructions) {
    if (instruction.op == OpCode::GradSeed)
      instruction.operands = {scaling.scale};
    if (instruction.op == OpCode::Accumulate) {
      instruction.operands.insert(instruction.operands.end(),
                                  {scaling.scale, scaling.foundNonFinite});
      instruction.results.push_back(scaling.foundNonFinite);
    }
  }
  for (Instruction &instruction : plan.optimizerInstructions)
    if (instruction.op == OpCode::AdamW || instruction.op == OpCode::Sgd)
      instruction.operands.insert(instruction.operands.begin() +
                                      (instruction.op == OpCode::AdamW ? 6 : 5),
                                  {scaling.foundNonFinite, scaling.appliedSteps});
  const std::vector<uint32_t> buffers = {scaling.scale, scaling.growthTracker,
                                         scaling.foundNonFinite, scaling.appliedSteps};
  emit(plan.optimizerInstructions, OpCode::UpdateLossScale, buffers, buffers,
       {{"dynamic", int64_t(mode == plan::LossScaleMode::Dynamic)},
        {"growth_factor", double(scaling.growthFactor)},
        {"backoff_factor", double(scaling.backoffFactor)},
        {"growth_interval", scaling.growthInterval},
        {"min_scale", double(minScale)}});
  plan.debugNonFinite = debugNonFinite;
  return plan;
}

plan::Plan withParameterCopy(plan::Plan plan, const std::string &name, plan::DType dtype) {
  const uint32_t source = plan::findBuffer(plan, name);
  plan::Buffer buffer = plan.buffers[source];
  buffer.name = name + "." + plan::dtypeName(dtype);
  buffer.dtype = dtype;
  buffer.role = BufferRole::ParameterCopy;
  plan.buffers.push_back(buffer);
  const uint32_t copy = static_cast<uint32_t>(plan.buffers.size() - 1);
  plan.parameterCopies.push_back({copy, source});
  for (Instruction &instruction : plan.instructions)
    for (uint32_t &operand : instruction.operands)
      if (operand == source)
        operand = copy;
  for (Instruction &instruction : plan.optimizerInstructions)
    if ((instruction.op == OpCode::AdamW || instruction.op == OpCode::Sgd) &&
        instruction.operands[0] == source) {
      instruction.operands.push_back(copy);
      instruction.results.push_back(copy);
    }
  return plan;
}

plan::Plan forwardOnlyPlan() {
  PlanBuilder b("forward_only");
  const uint32_t w = b.parameter("w", DType::F32, {4}, InitKind::Ones);
  const uint32_t x = b.input("x", DType::F32, {4});
  b.plan.loss = b.op(OpCode::MseLoss, {w, x}, DType::F32, {});
  return b.plan;
}

} // namespace ampc::test
