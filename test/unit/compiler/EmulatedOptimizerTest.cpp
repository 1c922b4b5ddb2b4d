//===- EmulatedOptimizerTest.cpp - The optimizer kernel in the device emulator -===//
//
// The optimizer step's one multi-tensor launch (the entry point compiler/cuda/
// CudaCodegenTraining.cpp writes around runtime/cuda/device/Optimizer.cuh's multiTensorUpdate)
// compiled for the host and run thread by thread in the device emulator, for a model whose
// parameters span several 4096-element chunks and whose element counts are not all multiples
// of 4 (the kernel moves 4 consecutive elements per 16-byte access and takes the rest one by
// one).
// Every parameter, moment, momentum buffer, zeroed accumulator and bf16/f16 copy the kernel
// writes is compared bit for bit with the CPU backend's update (runtime/cpu/OptimizerKernels.cpp)
// run on the same f32 values: AdamW and SGD with weight decay and gradient clipping, in bf16
// (bf16 copies, t from the run's step), fp16 with dynamic loss scaling (f16 copies, t from the
// applied steps, and the skipped step of a non-finite gradient) and fp32 (no copies).
// The step's other kernels (Optimizer.cuh too) against the CPU backend: the global norm's two
// stages, the learning-rate schedule over warmup, decay and past the run's end, the gradient
// seed, and the loss-scale update's growth, backoff, floor and count.
//
//===----------------------------------------------------------------------===//

#include "CodegenHelpers.h"
#include "HostKernel.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/numerics/Float16.h"
#include "runtime/numerics/LossScale.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

using namespace ampc;

namespace {

/// The kernel's table entry (Optimizer.cuh's OptimizerTensor, 88 bytes), filled as
/// the runtime fills it.
struct OptimizerTensor {
  float *param;
  float *grad;
  float *firstMoment;
  float *secondMoment;
  void *copy;
  int32_t copyType; // 0 none, 1 bf16, 2 f16
  int64_t elements;
  int64_t firstBlock;
  float beta1, beta2, eps, weightDecay, clipNorm, momentum;
};
static_assert(sizeof(OptimizerTensor) == 88 && offsetof(OptimizerTensor, elements) == 48 &&
                  offsetof(OptimizerTensor, beta1) == 64,
              "the layout of docs/plan-format.md's OptimizerTensor");

/// A buffer at a 256-byte-aligned address, as the runtime places every buffer.
template <typename T> struct AlignedBuffer {
  struct Free {
    void operator()(T *pointer) const { std::free(pointer); }
  };
  std::unique_ptr<T, Free> data;
  size_t count = 0;
  explicit AlignedBuffer(size_t n)
      : data(static_cast<T *>(std::aligned_alloc(256, (n * sizeof(T) + 255) / 256 * 256))),
        count(n) {}
  T *get() const { return data.get(); }
  T &operator[](size_t i) const { return data.get()[i]; }
};

/// Two linear layers against an MSE target. w is 67 x 131 = 8777 elements: three chunks, the
/// last 585 long (146 packs and 1 element); b has 131 (32 packs and 3); w2 131 x 8 = 1048 (one
/// chunk of whole packs).
const char *kModel = R"(graph.model @optimizer {
  graph.param @w : tensor<67x131xf32> init #graph.normal<std = 0.5>
  graph.param @b : tensor<131xf32> init #graph.normal<std = 0.5>
  graph.param @w2 : tensor<131x8xf32> init #graph.normal<std = 0.5>
  graph.input @x : tensor<2x67xf32>
  graph.input @t : tensor<2x8xf32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<67x131xf32>
    %b = graph.get_param @b : tensor<131xf32>
    %w2 = graph.get_param @w2 : tensor<131x8xf32>
    %x = graph.get_input @x : tensor<2x67xf32>
    %t = graph.get_input @t : tensor<2x8xf32>
    %h0 = graph.matmul %x, %w : tensor<2x67xf32>, tensor<67x131xf32>
    %h = graph.add %h0, %b : tensor<2x131xf32>, tensor<131xf32>
    %y = graph.matmul %h, %w2 : tensor<2x131xf32>, tensor<131x8xf32>
    %l = graph.mse_loss %y, %t : tensor<2x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
)";

