//===- CudnnEngineProbeTest.cpp - cuDNN takes our attention graphs, without a GPU -===//
//
// runtime/cuda/CudnnAttention.cpp builds cuDNN's fused attention from backend operations in the
// pattern cuDNN's flash-attention engines recognise; a graph off that pattern gets no engine.
// cuDNN can choose and compile engines for a GPU it is only told about (device-less
// compilation), and then fails only where it loads their kernels into the driver: here, the
// CUDA toolkit's stub libcuda (this test's LD_LIBRARY_PATH, set by CMake, puts it first). So
// each graph must get that far, for GPT-124M's attention shapes on an H100/H200 (sm_90) and an
// A100 (sm_80) described in cuDNN's JSON device description, against the cuDNN release this
// machine has. Skips when cuDNN cannot be loaded or predates device descriptions.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudnnAttention.h"
#include "test/unit/runtime/CudnnDevices.h"

#include <gtest/gtest.h>

#include <cudnn_graph.h>

#include <string>

namespace ampc::cuda {
namespace {

/// GPT-124M's attention step (a micro batch of 4 to keep the probe small: the engines do not
/// depend on it) as a compiled GPT lays it out: q, k, v windows of one [B, T, 3 H D] buffer,
/// o and dO token-major, the gradients packed like q, k, v.
CudnnAttentionProblem gptAttention(bool causal, plan::DType type, int64_t headDim) {
  CudnnAttentionProblem p;
  p.batch = 4;
  p.heads = 768 / headDim;
  p.queries = p.keys = 1024;
  p.headDim = headDim;
  p.causal = causal;
  p.scale = 1.0f / 8.0f;
  p.type = type;
  const int64_t width = p.heads * headDim;
  p.q = p.k = p.v = p.dq = p.dk = p.dv = {p.queries * 3 * width, headDim, 3 * width};
  p.o = p.dO = {p.queries * width, headDim, width};
  return p;
}

/// Expects \p graph's outcome to be an engine that compiled for the described GPU: its plan
/// finalized (a real GPU is here), or failed only at loading the kernels into the stub driver.
void expectAnEngine(const char *graph, const std::string &failure, int status) {
  if (failure.empty())
    return;
  EXPECT_EQ(status, CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER)
      << "cuDNN found no engine for the " << graph << " graph: " << failure;
  EXPECT_EQ(failure.find("NOT_SUPPORTED"), std::string::npos) << failure;
}

void probe(const char *device, const char *deviceJson, const CudnnAttentionProblem &problem) {
  const CudnnEngineProbe probe = probeCudnnAttention(problem, deviceJson);
  if (!probe.available)
    GTEST_SKIP() << "cannot probe cuDNN here: " << probe.unavailable;
  SCOPED_TRACE(std::string(device) + (problem.causal ? ", causal" : ", not causal") +
               ", head dim " + std::to_string(problem.headDim));
  expectAnEngine("forward", probe.forward, probe.forwardStatus);
  expectAnEngine("backward", probe.backward, probe.backwardStatus);
}

TEST(CudnnEngineProbe, GptAttentionOnHopper) {
  probe("H100", kH100, gptAttention(true, plan::DType::BF16, 64));
  probe("H100", kH100, gptAttention(false, plan::DType::BF16, 64));
}

TEST(CudnnEngineProbe, GptAttentionOnAmpere) {
  probe("A100", kA100, gptAttention(true, plan::DType::BF16, 64));
}

TEST(CudnnEngineProbe, HalfPrecisionAndHeadDim128OnHopper) {
  probe("H100", kH100, gptAttention(true, plan::DType::F16, 128));
}

} // namespace
} // namespace ampc::cuda
