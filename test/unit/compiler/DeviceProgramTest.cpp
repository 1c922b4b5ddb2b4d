//===- DeviceProgramTest.cpp - the plan's device program for every example model -===//
//
// Every example model (the MLP and every GPT size) in bf16, fp16 with dynamic loss scaling and
// fp32 goes through the compile pipeline (build-training, assign-precision, insert-loss-scaling,
// graph-fuse, graph-plan-memory, plan emission) and gets its device program, without NVRTC (the
// modules get a placeholder PTX naming their entries, which is all validation looks at). Checked
// here with code of the test's own, not only by validatePlan: every instruction is computed by
// exactly one step group or is a view; every buffer a step reads is persistent or written by an
// earlier step; no two placed buffers live at the same time share bytes; the program survives a
// trip through the binary format. Smaller models check the matmul forms (batched, broadcast,
// flattened), the attention limits, the error reporting of the classifier and the loss-scale
// floor count. No CUDA toolkit is needed.
//
//===--------------------------------------------------------------------------===//

#include "CompileHelpers.h"
#include "compiler/cuda/DeviceProgramBuilder.h"
#include "compiler/report/MemoryReport.h"
#include "test/unit/runtime/DeviceProgramCompare.h"

#include "mlir/IR/BuiltinAttributes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <sstream>

using namespace ampc;

namespace {

struct PrecisionCase {
  const char *mode;
  const char *lossScaling;
};
const PrecisionCase kPrecisions[] = {{"bf16", "none"}, {"fp16", "dynamic"}, {"fp32", "none"}};

/// A plan with its device program (binaries replaced by a placeholder PTX), or why the
/// pipeline or the builder refused the model.
struct DeviceCompiled {
  plan::Plan plan;
  std::vector<std::string> moduleSources;
  /// graph-plan-memory's arena of the micro step, for comparison.
  /// The arenas `ampc report memory` prints (graph-plan-memory's).
  int64_t reportMicroStepArena = 0, reportOptimizerStepArena = 0;
  std::string error;
};

/// A PTX text that names every entry of \p module, so validation's entry check passes.
std::string placeholderPtx(const plan::DeviceProgram &program, uint32_t module) {
  std::string ptx = "// placeholder for the tests: no NVRTC\n";
  for (const plan::DeviceKernel &kernel : program.kernels)
    if (kernel.module == module)
      ptx += ".visible .entry " + kernel.entry + "(\n)\n{\n}\n";
  return ptx;
}

DeviceCompiled compileDevice(const std::string &path, const PrecisionCase &mode,
                             int accumSteps = 1) {
  DeviceCompiled result;
  mlir::MLIRContext context;
  registerModelDialects(context);
  llvm::SourceMgr sourceMgr;
  std::string diagnostics;
  llvm::raw_string_ostream os(diagnostics);
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &context, os);
  auto loaded = loadModel(path, sourceMgr, context);
  graph::TrainingPipelineConfig config;
  config.training.accumSteps = accumSteps;
  config.precision.mode = mode.mode;
  config.scaling.mode = mode.lossScaling;
  if (failed(loaded) || failed(runTrainingPipeline(*loaded, config))) {
    result.error = "pipeline failed: " + os.str();
    return result;
  }
  // The report reads the final IR: what `ampc report memory` prints for this model.
  MemoryTotals totals = memoryTotals(loaded->model);
  result.reportMicroStepArena = totals.microStepArena;
  result.reportOptimizerStepArena = totals.optimizerStepArena;
  PlanProvenance provenance;
  auto compiled = emitPlan(loaded->model, &provenance);
  if (failed(compiled)) {
    result.error = "emission failed: " + os.str();
    return result;
  }
  result.plan = std::move(*compiled);
  try {
    DeviceProgramSources sources = buildDeviceProgram(loaded->model, result.plan, provenance);
    for (uint32_t m = 0; m < sources.program.modules.size(); ++m)
      sources.program.modules[m].ptx = placeholderPtx(sources.program, m);
    result.plan.device = std::move(sources.program);
    result.moduleSources = std::move(sources.moduleSources);
  } catch (const std::exception &error) {
    result.error = error.what();
  }
  return result;
}

DeviceCompiled compileDeviceText(const std::string &text, const PrecisionCase &mode) {
  std::string path = test_support::uniqueTempPath("ampc_device_model");
  std::ofstream(path) << text;
  DeviceCompiled result = compileDevice(path, mode);
  std::remove(path.c_str());
  return result;
}

