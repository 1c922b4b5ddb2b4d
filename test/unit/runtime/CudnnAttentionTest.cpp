//===- CudnnAttentionTest.cpp - cuDNN attention's checks, no GPU needed ---===//
//
// What CudnnAttention decides before it touches a GPU: which problems cuDNN's fused attention
// is refused (and the one-line reasons), which cuDNN releases are refused for which shapes, how
// the backward's workspace is divided, and that constructing one where no GPU (or no cuDNN) is
// usable is a CudaError rather than a crash. The graphs themselves only run on a GPU.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudnnAttention.h"
#include "runtime/cuda/Errors.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

namespace {

using namespace ampc::cuda;
using ampc::plan::DType;

/// GPT-124M's attention step: q, k, v windows of one [B, T, 3 H D] buffer, o and dO
/// token-major [B, T, H D], the gradients contiguous [B, H, T, D].
CudnnAttentionProblem gptProblem() {
  CudnnAttentionProblem p;
  p.batch = 4;
  p.heads = 12;
  p.queries = p.keys = 1024;
  p.headDim = 64;
  p.causal = true;
  p.scale = 0.125f;
  p.type = DType::BF16;
  const int64_t T = p.queries, H = p.heads, D = p.headDim;
  p.q = p.k = p.v = {T * 3 * H * D, D, 3 * H * D};
  p.o = p.dO = {T * H * D, D, H * D};
  p.dq = p.dk = p.dv = CudnnAttentionProblem::contiguous(H, T, D);
  return p;
}

/// The message for \p p, which must not be empty.
std::string refusal(const CudnnAttentionProblem &p) {
  const std::string message = cudnnAttentionProblemError(p);
  EXPECT_FALSE(message.empty());
  return message;
}

TEST(CudnnAttentionProblem, PackedGptLayoutsAreAccepted) {
  EXPECT_EQ(cudnnAttentionProblemError(gptProblem()), "");
  CudnnAttentionProblem f16 = gptProblem();
  f16.type = DType::F16;
  EXPECT_EQ(cudnnAttentionProblemError(f16), "");
}

TEST(CudnnAttentionProblem, SizesMustBePositive) {
  CudnnAttentionProblem p = gptProblem();
  p.keys = 0;
  EXPECT_EQ(refusal(p), "batch, heads, queries, keys and head dimension must be positive "
                        "(got B=4, H=12, T=1024, S=0, D=64)");
}

TEST(CudnnAttentionProblem, OnlySixteenBitTypes) {
  CudnnAttentionProblem p = gptProblem();
  p.type = DType::F32;
  EXPECT_EQ(refusal(p), "cuDNN's fused attention takes bf16 or f16 operands, not f32");
}

TEST(CudnnAttentionProblem, HeadDimensionIsAMultipleOf8UpTo128) {
  CudnnAttentionProblem p = gptProblem();
  p.headDim = 60;
  EXPECT_EQ(refusal(p), "the head dimension must be a multiple of 8 and at most 128 (got 60)");
  p.headDim = 136;
  EXPECT_NE(refusal(p).find("(got 136)"), std::string::npos);
  p = gptProblem();
  p.headDim = 128;
  p.q = p.k = p.v = p.o = p.dO = p.dq = p.dk = p.dv =
      CudnnAttentionProblem::contiguous(12, 1024, 128);
  EXPECT_EQ(cudnnAttentionProblemError(p), "");
}

TEST(CudnnAttentionProblem, CausalNeedsAsManyQueriesAsKeys) {
  CudnnAttentionProblem p = gptProblem();
  p.queries = 512;
  EXPECT_EQ(refusal(p), "causal attention needs as many queries as keys (got T=512, S=1024): "
                        "cuDNN's causal diagonal is top-left aligned");
  // Without the mask the alignment does not matter.
  p.causal = false;
  EXPECT_EQ(cudnnAttentionProblemError(p), "");
}

TEST(CudnnAttentionProblem, OneQueryAndOneKeyIsRefused) {
  CudnnAttentionProblem p = gptProblem();
  p.queries = p.keys = 1;
  EXPECT_EQ(refusal(p), "one query and one key is not supported by cuDNN's attention backward");
}

TEST(CudnnAttentionProblem, ScaleMustBeFinite) {
  CudnnAttentionProblem p = gptProblem();
  p.scale = std::numeric_limits<float>::infinity();
  EXPECT_NE(refusal(p).find("the scale must be finite"), std::string::npos);
}

TEST(CudnnAttentionProblem, StridesAreWholeSixteenByteSteps) {
  CudnnAttentionProblem p = gptProblem();
  p.dO = {1024 * 768, 64, 772};
  EXPECT_EQ(refusal(p), "dO's strides {786432, 64, 772} must be positive multiples of 8 "
                        "elements (16 bytes)");
  p = gptProblem();
  p.dk = {0, 65536, 64};
  EXPECT_EQ(refusal(p), "dk's strides {0, 65536, 64} must be positive multiples of 8 elements "
                        "(16 bytes)");
  p = gptProblem();
  p.v = {1024 * 2304, 64, 56};
  EXPECT_EQ(refusal(p), "v's row stride 56 is smaller than the head dimension 64");
}

TEST(CudnnAttentionVersion, OnlyCudnn9) {
  EXPECT_EQ(cudnnAttentionVersionError(gptProblem(), 8907),
            "cuDNN 8.9.7 is not supported: the attention graphs are written for cuDNN 9.x");
  EXPECT_EQ(cudnnAttentionVersionError(gptProblem(), 90000), "");
  EXPECT_EQ(cudnnAttentionVersionError(gptProblem(), 91900), "");
  EXPECT_EQ(formatCudnnVersion(91900), "9.19.0");
  EXPECT_EQ(formatCudnnVersion(90501), "9.5.1");
  EXPECT_EQ(formatCudnnVersion(8907), "8.9.7");
}

TEST(CudnnAttentionVersion, ReleasesWithBackwardBugsAreRefused) {
  EXPECT_EQ(cudnnAttentionVersionError(gptProblem(), 91000),
            "cuDNN 9.10.0's attention backward has known bugs; use cuDNN 9.10.2 or newer");
  EXPECT_NE(cudnnAttentionVersionError(gptProblem(), 91001), "");
  EXPECT_EQ(cudnnAttentionVersionError(gptProblem(), 91002), "");
  // A forward alone is not refused for the backward's bugs.
  EXPECT_EQ(cudnnAttentionVersionError(gptProblem(), 91000, /*backward=*/false), "");
  CudnnAttentionProblem shortKeys = gptProblem();
  shortKeys.queries = shortKeys.keys = 100;
  EXPECT_NE(cudnnAttentionVersionError(shortKeys, 91500), "");
  EXPECT_EQ(cudnnAttentionVersionError(shortKeys, 91500, /*backward=*/false), "");
}

TEST(CudnnAttentionVersion, KeysNotAMultipleOf128NeedCudnn9151) {
  CudnnAttentionProblem p = gptProblem();
  p.queries = p.keys = 1000;
  EXPECT_EQ(cudnnAttentionVersionError(p, 91500),
            "cuDNN 9.15.0's attention backward can access memory out of bounds in CUDA graphs "
            "when the key count is not a multiple of 128 (got 1000); use cuDNN 9.15.1 or newer");
  EXPECT_EQ(cudnnAttentionVersionError(p, 91501), "");
  EXPECT_EQ(cudnnAttentionVersionError(gptProblem(), 91500), "");
}

TEST(CudnnAttentionWorkspace, BuffersFollowThePlansWorkspaceAligned) {
  const CudnnAttentionProblem p = gptProblem();
  const CudnnBackwardWorkspace layout = cudnnBackwardWorkspace(p, 1000);
  EXPECT_EQ(layout.dqAccumulatorOffset, 1024u);
  EXPECT_EQ(layout.dqAccumulatorBytes, 4u * 12 * 1024 * 64 * 4);
  EXPECT_EQ(layout.softmaxSumOffset, 1024u + 4u * 12 * 1024 * 64 * 4);
  EXPECT_EQ(layout.softmaxSumBytes, 4u * 12 * 1024 * 4);
  EXPECT_EQ(layout.totalBytes, layout.softmaxSumOffset + layout.softmaxSumBytes);

  // No plan workspace: the accumulator starts the workspace; odd sizes are padded to 256.
  CudnnAttentionProblem small = p;
  small.batch = small.heads = 1;
  small.queries = small.keys = 3;
  small.headDim = 8;
  const CudnnBackwardWorkspace tight = cudnnBackwardWorkspace(small, 0);
  EXPECT_EQ(tight.dqAccumulatorOffset, 0u);
  EXPECT_EQ(tight.dqAccumulatorBytes, 3u * 8 * 4);
  EXPECT_EQ(tight.softmaxSumOffset, 256u);
  EXPECT_EQ(tight.totalBytes, 256u + 3 * 4);
}

TEST(CudnnAttention, AnInvalidProblemIsRefusedBeforeCudnnIsOpened) {
  CudnnAttentionProblem p = gptProblem();
  p.type = DType::F32;
  try {
    CudnnAttention attention(p, nullptr);
    FAIL() << "an f32 problem was accepted";
  } catch (const CudaError &error) {
    EXPECT_EQ(error.kind(), CudaErrorKind::InvalidArgument);
    EXPECT_STREQ(error.what(),
                 "cuDNN attention: cuDNN's fused attention takes bf16 or f16 operands, not f32");
  }
}

TEST(CudnnAttention, WithoutAUsableGpuConstructionIsACudnnError) {
  // Where cuDNN and a GPU are both usable this builds both graphs, and there is nothing to
  // check here. Elsewhere either loading cuDNN or creating its handle fails, as a CudaError.
  CudnnAttentionProblem p = gptProblem();
  p.batch = 1;
  p.heads = 2;
  p.queries = p.keys = 128;
  p.q = p.k = p.v = p.o = p.dO = p.dq = p.dk = p.dv = CudnnAttentionProblem::contiguous(2, 128, 64);
  try {
    CudnnAttention attention(p, nullptr);
    GTEST_SKIP() << "cuDNN and a GPU are usable here: " << attention.description();
  } catch (const CudaError &error) {
    EXPECT_EQ(error.kind(), CudaErrorKind::Cudnn) << error.what();
    const std::string message = error.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_FALSE(message.empty());
  }
}

} // namespace
