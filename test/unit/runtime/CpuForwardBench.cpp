//===- CpuForwardBench.cpp - GPT-10M forward loss on the CPU backend ------===//
//
// Builds the plan examples/gpt/gpt10m.mlir lowers to (6 pre-LayerNorm
// blocks, d 384, 6 heads, vocab 8192, T 256; tied output head) directly with
// the plan API, and times parameter initialisation and one forward run.
// Usage: ampc_cpu_forward_bench [batch [f32|f64]]; batch defaults to 64
// (16384 tokens, ~0.5 TFLOP).
//
//===----------------------------------------------------------------------===//

#include "PlanTestUtils.h"
#include "runtime/cpu/Executor.h"
#include "runtime/cpu/ThreadPool.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

using namespace ampc;
using namespace ampc::test;
using plan::InitKind;
using V = std::vector<int64_t>;

namespace {

constexpr int64_t kLayers = 6, kWidth = 384, kHeads = 6, kVocab = 8192, kContext = 256;

plan::Plan gptPlan(int64_t batch) {
  const int64_t d = kWidth, t = kContext, h = kHeads, dh = d / h;
  const DType f32 = DType::F32;
  PlanBuilder b("gpt10m");
  const uint32_t wte = b.parameter("wte", f32, {kVocab, d}, InitKind::Normal, 0, 0.02);
  const uint32_t wpe = b.parameter("wpe", f32, {t, d}, InitKind::Normal, 0, 0.02);
  const uint32_t tokens = b.input("tokens", DType::I32, {batch, t}, kVocab);
  const uint32_t targets = b.input("targets", DType::I32, {batch, t}, kVocab);
  auto param = [&](const std::string &name, V shape, InitKind init) {
    return b.parameter(name, f32, shape, init, 0, 0.02);
  };
  auto matmul = [&](uint32_t x, uint32_t w, V shape, int64_t transposeB = 0) {
    return b.op(OpCode::MatMul, {x, w}, f32, shape,
                {{"transpose_a", int64_t(0)}, {"transpose_b", transposeB}});
  };
  auto layerNorm = [&](uint32_t x, uint32_t g, uint32_t beta) {
    return b.op(OpCode::LayerNorm, {x, g, beta}, f32, {batch, t, d}, {{"epsilon", 1e-5}});
  };
  auto heads = [&](uint32_t x) {
    uint32_t r = b.op(OpCode::Reshape, {x}, f32, {batch, t, h, dh});
    return b.op(OpCode::Transpose, {r}, f32, {batch, h, t, dh}, {{"permutation", V{0, 2, 1, 3}}});
  };
  uint32_t x = b.op(OpCode::Embedding, {wte, tokens}, f32, {batch, t, d});
  x = b.op(OpCode::Add, {x, wpe}, f32, {batch, t, d});
  for (int64_t layer = 0; layer < kLayers; ++layer) {
    const std::string p = "h" + std::to_string(layer) + ".";
    uint32_t a = layerNorm(x, param(p + "ln1.g", {d}, InitKind::Ones),
                           param(p + "ln1.b", {d}, InitKind::Zeros));
    uint32_t qkv =
        matmul(a, param(p + "attn.qkv.w", {d, 3 * d}, InitKind::Normal), {batch, t, 3 * d});
    qkv = b.op(OpCode::Add, {qkv, param(p + "attn.qkv.b", {3 * d}, InitKind::Zeros)}, f32,
               {batch, t, 3 * d});
    uint32_t parts[3];
    for (int64_t i = 0; i < 3; ++i)
      parts[i] =
          heads(b.op(OpCode::Slice, {qkv}, f32, {batch, t, d}, {{"starts", V{0, 0, i * d}}}));
    uint32_t y = b.op(OpCode::Attention, {parts[0], parts[1], parts[2]}, f32, {batch, h, t, dh},
                      {{"causal", int64_t(1)}, {"scale", 1 / std::sqrt(double(dh))}});
    y = b.op(OpCode::Transpose, {y}, f32, {batch, t, h, dh}, {{"permutation", V{0, 2, 1, 3}}});
    y = b.op(OpCode::Reshape, {y}, f32, {batch, t, d});
    y = matmul(y, param(p + "attn.proj.w", {d, d}, InitKind::Normal), {batch, t, d});
    y = b.op(OpCode::Add, {y, param(p + "attn.proj.b", {d}, InitKind::Zeros)}, f32, {batch, t, d});
    x = b.op(OpCode::Add, {x, y}, f32, {batch, t, d});
    uint32_t m = layerNorm(x, param(p + "ln2.g", {d}, InitKind::Ones),
                           param(p + "ln2.b", {d}, InitKind::Zeros));
    uint32_t f = matmul(m, param(p + "mlp.fc.w", {d, 4 * d}, InitKind::Normal), {batch, t, 4 * d});
    f = b.op(OpCode::Add, {f, param(p + "mlp.fc.b", {4 * d}, InitKind::Zeros)}, f32,
             {batch, t, 4 * d});
    f = b.op(OpCode::Gelu, {f}, f32, {batch, t, 4 * d}, {{"approximate", int64_t(1)}});
    uint32_t g = matmul(f, param(p + "mlp.fc2.w", {4 * d, d}, InitKind::Normal), {batch, t, d});
    g = b.op(OpCode::Add, {g, param(p + "mlp.fc2.b", {d}, InitKind::Zeros)}, f32, {batch, t, d});
    x = b.op(OpCode::Add, {x, g}, f32, {batch, t, d});
  }
  x = layerNorm(x, param("ln_f.g", {d}, InitKind::Ones), param("ln_f.b", {d}, InitKind::Zeros));
  uint32_t logits = matmul(x, wte, {batch, t, kVocab}, 1);
  b.plan.loss = b.op(OpCode::CrossEntropy, {logits, targets}, f32, {},
                     {{"ignore_index", int64_t(-100)}, {"reduction", int64_t(0)}});
  return b.plan;
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

} // namespace

int main(int argc, char **argv) {
  const int64_t batch = argc > 1 ? std::atoll(argv[1]) : 64;
  const bool f64 = argc > 2 && std::strcmp(argv[2], "f64") == 0;
  plan::Plan plan = gptPlan(batch);
  cpu::Executor executor(plan, f64 ? cpu::Precision::F64 : cpu::Precision::F32);
  auto start = std::chrono::steady_clock::now();
  executor.initializeParameters(1);
  executor.randomizeInputs(2);
  const double initSeconds = secondsSince(start);
  // Forward FLOPs: 2 x (weight matmul params) x tokens + causal attention.
  const double tokens = double(batch) * kContext;
  const double weights = kLayers * 12.0 * kWidth * kWidth + kVocab * double(kWidth);
  const double flops =
      2 * weights * tokens + kLayers * 2.0 * tokens * kContext * kWidth; // QK^T + PV, half masked
  cpu::RunOptions options;
  options.keepTemporaries = false;
  std::vector<double> seconds;
  options.instructionSeconds = &seconds;
  start = std::chrono::steady_clock::now();
  const double loss = executor.run(options);
  const double runSeconds = secondsSince(start);
  std::printf("gpt10m forward, batch %lld (%.0f tokens), %s, %d threads: init %.2f s, "
              "forward %.2f s (%.1f GFLOP, %.1f GFLOP/s), loss %.4f (ln V = %.4f)\n",
              (long long)batch, tokens, f64 ? "f64" : "f32", cpu::threadCount(), initSeconds,
              runSeconds, flops * 1e-9, flops * 1e-9 / runSeconds, loss, std::log(double(kVocab)));
  // Where the time goes, per opcode.
  std::map<std::string, double> perOpcode;
  for (size_t i = 0; i < seconds.size(); ++i)
    perOpcode[plan::opCodeName(plan.instructions[i].op)] += seconds[i];
  for (const auto &[name, total] : perOpcode)
    std::printf("  %-14s %6.2f s\n", name.c_str(), total);
  return 0;
}