/// Every buffer a step touches, with its access.
std::vector<std::pair<uint32_t, plan::Access>> accesses(const plan::DeviceStep &step) {
  using plan::Access;
  std::vector<std::pair<uint32_t, Access>> list;
  auto add = [&](uint32_t id, Access access) {
    if (id != plan::kNoBuffer)
      list.push_back({id, access});
  };
  if (const auto *launch = std::get_if<plan::LaunchStep>(&step)) {
    for (const plan::DeviceArgument &arg : launch->args) {
      if (arg.kind == plan::ArgKind::Buffer)
        add(arg.buffer, arg.access);
      for (const plan::TableEntry &entry : arg.table.entries) {
        if (arg.table.kind == plan::TableKind::Norm) {
          add(entry.grad, Access::Read);
          continue;
        }
        for (uint32_t id : {entry.param, entry.grad, entry.firstMoment, entry.secondMoment})
          add(id, Access::ReadWrite);
        add(entry.copy, Access::Write);
      }
    }
  } else if (const auto *matmul = std::get_if<plan::MatmulStep>(&step)) {
    for (uint32_t id : {matmul->a, matmul->b, matmul->c, matmul->bias})
      add(id, Access::Read);
    add(matmul->d, Access::Write);
    add(matmul->aux, Access::Write);
  } else if (const auto *attention = std::get_if<plan::AttentionStep>(&step)) {
    const bool backward = attention->pass == plan::AttentionPass::Backward;
    for (uint32_t id : {attention->q, attention->k, attention->v, attention->dOut})
      add(id, Access::Read);
    // o and lse: written by the forward, read by the backward that saved them.
    for (uint32_t id : {attention->out, attention->lse})
      add(id, backward ? Access::Read : Access::Write);
    for (uint32_t id : {attention->dq, attention->dk, attention->dv})
      add(id, Access::Write);
  } else {
    add(std::get<plan::MemsetStep>(step).buffer, Access::Write);
  }
  return list;
}

/// The test's own check of one function: coverage, read-after-write, arena overlaps.
void checkFunction(const plan::Plan &plan, const plan::DeviceFunction &function,
                   const std::vector<plan::Instruction> &list, const std::string &what) {
  // Coverage: each instruction in exactly one group, or a reshape with a view entry.
  std::map<uint32_t, uint32_t> viewSource;
  for (const plan::BufferView &view : function.views)
    viewSource[view.buffer] = view.source;
  std::vector<int> covered(list.size(), 0);
  for (const plan::DeviceGroup &group : function.groups)
    for (uint32_t index : group.instructions) {
      ASSERT_LT(index, list.size()) << what;
      ++covered[index];
    }
  for (size_t i = 0; i < list.size(); ++i) {
    const bool view = list[i].op == plan::OpCode::Reshape && viewSource.count(list[i].results[0]);
    EXPECT_EQ(covered[i], view ? 0 : 1)
        << what << ": " << plan::describeInstruction(list[i], i) << " is covered " << covered[i]
        << " times" << (view ? " (a view)" : "");
  }

  // Read after write, and each placed buffer's live range in groups.
  auto storage = [&](uint32_t id) {
    auto it = viewSource.find(id);
    return it == viewSource.end() ? id : it->second;
  };
  std::set<uint32_t> written;
  std::map<uint32_t, std::pair<size_t, size_t>> live;
  for (size_t g = 0; g < function.groups.size(); ++g)
    for (const plan::DeviceStep &step : function.groups[g].steps)
      for (auto [id, access] : accesses(step)) {
        const uint32_t data = storage(id);
        const bool persistent = plan.buffers[data].role != plan::BufferRole::Temporary;
        if (access != plan::Access::Write)
          EXPECT_TRUE(persistent || written.count(data))
              << what << " group " << g << " (" << function.groups[g].kind << ") reads buffer "
              << id << " '" << plan.buffers[id].name << "' before any step writes it";
        if (access != plan::Access::Read)
          written.insert(data);
        if (!persistent) {
          auto [it, inserted] = live.try_emplace(data, g, g);
          it->second.second = std::max(it->second.second, g);
        }
      }
  for (uint32_t result : {plan.loss, plan.gradNorm, plan.learningRate})
    if (auto it = live.find(storage(result)); it != live.end())
      it->second.second = function.groups.size();

  // The arena: aligned, inside, and no overlap between buffers live at the same time.
  struct Placed {
    uint64_t begin, end;
    size_t first, last;
    uint32_t id, reuses;
  };
  std::vector<Placed> placed;
  for (const plan::ArenaPlacement &placement : function.placements) {
    const plan::Buffer &buffer = plan.buffers[placement.buffer];
    const uint64_t bytes = plan::numElements(buffer) * plan::dtypeBytes(buffer.dtype);
    EXPECT_EQ(placement.offset % 256, 0u) << what;
    EXPECT_LE(placement.offset + bytes, function.arenaBytes) << what;
    auto it = live.find(placement.buffer);
    ASSERT_NE(it, live.end()) << what << ": placed buffer " << placement.buffer
                              << " is used by no step";
    placed.push_back({placement.offset, placement.offset + bytes, it->second.first,
                      it->second.second, placement.buffer, placement.reuses});
  }
  // Every temporary a step touches is placed (or a view of one).
  for (const auto &[id, range] : live)
    EXPECT_TRUE(std::any_of(function.placements.begin(), function.placements.end(),
                            [&](const plan::ArenaPlacement &p) { return p.buffer == id; }))
        << what << ": buffer " << id << " is used by steps but has no place in the arena";
  size_t overlaps = 0;
  for (size_t i = 0; i < placed.size(); ++i)
    for (size_t j = i + 1; j < placed.size(); ++j) {
      const Placed &a = placed[i], &b = placed[j];
      // Written in place over a buffer the same group reads for the last time: the same bytes
      // on purpose.
      if ((a.reuses == b.id && b.last == a.first && a.begin == b.begin) ||
          (b.reuses == a.id && a.last == b.first && a.begin == b.begin))
        continue;
      const bool together = a.first <= b.last && b.first <= a.last;
      const bool shared = a.begin < b.end && b.begin < a.end;
      if (together && shared && ++overlaps <= 5)
        ADD_FAILURE() << what << ": buffers " << a.id << " and " << b.id
                      << " are live together and share arena bytes";
    }
}