struct OptimizerCase {
  int precision;         ///< index into kPrecisions: 0 bf16, 1 fp16 with loss scaling, 2 fp32
  const char *optimizer; ///< "adamw" or "sgd"
  bool skip = false;     ///< the loss scaler found a non-finite gradient this step
};

void PrintTo(const OptimizerCase &c, std::ostream *os) {
  *os << kPrecisions[c.precision].mode << " " << c.optimizer << (c.skip ? " (skipped)" : "");
}

std::string caseName(const ::testing::TestParamInfo<OptimizerCase> &info) {
  return std::string(kPrecisions[info.param.precision].mode) + "_" + info.param.optimizer +
         (info.param.skip ? "_skipped" : "");
}

/// One parameter's f32 state before the step, and the kernel's buffers.
struct TensorState {
  std::vector<float> param, grad, firstMoment, secondMoment; ///< updated by the reference
  std::vector<float> initialParam;
  AlignedBuffer<float> deviceParam, deviceGrad, deviceFirst, deviceSecond;
  AlignedBuffer<uint16_t> deviceCopy;
  explicit TensorState(size_t n)
      : deviceParam(n), deviceGrad(n), deviceFirst(n), deviceSecond(n), deviceCopy(n) {}
};

/// The index of the first element where \p actual and \p expected differ in their bits, or -1.
template <typename T> long firstDifference(const T *actual, const std::vector<T> &expected) {
  for (size_t i = 0; i < expected.size(); ++i)
    if (std::memcmp(&actual[i], &expected[i], sizeof(T)) != 0)
      return static_cast<long>(i);
  return -1;
}

class EmulatedOptimizer : public ::testing::TestWithParam<OptimizerCase> {};