std::string modelName(const std::string &path) { return path.substr(path.find("examples/") + 9); }

//===----------------------------------------------------------------------===//
// Every example model
//===----------------------------------------------------------------------===//

TEST(DeviceProgram, EveryExampleModelIsCompleteAndConsistent) {
  const auto start = std::chrono::steady_clock::now();
  const char *models[] = {"mlp/mlp.mlir", "gpt/tiny.mlir", "gpt/gpt10m.mlir", "gpt/gpt30m.mlir",
                          "gpt/gpt124m.mlir"};
  std::set<std::string> stepKinds, epilogues, groupKinds;
  for (const char *model : models)
    for (const PrecisionCase &mode : kPrecisions) {
      const std::string path = test_support::examplePath(model);
      const std::string what = std::string(model) + " " + mode.mode;
      DeviceCompiled compiled = compileDevice(path, mode);
      ASSERT_EQ(compiled.error, "") << what;
      const plan::Plan &plan = compiled.plan;
      const plan::DeviceProgram &device = plan.device;
      ASSERT_FALSE(device.empty()) << what;
      EXPECT_NO_THROW(plan::validatePlan(plan)) << what;
      checkFunction(plan, device.microStep, plan.instructions, what + " micro step");
      checkFunction(plan, device.optimizerStep, plan.optimizerInstructions,
                    what + " optimizer step");
      // One module per distinct code: no two modules with one source.
      std::set<std::string> sources(compiled.moduleSources.begin(), compiled.moduleSources.end());
      EXPECT_EQ(sources.size(), compiled.moduleSources.size()) << what;
      // One memory plan: the device allocates exactly the arenas graph-plan-memory placed and
      // the memory report prints.
      EXPECT_EQ(static_cast<int64_t>(device.microStep.arenaBytes), compiled.reportMicroStepArena)
          << what;
      EXPECT_EQ(static_cast<int64_t>(device.optimizerStep.arenaBytes),
                compiled.reportOptimizerStepArena)
          << what;
      if (std::string(model) == "gpt/gpt124m.mlir" && std::string(mode.mode) == "bf16")
        std::printf("[ device   ] gpt124m bf16: micro-step arena %.2f GB (the report's: "
                    "%.2f GB), scratch %.1f MB, %zu groups, %zu kernels in %zu modules\n",
                    device.microStep.arenaBytes / 1e9, compiled.reportMicroStepArena / 1e9,
                    device.microStep.scratchBytes / 1e6, device.microStep.groups.size(),
                    device.kernels.size(), device.modules.size());
      for (const plan::DeviceFunction *function : {&device.microStep, &device.optimizerStep})
        for (const plan::DeviceGroup &group : function->groups) {
          groupKinds.insert(group.kind);
          for (const plan::DeviceStep &step : group.steps) {
            stepKinds.insert(plan::deviceStepName(step));
            if (const auto *matmul = std::get_if<plan::MatmulStep>(&step))
              epilogues.insert(plan::epilogueName(matmul->epilogue));
          }
        }
      // A trip through the binary format keeps every field.
      std::stringstream bytes;
      plan::writePlan(plan, bytes);
      const plan::Plan decoded = plan::readPlan(bytes);
      EXPECT_TRUE(test::expectSameDeviceProgram(device, decoded.device)) << what;
    }
  for (const char *kind : {"launch", "matmul", "attention", "memset"})
    EXPECT_TRUE(stepKinds.count(kind)) << "no " << kind << " step";
  for (const char *epilogue : {"none", "bias", "gelu_aux_bias", "dgelu"})
    EXPECT_TRUE(epilogues.count(epilogue)) << "no matmul with epilogue " << epilogue;
  for (const char *kind :
       {"elementwise", "copy", "reduction", "cross_entropy", "matmul", "matmul_epilogue",
        "bias_grad", "attention", "accumulate", "optimizer", "none", "matmul_accumulate"})
    EXPECT_TRUE(groupKinds.count(kind)) << "no step group of kind " << kind;
  std::printf("[ device   ] 5 models x 3 precisions in %.2f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

TEST(DeviceProgram, GptStepsReadTheRightBuffers) {
  DeviceCompiled compiled =
      compileDevice(test_support::examplePath("gpt/tiny.mlir"), kPrecisions[0]);
  ASSERT_EQ(compiled.error, "");
  const plan::Plan &plan = compiled.plan;
  size_t forward = 0, backward = 0, auxEpilogues = 0, geluGradients = 0, residuals = 0;
  std::set<std::pair<uint32_t, uint32_t>> forwardOutputs;
  std::set<uint32_t> preActivations;
  for (const plan::DeviceGroup &group : plan.device.microStep.groups)
    for (const plan::DeviceStep &step : group.steps) {
      if (const auto *attention = std::get_if<plan::AttentionStep>(&step)) {
        // tiny: B = 4, H = 4, T = S = 32, head dim 16, causal, scale 1/sqrt(16).
        EXPECT_EQ(attention->batch, 4);
        EXPECT_EQ(attention->heads, 4);
        EXPECT_EQ(attention->queries, 32);
        EXPECT_EQ(attention->keys, 32);
        EXPECT_EQ(attention->headDim, 16);
        EXPECT_TRUE(attention->causal);
        EXPECT_FLOAT_EQ(attention->scale, 0.25f);
        EXPECT_EQ(attention->blockRows, 64u); // bf16: the tensor-core kernels
        // Their forward: two 16-row tiles of queries a warp at head dims up to 64.
        EXPECT_EQ(attention->forwardBlockRows, 128u);
        // q, k and v are read in place from the packed projection [4, 32, 3 x 64]: three
        // windows of one buffer, 64 bf16 (128 bytes) apart, rows 192 apart; o is written
        // token-major, [4, 32, 64], head h at column 16 h.
        EXPECT_EQ(attention->q, attention->k);
        EXPECT_EQ(attention->q, attention->v);
        EXPECT_EQ(plan.buffers[attention->q].shape, (std::vector<int64_t>{4, 32, 192}));
        const plan::AttentionLayout packed{0, 32 * 192, 16, 192};
        EXPECT_EQ(attention->qLayout, packed);
        EXPECT_EQ(attention->kLayout, (plan::AttentionLayout{128, 32 * 192, 16, 192}));
        EXPECT_EQ(attention->vLayout, (plan::AttentionLayout{256, 32 * 192, 16, 192}));
        EXPECT_EQ(attention->oLayout, (plan::AttentionLayout{0, 32 * 64, 16, 64}));
        // The forward writes o and its f32 row log-sum-exp into buffers the backward reads;
        // the backward runs no forward kernel.
        EXPECT_EQ(plan.buffers[attention->out].shape, (std::vector<int64_t>{4, 32, 64}));
        ASSERT_NE(attention->lse, plan::kNoBuffer);
        EXPECT_EQ(plan.buffers[attention->lse].shape, (std::vector<int64_t>{4, 4, 32}));
        EXPECT_EQ(plan.buffers[attention->lse].dtype, plan::DType::F32);
        if (attention->pass == plan::AttentionPass::Forward) {
          ++forward;
          const std::string fwd = plan.device.kernels[attention->forwardKernel].entry;
          EXPECT_EQ(fwd, "ampc_flash_attention_fwd_bf16_d16_causal");
          EXPECT_EQ(attention->dqKernel, plan::kNoKernel);
          forwardOutputs.insert({attention->out, attention->lse});
        } else {
          ++backward;
          EXPECT_EQ(attention->forwardKernel, plan::kNoKernel);
          EXPECT_TRUE(attention->readsSavedForward());
          EXPECT_TRUE(forwardOutputs.count({attention->out, attention->lse}))
              << "the backward reads the o and lse of a forward";
          // dq, dk and dv: the three windows of the packed gradient.
          EXPECT_EQ(attention->dq, attention->dk);
          EXPECT_EQ(attention->dq, attention->dv);
          EXPECT_EQ(plan.buffers[attention->dq].shape, (std::vector<int64_t>{4, 32, 192}));
          EXPECT_EQ(plan.buffers[attention->dOut].shape, (std::vector<int64_t>{4, 32, 64}));
          EXPECT_EQ(plan.device.kernels[attention->dkdvKernel].entry,
                    "ampc_flash_attention_bwd_dkdv_bf16_d16_causal");
          EXPECT_EQ(plan.device.kernels[attention->deltaKernel].entry,
                    "ampc_flash_attention_bwd_delta_bf16_d16");
        }
        ASSERT_EQ(group.instructions.size(), 1u);
        const plan::Instruction &instruction = plan.instructions[group.instructions[0]];
        EXPECT_EQ(instruction.op, attention->pass == plan::AttentionPass::Forward
                                      ? plan::OpCode::QkvAttention
                                      : plan::OpCode::QkvAttentionGrad);
        EXPECT_EQ(instruction.operands[0], attention->q);
      }
      if (const auto *matmul = std::get_if<plan::MatmulStep>(&step)) {
        // The MLP's first layer: matmul + bias + tanh gelu, the sum kept for gelu_grad.
        if (matmul->epilogue == plan::Epilogue::GeluAuxBias) {
          ++auxEpilogues;
          EXPECT_EQ(matmul->m, 128);
          EXPECT_EQ(matmul->n, 256);
          EXPECT_EQ(matmul->k, 64);
          EXPECT_NE(matmul->aux, plan::kNoBuffer);
          EXPECT_EQ(group.instructions.size(), 3u); // matmul, add, gelu
          preActivations.insert(matmul->aux);
        }
        // The attention projection and the MLP's second matmul add the bias and the residual
        // stream in the matmul: D = A B + bias + C, beta 1, C the stream before the block.
        if (matmul->epilogue == plan::Epilogue::Bias && matmul->beta == 1.0f) {
          ++residuals;
          ASSERT_NE(matmul->c, plan::kNoBuffer);
          EXPECT_NE(matmul->c, matmul->d);
          EXPECT_EQ(plan.buffers[matmul->c].shape, (std::vector<int64_t>{4, 32, 64}));
          ASSERT_EQ(group.instructions.size(), 3u); // matmul, bias add, residual add
          const plan::Instruction &residual = plan.instructions[group.instructions[2]];
          EXPECT_EQ(residual.results[0], matmul->d);
          EXPECT_TRUE(residual.operands[0] == matmul->c || residual.operands[1] == matmul->c);
        }
        // Its backward: dh = dy . W2^T times gelu'(the saved sum), one matmul (DGELU) that
        // reads the aux the forward wrote and never stores dh.
        if (matmul->epilogue == plan::Epilogue::DGelu) {
          ++geluGradients;
          EXPECT_EQ(matmul->m, 128);
          EXPECT_EQ(matmul->n, 256);
          EXPECT_EQ(matmul->k, 64);
          EXPECT_TRUE(matmul->transB);
          EXPECT_EQ(matmul->bias, plan::kNoBuffer);
          EXPECT_TRUE(preActivations.count(matmul->aux)) << "reads a forward's aux";
          EXPECT_NE(matmul->d, matmul->aux);
          ASSERT_EQ(group.instructions.size(), 2u); // matmul, gelu_grad
          const plan::Instruction &geluGrad = plan.instructions[group.instructions[1]];
          EXPECT_EQ(geluGrad.operands[0], matmul->aux);
          EXPECT_EQ(geluGrad.results[0], matmul->d);
        }
      }
    }
  EXPECT_EQ(forward, 2u);
  EXPECT_EQ(backward, 2u);
  EXPECT_EQ(auxEpilogues, 2u);
  EXPECT_EQ(geluGradients, 2u);
  EXPECT_EQ(residuals, 4u);
  // cuBLASLt reads a residual C with D's type: validation refuses a C of another dtype.
  {
    plan::Plan changed = plan;
    plan::MatmulStep *residual = nullptr;
    for (plan::DeviceGroup &group : changed.device.microStep.groups)
      for (plan::DeviceStep &step : group.steps)
        if (auto *matmul = std::get_if<plan::MatmulStep>(&step);
            matmul && !residual && matmul->beta == 1.0f && matmul->c != matmul->d)
          residual = matmul;
    ASSERT_NE(residual, nullptr);
    // A placed f32 buffer of C's element count (an f32 gradient of the micro step).
    const int64_t elements = plan::numElements(changed.buffers[residual->c]);
    uint32_t f32Buffer = plan::kNoBuffer;
    for (const plan::ArenaPlacement &placement : changed.device.microStep.placements)
      if (f32Buffer == plan::kNoBuffer &&
          changed.buffers[placement.buffer].dtype == plan::DType::F32 &&
          plan::numElements(changed.buffers[placement.buffer]) == elements)
        f32Buffer = placement.buffer;
    ASSERT_NE(f32Buffer, plan::kNoBuffer);
    residual->c = f32Buffer;
    try {
      plan::validatePlan(changed);
      ADD_FAILURE() << "a residual C in f32 passed validation";
    } catch (const std::exception &error) {
      EXPECT_NE(std::string(error.what()).find("must have D's dtype bf16"), std::string::npos)
          << error.what();
    }
  }
  // Validation names an attention step that does not match its kernels: \p tamper changes every
  // attention step (only the backward ones with \p backwardOnly).
  auto expectInvalidAttention = [&](bool backwardOnly,
                                    const std::function<void(plan::AttentionStep &)> &tamper,
                                    const std::string &message) {
    plan::Plan changed = plan;
    for (plan::DeviceGroup &group : changed.device.microStep.groups)
      for (plan::DeviceStep &step : group.steps)
        if (auto *attention = std::get_if<plan::AttentionStep>(&step);
            attention && (!backwardOnly || attention->pass == plan::AttentionPass::Backward))
          tamper(*attention);
    try {
      plan::validatePlan(changed);
      ADD_FAILURE() << "passed validation; expected: " << message;
    } catch (const std::exception &error) {
      EXPECT_NE(std::string(error.what()).find(message), std::string::npos) << error.what();
    }
  };
  auto expectInvalidBackward = [&](const std::function<void(plan::AttentionStep &)> &tamper,
                                   const std::string &message) {
    expectInvalidAttention(true, tamper, message);
  };
  // The rows per block are the kernels' (32 or 64); the forward's are its kernel's, 128 for the
  // tensor-core kernels at D = 16.
  expectInvalidAttention(
      false, [](plan::AttentionStep &step) { step.blockRows = 48; },
      "block rows 48 is not one the flash kernels have");
  expectInvalidAttention(
      false, [](plan::AttentionStep &step) { step.forwardBlockRows = 64; },
      "forward block rows 64 is not the forward kernel's (128 at block rows 64 and head dim 16)");
  // A backward reads both the saved o and lse or neither, and with them runs no forward kernel.
  expectInvalidBackward([](plan::AttentionStep &step) { step.lse = plan::kNoBuffer; },
                        "a backward step reads both the saved o and lse, or neither");
  expectInvalidBackward([&](plan::AttentionStep &step) { step.forwardKernel = step.dqKernel; },
                        "a backward step with a saved o and lse runs no forward kernel");
  // Every operand's layout keeps its rows 16-byte aligned and inside its buffer.
  expectInvalidBackward([](plan::AttentionStep &step) { step.kLayout.offset = 8; },
                        "starts at byte 8, not a multiple of 16");
  expectInvalidBackward([](plan::AttentionStep &step) { step.vLayout.rowStride = 4; },
                        "the row stride at least the head dim");
  expectInvalidBackward([](plan::AttentionStep &step) { step.oLayout.offset = 16; },
                        "(batch x heads x rows x head dim by its layout)");
  expectInvalidBackward([](plan::AttentionStep &step) { step.qLayout.batchStride *= 2; }, "q (");
  // The classifier's gradient takes over the bytes of its logits.
  size_t reuses = 0;
  for (const plan::ArenaPlacement &placement : plan.device.microStep.placements)
    if (placement.reuses != plan::kNoBuffer) {
      ++reuses;
      EXPECT_EQ(plan.buffers[placement.buffer].shape, (std::vector<int64_t>{4, 32, 256}));
      EXPECT_EQ(plan.buffers[placement.reuses].shape, (std::vector<int64_t>{4, 32, 256}));
    }
  EXPECT_EQ(reuses, 1u);
  // The flash module holds exactly the four entry points the model launches.
  size_t flashEntries = 0;
  for (size_t m = 0; m < plan.device.modules.size(); ++m)
    if (plan.device.modules[m].name == "ampc_flash_attention_bf16_d16")
      for (const plan::DeviceKernel &kernel : plan.device.kernels)
        if (kernel.module == m) {
          ++flashEntries;
          EXPECT_NE(compiled.moduleSources[m].find(kernel.entry + "("), std::string::npos);
        }
  EXPECT_EQ(flashEntries, 4u);
}

TEST(DeviceProgram, WeightGradientsAccumulateInTheirMatmuls) {
  // Each weight matrix's gradient (x^T dy, an f32 product) is added into its accumulator by its
  // matmul: C = D = the accumulator, beta 1, and the product has no memory on the device. Each
  // bias's and each layer norm's gamma and beta gradient (an f32 column total) is added by its
  // column sum's second stage, and is never stored either. Under fp16 loss scaling every
  // gradient is unscaled by an accumulate kernel instead.
  for (const PrecisionCase &mode : kPrecisions) {
    DeviceCompiled compiled = compileDevice(test_support::examplePath("gpt/tiny.mlir"), mode);
    ASSERT_EQ(compiled.error, "") << mode.mode;
    const plan::Plan &plan = compiled.plan;
    std::set<uint32_t> placed;
    for (const plan::ArenaPlacement &placement : plan.device.microStep.placements)
      placed.insert(placement.buffer);
    size_t accumulating = 0, columnTotals = 0, kernels = 0;
    for (const plan::DeviceGroup &group : plan.device.microStep.groups) {
      const plan::Instruction *product = nullptr;
      std::vector<const plan::Instruction *> accumulates;
      for (uint32_t index : group.instructions) {
        const plan::Instruction &instruction = plan.instructions[index];
        if (instruction.op == plan::OpCode::MatMul)
          product = &instruction;
        if (instruction.op == plan::OpCode::Accumulate)
          accumulates.push_back(&instruction);
      }
      for (const plan::Instruction *accumulate : accumulates) {
        const uint32_t accumulator = accumulate->operands[0];
        EXPECT_EQ(plan.buffers[accumulator].role, plan::BufferRole::State);
        if (!product || accumulate->operands[1] != product->results[0]) {
          if (group.kind == "accumulate") {
            ++kernels;
            continue;
          }
          // A column sum's total, added by the sum's second stage: never stored.
          ++columnTotals;
          EXPECT_TRUE(group.kind == "bias_grad" || group.kind == "reduction") << group.kind;
          EXPECT_EQ(placed.count(accumulate->operands[1]), 0u);
          continue;
        }
        ++accumulating;
        EXPECT_TRUE(group.kind == "matmul_accumulate" || group.kind == "bias_grad") << group.kind;
        // The accumulate adds the product itself, and the product is never stored.
        EXPECT_EQ(placed.count(product->results[0]), 0u);
        const auto *matmul = std::get_if<plan::MatmulStep>(&group.steps[0]);
        ASSERT_NE(matmul, nullptr) << group.kind;
        EXPECT_EQ(matmul->d, accumulator);
        EXPECT_EQ(matmul->c, accumulator);
        EXPECT_EQ(matmul->alpha, 1.0f);
        EXPECT_EQ(matmul->beta, 1.0f);
      }
    }
    const bool scaled = std::string(mode.mode) == "fp16";
    // tiny: 2 layers x (4 biases, 2 layer norms), a final layer norm, and the positions'
    // gradient (a sum over the batch): column totals, in fp16 too (divided by the loss scale
    // in the sums' second stages); the 8 weight matrices' gradients are added by their
    // matmuls, except under loss scaling (a matmul does not divide by the scale): accumulate
    // kernels then, as the tied embedding's gradient (its two uses' gradients added) always.
    EXPECT_EQ(accumulating, scaled ? 0u : 8u) << mode.mode;
    EXPECT_EQ(columnTotals, 19u) << mode.mode;
    EXPECT_EQ(kernels, scaled ? 9u : 1u) << mode.mode;
    EXPECT_EQ(accumulating + columnTotals + kernels, plan.parameters.size()) << mode.mode;
    // Every other matmul writes its product (beta 0).
    for (const plan::DeviceGroup &group : plan.device.microStep.groups)
      for (const plan::DeviceStep &step : group.steps)
        if (const auto *matmul = std::get_if<plan::MatmulStep>(&step);
            matmul && matmul->c == plan::kNoBuffer)
          EXPECT_EQ(matmul->beta, 0.0f);
  }
}

TEST(DeviceProgram, ClassifierAndEmbeddingsReportBadIds) {
  DeviceCompiled compiled =
      compileDevice(test_support::examplePath("gpt/tiny.mlir"), kPrecisions[2]);
  ASSERT_EQ(compiled.error, "");
  const plan::Plan &plan = compiled.plan;
  std::set<plan::OpCode> reporting;
  for (const plan::DeviceGroup &group : plan.device.microStep.groups)
    for (const plan::DeviceStep &step : group.steps) {
      const auto *launch = std::get_if<plan::LaunchStep>(&step);
      if (!launch)
        continue;
      bool record = false;
      int64_t site = -1;
      for (const plan::DeviceArgument &arg : launch->args) {
        record |= arg.kind == plan::ArgKind::ErrorRecord;
        if (arg.name == "site")
          site = arg.value;
      }
      if (!record)
        continue;
      // The site is one of the group's instructions: the op whose data is checked.
      ASSERT_GE(site, 0);
      EXPECT_NE(std::find(group.instructions.begin(), group.instructions.end(), site),
                group.instructions.end());
      reporting.insert(plan.instructions[site].op);
      const std::string &source =
          compiled.moduleSources[plan.device.kernels[launch->kernel].module];
      EXPECT_NE(source.find("reportError("), std::string::npos);
    }
  EXPECT_TRUE(reporting.count(plan::OpCode::CrossEntropy));
  EXPECT_TRUE(reporting.count(plan::OpCode::Embedding));
  EXPECT_TRUE(reporting.count(plan::OpCode::EmbeddingGrad));
}

TEST(DeviceProgram, LossScalingKeepsItsFloorCountInThePlan) {
  DeviceCompiled compiled =
      compileDevice(test_support::examplePath("gpt/tiny.mlir"), kPrecisions[1]);
  ASSERT_EQ(compiled.error, "");
  const plan::Plan &plan = compiled.plan;
  ASSERT_EQ(plan.lossScaling.mode, plan::LossScaleMode::Dynamic);
  EXPECT_EQ(plan.buffers[plan.lossScaling.floorHits].name, "loss_scale.floor_hits");
  // The last group of the optimizer step runs update_loss_scale with the five buffers.
  const plan::DeviceGroup &last = plan.device.optimizerStep.groups.back();
  ASSERT_EQ(last.instructions.size(), 1u);
  EXPECT_EQ(plan.optimizerInstructions[last.instructions[0]].op, plan::OpCode::UpdateLossScale);
  const auto &launch = std::get<plan::LaunchStep>(last.steps.at(0));
  std::set<uint32_t> state;
  for (const plan::DeviceArgument &arg : launch.args)
    if (arg.kind == plan::ArgKind::Buffer)
      state.insert(arg.buffer);
  const plan::LossScaling &scaling = plan.lossScaling;
  EXPECT_EQ(state, (std::set<uint32_t>{scaling.scale, scaling.growthTracker, scaling.foundNonFinite,
                                       scaling.appliedSteps, scaling.floorHits}));
  // The global norm sums its squares in double, as the CPU backend does.
  const plan::DeviceGroup &norm = plan.device.optimizerStep.groups.front();
  ASSERT_EQ(plan.optimizerInstructions[norm.instructions.at(0)].op, plan::OpCode::GlobalNorm);
  for (const plan::DeviceStep &step : norm.steps) {
    const auto &normLaunch = std::get<plan::LaunchStep>(step);
    const std::string &source =
        compiled.moduleSources[plan.device.kernels[normLaunch.kernel].module];
    EXPECT_NE(source.find("double"), std::string::npos);
  }
}

//===----------------------------------------------------------------------===//
// Matmul forms and limits
//===----------------------------------------------------------------------===//

/// A model whose loss is mse(matmul(x, w)) for the given types (x, w, and y the product's).
std::string matmulModel(const std::string &x, const std::string &w, const std::string &y,
                        const std::string &flags = "") {
  return "graph.model @mm {\n"
         "  graph.param @w : tensor<" +
         w +
         "xf32> init #graph.normal<std = 0.02>\n"
         "  graph.input @x : tensor<" +
         x +
         "xf32>\n"
         "  graph.input @t : tensor<" +
         y +
         "xf32>\n"
         "  func.func @forward() {\n"
         "    %w = graph.get_param @w : tensor<" +
         w +
         "xf32>\n"
         "    %x = graph.get_input @x : tensor<" +
         x +
         "xf32>\n"
         "    %t = graph.get_input @t : tensor<" +
         y +
         "xf32>\n"
         "    %y = graph.matmul %x, %w " +
         flags + ": tensor<" + x + "xf32>, tensor<" + w +
         "xf32>\n"
         "    %l = graph.mse_loss %y, %t : tensor<" +
         y +
         "xf32>\n"
         "    graph.loss %l : tensor<f32>\n"
         "    return\n  }\n}\n";
}

/// The first matmul step of the micro step.
const plan::MatmulStep *firstMatmul(const plan::Plan &plan) {
  for (const plan::DeviceGroup &group : plan.device.microStep.groups)
    for (const plan::DeviceStep &step : group.steps)
      if (const auto *matmul = std::get_if<plan::MatmulStep>(&step))
        return matmul;
  return nullptr;
}

TEST(DeviceProgram, MatmulForms) {
  // Batch dims of the lhs over a 2-D weight: more rows of one product.
  DeviceCompiled flat = compileDeviceText(matmulModel("2x3x4", "4x5", "2x3x5"), kPrecisions[2]);
  ASSERT_EQ(flat.error, "");
  const plan::MatmulStep *matmul = firstMatmul(flat.plan);
  ASSERT_NE(matmul, nullptr);
  EXPECT_EQ(matmul->m, 6);
  EXPECT_EQ(matmul->n, 5);
  EXPECT_EQ(matmul->k, 4);
  EXPECT_EQ(matmul->batch, 1);
  EXPECT_NO_THROW(plan::validatePlan(flat.plan));

  // Equal batch dims: a strided batch.
  DeviceCompiled batched =
      compileDeviceText(matmulModel("2x3x4", "2x4x5", "2x3x5"), kPrecisions[0]);
  ASSERT_EQ(batched.error, "");
  matmul = firstMatmul(batched.plan);
  ASSERT_NE(matmul, nullptr);
  EXPECT_EQ(matmul->batch, 2);
  EXPECT_EQ(matmul->strideA, 12);
  EXPECT_EQ(matmul->strideB, 20);
  EXPECT_EQ(matmul->strideD, 15);
  EXPECT_NO_THROW(plan::validatePlan(batched.plan));

  // One lhs for every rhs of the batch: stride 0.
  DeviceCompiled shared = compileDeviceText(matmulModel("3x4", "2x4x5", "2x3x5"), kPrecisions[2]);
  ASSERT_EQ(shared.error, "");
  matmul = firstMatmul(shared.plan);
  ASSERT_NE(matmul, nullptr);
  EXPECT_EQ(matmul->batch, 2);
  EXPECT_EQ(matmul->strideA, 0);
  EXPECT_EQ(matmul->strideB, 20);
  EXPECT_NO_THROW(plan::validatePlan(shared.plan));

  // A broadcast no strided batch describes: refused with a reason, the plan still fine.
  DeviceCompiled broadcast =
      compileDeviceText(matmulModel("2x1x3x4", "1x2x4x5", "2x2x3x5"), kPrecisions[2]);
  EXPECT_NE(broadcast.error.find("broadcasts batch dimensions that a strided cuBLASLt batch "
                                 "cannot describe"),
            std::string::npos)
      << broadcast.error;
}

TEST(DeviceProgram, AttentionHeadDimsTheKernelsLack) {
  const std::string model = R"(
graph.model @att {
  graph.input @q : tensor<2x8x48xf32>
  graph.param @k : tensor<2x8x48xf32> init #graph.normal<std = 1.0>
  graph.input @v : tensor<2x8x48xf32>
  func.func @forward() {
    %q = graph.get_input @q : tensor<2x8x48xf32>
    %k = graph.get_param @k : tensor<2x8x48xf32>
    %v = graph.get_input @v : tensor<2x8x48xf32>
    %o = graph.attention %q, %k, %v causal : tensor<2x8x48xf32>, tensor<2x8x48xf32>, tensor<2x8x48xf32>
    %l = graph.mse_loss %o, %v : tensor<2x8x48xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
)";
  DeviceCompiled compiled = compileDeviceText(model, kPrecisions[2]);
  EXPECT_NE(compiled.error.find("has head dim 48; the flash kernels have 16, 32, 64 and 128"),
            std::string::npos)
      << compiled.error;
}

TEST(DeviceProgram, FlashModuleSource) {
  // 16-bit storage: the tensor-core kernels, the delta kernel shared.
  const std::string source = flashAttentionModuleSource(
      "f16", 64, {"ampc_flash_attention_bwd_delta_f16_d64", "ampc_flash_attention_fwd_f16_d64"});
  EXPECT_NE(source.find("#include \"runtime/cuda/device/FlashAttentionMma.cuh\""),
            std::string::npos);
  EXPECT_NE(source.find("mmaAttentionForward<Element, 64, false>"), std::string::npos);
  EXPECT_NE(source.find("flashAttentionBackwardDelta<Element, 64>"), std::string::npos);
  EXPECT_EQ(source.find("BackwardDq"), std::string::npos);
  EXPECT_NE(source.find("using Element = ampc::flash::F16;"), std::string::npos);
  // f32: the fp32-FMA kernels.
  const std::string f32 =
      flashAttentionModuleSource("f32", 32, {"ampc_flash_attention_bwd_dq_f32_d32_causal"});
  EXPECT_NE(f32.find("#include \"runtime/cuda/device/FlashAttention.cuh\""), std::string::npos);
  EXPECT_NE(f32.find("flashAttentionBackwardDq<Element, 32, true>"), std::string::npos);
  EXPECT_EQ(f32.find("mma"), std::string::npos);
}

} // namespace