TEST_P(EmulatedOptimizer, MatchesTheCpuBackendBitForBit) {
  const OptimizerCase c = GetParam();
  const bool adamw = std::string(c.optimizer) == "adamw";
  const bool scaled = c.precision == 1;
  graph::GraphBuildTrainingOptions training;
  training.optimizer = c.optimizer;
  training.weightDecay = 0.1;
  training.clipNorm = 1.0;
  const std::vector<GeneratedKernel> kernels =
      generateForText(kModel, kPrecisions[c.precision], training);
  const GeneratedKernel *optimizer = nullptr;
  for (const GeneratedKernel &kernel : kernels)
    if (kernel.kind == "optimizer") {
      ASSERT_EQ(optimizer, nullptr) << "one optimizer launch per step";
      optimizer = &kernel;
    }
  ASSERT_NE(optimizer, nullptr);
  ASSERT_EQ(optimizer->table.size(), 3u);
  // The three tensors' chunks: 3 + 1 + 1 blocks, each of whole 4-element packs but the last of
  // w and of b.
  EXPECT_EQ(optimizer->launch.elements, 5);
  const char *copyType = c.precision == 0 ? "bf16" : c.precision == 1 ? "f16" : "";
  bool sawCopy = false;
  for (const TensorTableEntry &entry : optimizer->table) {
    EXPECT_TRUE(entry.copyType.empty() || entry.copyType == copyType) << entry.param;
    sawCopy = sawCopy || !entry.copyType.empty();
  }
  EXPECT_EQ(sawCopy, c.precision != 2) << "the matmul weights' reduced-precision copies";

  test::TemporaryDirectory directory("ampc_emulated_optimizer");
  test::HostKernel kernel(*optimizer, directory.path);
  ASSERT_TRUE(kernel.ok()) << kernel.error() << "\n" << optimizer->source;

  // The step's scalars: the learning rate, a gradient norm above clip_norm (so the gradients
  // are scaled by about 1 / 3.5), the step (t = 5) or, under loss scaling, the applied steps
  // (t = 7) and the overflow flag.
  const float lr = 0.01f, norm = 3.5f;
  const uint64_t step = 4;
  const float appliedSteps = 6, foundNonfinite = c.skip ? 1.0f : 0.0f;
  const uint64_t runScalars[3] = {1234, step, 100};

  std::mt19937 generator(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::unique_ptr<TensorState>> states;
  std::vector<OptimizerTensor> table;
  for (const TensorTableEntry &entry : optimizer->table) {
    const size_t n = static_cast<size_t>(entry.elements);
    auto state = std::make_unique<TensorState>(n);
    for (size_t i = 0; i < n; ++i) {
      state->param.push_back(normal(generator));
      state->grad.push_back(normal(generator));
      state->firstMoment.push_back(0.1f * normal(generator));
      state->secondMoment.push_back(adamw ? 0.01f * std::abs(normal(generator)) : 0.0f);
      state->deviceCopy[i] = 0xffff; // NaN bits: an element the kernel misses shows
    }
    state->initialParam = state->param;
    std::memcpy(state->deviceParam.get(), state->param.data(), 4 * n);
    std::memcpy(state->deviceGrad.get(), state->grad.data(), 4 * n);
    std::memcpy(state->deviceFirst.get(), state->firstMoment.data(), 4 * n);
    std::memcpy(state->deviceSecond.get(), state->secondMoment.data(), 4 * n);
    OptimizerTensor tensor{};
    tensor.param = state->deviceParam.get();
    tensor.grad = state->deviceGrad.get();
    tensor.firstMoment = state->deviceFirst.get();
    tensor.secondMoment = adamw ? state->deviceSecond.get() : nullptr;
    tensor.copy = entry.copyType.empty() ? nullptr : state->deviceCopy.get();
    tensor.copyType = entry.copyType.empty() ? 0 : entry.copyType == "bf16" ? 1 : 2;
    tensor.elements = entry.elements;
    tensor.firstBlock = entry.firstBlock;
    tensor.beta1 = static_cast<float>(entry.beta1);
    tensor.beta2 = static_cast<float>(entry.beta2);
    tensor.eps = static_cast<float>(entry.eps);
    tensor.weightDecay = static_cast<float>(entry.weightDecay);
    tensor.clipNorm = static_cast<float>(entry.clipNorm);
    tensor.momentum = static_cast<float>(entry.momentum);
    // Weights decay; the 1-D bias does not (ParamOp::decays: rank >= 2 unless flagged).
    EXPECT_EQ(tensor.weightDecay, entry.param == "b" ? 0.0f : 0.1f) << entry.param;
    EXPECT_EQ(tensor.clipNorm, 1.0f);
    table.push_back(tensor);
    states.push_back(std::move(state));
  }

  // The arguments in the kernel's order: the table and its length, then (in the order the
  // generator adds them) the learning rate and the gradient norm, the scaler's state or the
  // run scalars.
  long long entries = static_cast<long long>(table.size());
  float lrValue = lr, normValue = norm, found = foundNonfinite, applied = appliedSteps;
  std::vector<void *> addresses(optimizer->params.size(), nullptr);
  std::vector<void *> arguments;
  int inputs = 0;
  for (size_t i = 0; i < optimizer->params.size(); ++i) {
    const KernelParam &param = optimizer->params[i];
    using Role = KernelParam::Role;
    if (param.role == Role::Scalar) {
      ASSERT_EQ(param.value, "table_entries");
      arguments.push_back(&entries);
      continue;
    }
    if (param.role == Role::Table)
      addresses[i] = table.data();
    else if (param.role == Role::Input)
      addresses[i] = inputs++ == 0 ? &lrValue : &normValue;
    else if (param.role == Role::State && param.value.find("found_nonfinite") != std::string::npos)
      addresses[i] = &found;
    else if (param.role == Role::State && param.value.find("applied_steps") != std::string::npos)
      addresses[i] = &applied;
    else if (param.role == Role::RunScalars)
      addresses[i] = const_cast<uint64_t *>(runScalars);
    else
      FAIL() << "unexpected argument " << param.name << " bound to " << param.value;
    arguments.push_back(&addresses[i]);
  }
  ASSERT_EQ(inputs, 2);
  kernel.run(optimizer->launch, arguments);

  // The CPU backend's update on the same values, with the hyper-parameters as the table holds
  // them (f32) and its clip coefficient and t.
  for (size_t e = 0; e < table.size(); ++e) {
    const OptimizerTensor &tensor = table[e];
    TensorState &state = *states[e];
    const std::string &name = optimizer->table[e].param;
    const double clip = cpu::kernels::clipCoefficient(tensor.clipNorm, norm);
    if (!c.skip) {
      if (adamw) {
        cpu::kernels::AdamWConfig config{};
        config.lr = lr;
        config.beta1 = tensor.beta1;
        config.beta2 = tensor.beta2;
        config.eps = tensor.eps;
        config.weightDecay = tensor.weightDecay;
        config.clip = clip;
        config.t = scaled ? uint64_t(appliedSteps) + 1 : step + 1;
        cpu::kernels::adamW<float>(config, state.param.data(), state.grad.data(),
                                   state.firstMoment.data(), state.secondMoment.data(),
                                   tensor.elements);
      } else {
        const cpu::kernels::SgdConfig config{lr, tensor.momentum, tensor.weightDecay, clip};
        cpu::kernels::sgd<float>(config, state.param.data(), state.grad.data(),
                                 state.firstMoment.data(), tensor.elements);
      }
    }
    // Skipped or not, the accumulator is zeroed and the copy holds the (new) weight.
    std::fill(state.grad.begin(), state.grad.end(), 0.0f);
    EXPECT_EQ(firstDifference(tensor.param, state.param), -1) << name << ": param";
    EXPECT_EQ(firstDifference(tensor.grad, state.grad), -1) << name << ": grad";
    EXPECT_EQ(firstDifference(tensor.firstMoment, state.firstMoment), -1)
        << name << (adamw ? ": m" : ": momentum buffer");
    if (adamw)
      EXPECT_EQ(firstDifference(tensor.secondMoment, state.secondMoment), -1) << name << ": v";
    if (tensor.copyType != 0) {
      std::vector<uint16_t> copy;
      for (float p : state.param)
        copy.push_back(tensor.copyType == 1 ? numerics::floatToBF16Bits(p)
                                            : numerics::floatToF16Bits(p));
      EXPECT_EQ(firstDifference(state.deviceCopy.get(), copy), -1) << name << ": copy";
    }
    // Applied, the step moved every weight (weight decay alone does); skipped, none: the
    // comparisons above are not of buffers nobody touched.
    int64_t moved = 0;
    for (int64_t i = 0; i < tensor.elements; ++i)
      moved += tensor.param[i] != state.initialParam[i];
    EXPECT_EQ(moved, c.skip ? 0 : tensor.elements) << name;
  }
}

//===----------------------------------------------------------------------===//
// The step's other kernels: the global norm, the schedule, the seed, the loss-scale update
//===----------------------------------------------------------------------===//

/// The global norm's table entry (Optimizer.cuh's NormTensor, 24 bytes).
struct NormTensor {
  const float *data;
  int64_t elements;
  int64_t firstBlock;
};
static_assert(sizeof(NormTensor) == 24, "the layout of docs/plan-format.md's NormTensor");

/// The kernels of \p kernels of kind \p kind, in launch order.
std::vector<const GeneratedKernel *> kernelsOfKind(const std::vector<GeneratedKernel> &kernels,
                                                   const std::string &kind) {
  std::vector<const GeneratedKernel *> found;
  for (const GeneratedKernel &kernel : kernels)
    if (kernel.kind == kind)
      found.push_back(&kernel);
  return found;
}

/// The index of \p kernel's parameter bound to \p value.
size_t boundTo(const GeneratedKernel &kernel, const std::string &value) {
  for (size_t i = 0; i < kernel.params.size(); ++i)
    if (kernel.params[i].value == value)
      return i;
  ADD_FAILURE() << "no parameter of " << kernel.name << " is bound to " << value;
  return 0;
}

TEST(EmulatedOptimizerStep, ScalarKernelsMatchTheCpuBackend) {
  // fp16 with dynamic loss scaling (GradScaler's settings, min scale 1), two micro steps, a
  // cosine schedule with warmup over the run's steps.
  graph::GraphBuildTrainingOptions training;
  training.schedule = "cosine";
  training.warmupSteps = 3;
  training.minLr = 1e-5;
  training.accumSteps = 2;
  const std::vector<GeneratedKernel> kernels = generateForText(kModel, kPrecisions[1], training);
  test::TemporaryDirectory directory("ampc_emulated_optimizer_step");

  // The global norm: per-chunk sums of squares in double, then their root, against the CPU
  // backend's sum (the same double values added in another order: at most an ulp of f32).
  const auto norms = kernelsOfKind(kernels, "global_norm");
  ASSERT_EQ(norms.size(), 2u);
  const GeneratedKernel &partial = *norms[0], &finish = *norms[1];
  ASSERT_EQ(partial.table.size(), 3u);
  EXPECT_EQ(partial.launch.elements, 5); // 3 + 1 + 1 chunks of 4096
  std::mt19937 generator(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> accumulators;
  std::vector<NormTensor> table;
  double squares = 0;
  for (const TensorTableEntry &entry : partial.table) {
    std::vector<float> values(static_cast<size_t>(entry.elements));
    for (float &value : values)
      value = normal(generator);
    cpu::kernels::addSquares(values.data(), entry.elements, squares);
    accumulators.push_back(std::move(values));
    table.push_back({accumulators.back().data(), entry.elements, entry.firstBlock});
  }
  std::vector<double> partials(static_cast<size_t>(partial.launch.elements), -1.0);
  long long entries = static_cast<long long>(table.size()), blocks = partial.launch.elements;
  float norm = -1.0f;
  {
    test::HostKernel kernel(partial, directory.path);
    ASSERT_TRUE(kernel.ok()) << kernel.error() << "\n" << partial.source;
    void *tablePointer = table.data(), *partialsPointer = partials.data();
    std::vector<void *> arguments = {&tablePointer, &entries, &partialsPointer};
    ASSERT_EQ(partial.params.size(), arguments.size());
    kernel.run(partial.launch, arguments);
  }
  {
    test::HostKernel kernel(finish, directory.path);
    ASSERT_TRUE(kernel.ok()) << kernel.error() << "\n" << finish.source;
    void *partialsPointer = partials.data(), *normPointer = &norm;
    std::vector<void *> arguments = {&partialsPointer, &blocks, &normPointer};
    ASSERT_EQ(finish.params.size(), arguments.size());
    kernel.run(finish.launch, arguments);
  }
  const double expectedNorm = std::sqrt(squares);
  EXPECT_NEAR(norm, expectedNorm, expectedNorm * 0x1p-22);

  // The schedule: the CPU backend's rate of each step (warmup, decay, past the run's end),
  // rounded to f32, from the run scalars.
  const auto schedules = kernelsOfKind(kernels, "lr_schedule");
  ASSERT_EQ(schedules.size(), 1u);
  {
    test::HostKernel kernel(*schedules[0], directory.path);
    ASSERT_TRUE(kernel.ok()) << kernel.error() << "\n" << schedules[0]->source;
    cpu::kernels::LrSchedule schedule;
    schedule.kind = 1;
    schedule.lr = training.lr;
    schedule.minLr = training.minLr;
    schedule.warmupSteps = training.warmupSteps;
    for (uint64_t step : {0, 1, 2, 3, 4, 50, 99, 100, 150}) {
      uint64_t runScalars[3] = {1234, step, 100};
      float rate = -1.0f;
      void *ratePointer = &rate, *scalarsPointer = runScalars;
      std::vector<void *> arguments = {&ratePointer, &scalarsPointer};
      ASSERT_EQ(schedules[0]->params.size(), arguments.size());
      kernel.run(schedules[0]->launch, arguments);
      EXPECT_EQ(rate, static_cast<float>(cpu::kernels::scheduledLearningRate(schedule, step, 100)))
          << "step " << step;
    }
  }

  // The seed of the backward pass: the loss scale divided by the micro steps.
  const auto seeds = kernelsOfKind(kernels, "grad_seed");
  ASSERT_EQ(seeds.size(), 1u);
  {
    test::HostKernel kernel(*seeds[0], directory.path);
    ASSERT_TRUE(kernel.ok()) << kernel.error() << "\n" << seeds[0]->source;
    float scale = 3072.0f, seed = -1.0f;
    void *scalePointer = &scale, *seedPointer = &seed;
    std::vector<void *> arguments = {&scalePointer, &seedPointer};
    ASSERT_EQ(seeds[0]->params.size(), arguments.size());
    EXPECT_EQ(boundTo(*seeds[0], "@loss_scale.scale"), 0u);
    kernel.run(seeds[0]->launch, arguments);
    EXPECT_EQ(seed, 1536.0f);
  }

  // The loss-scale update: numerics::updateLossScale on the scaler's f32 state buffers, the
  // applied steps counted, the flag cleared; growth, backoff, the floor and a plain count. Run
  // with the kernel's own launch (32 threads, one after another in the emulator): only the first
  // thread may touch the scalars, so a second read-modify-write would show as a second update.
  const auto updates = kernelsOfKind(kernels, "update_loss_scale");
  ASSERT_EQ(updates.size(), 1u);
  const GeneratedKernel &update = *updates[0];
  test::HostKernel kernel(update, directory.path);
  ASSERT_TRUE(kernel.ok()) << kernel.error() << "\n" << update.source;
  struct ScaleCase {
    float scale, tracker, floorHits, found;
  };
  for (const ScaleCase &c : {ScaleCase{1024, 1999, 0, 0}, ScaleCase{1024, 5, 0, 1},
                             ScaleCase{1.5f, 3, 2, 1}, ScaleCase{8, 10, 1, 0}}) {
    // Each buffer at the argument bound to it.
    std::vector<float> state(update.params.size(), -1.0f);
    state[boundTo(update, "@loss_scale.scale")] = c.scale;
    state[boundTo(update, "@loss_scale.growth_tracker")] = c.tracker;
    state[boundTo(update, "@loss_scale.floor_hits")] = c.floorHits;
    state[boundTo(update, "@loss_scale.found_nonfinite")] = c.found;
    state[boundTo(update, "@loss_scale.applied_steps")] = 6;
    std::vector<void *> pointers, arguments;
    for (float &value : state)
      pointers.push_back(&value);
    for (void *&pointer : pointers)
      arguments.push_back(&pointer);
    kernel.run(update.launch, arguments);
    numerics::LossScaleConfig config;
    config.minScale = 1.0f;
    numerics::LossScaleState expected{c.scale, static_cast<int32_t>(c.tracker),
                                      static_cast<int32_t>(c.floorHits)};
    numerics::updateLossScale(expected, config, c.found != 0);
    const std::string what = "scale " + std::to_string(c.scale) + ", tracker " +
                             std::to_string(c.tracker) + ", found " + std::to_string(c.found);
    EXPECT_EQ(state[boundTo(update, "@loss_scale.scale")], expected.scale) << what;
    EXPECT_EQ(state[boundTo(update, "@loss_scale.growth_tracker")],
              static_cast<float>(expected.growthTracker))
        << what;
    EXPECT_EQ(state[boundTo(update, "@loss_scale.floor_hits")],
              static_cast<float>(expected.floorHits))
        << what;
    EXPECT_EQ(state[boundTo(update, "@loss_scale.found_nonfinite")], 0.0f) << what;
    EXPECT_EQ(state[boundTo(update, "@loss_scale.applied_steps")], c.found != 0 ? 6.0f : 7.0f)
        << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Steps, EmulatedOptimizer,
                         ::testing::Values(OptimizerCase{0, "adamw"}, OptimizerCase{1, "adamw"},
                                           OptimizerCase{1, "adamw", true},
                                           OptimizerCase{2, "adamw"}, OptimizerCase{0, "sgd"},
                                           OptimizerCase{1, "sgd"}, OptimizerCase{1, "sgd", true},
                                           OptimizerCase{2, "sgd"}),
                         caseName);

} // namespace
