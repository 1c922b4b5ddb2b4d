//===- FlashAttentionEmulatedTest.cpp - Attention kernels run in the device emulator -===//
//
// Runs the flash-attention kernels (FlashAttention.cuh's fp32-FMA ones, and for bf16 / f16
// FlashAttentionMma.cuh's tensor-core ones) thread by thread in the device emulator, with the
// grids the CUDA executor launches, and compares o, lse, dq, dk and dv with the CPU backend's
// attention computed in double on the same rounded inputs, with the GPU test's tolerances.
// Shapes cover partial tiles, several tiles per slice, causal masking with S > T (the causal
// offset) and head dims 16 to 128. Outputs start as NaN, so an element no thread writes fails.
//
//===----------------------------------------------------------------------===//

#include "DeviceEmulator.h"

#include "runtime/cuda/device/FlashAttentionMma.cuh"

#include "../runtime/AttentionReference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace {

using namespace ampc::test;
using ampc::emu::Dim3;

constexpr int kSlices = 2;

struct Case {
  Storage storage;
  bool tensorCores;
  int headDim;
  bool causal;
  int queries;
  int keys;
};

std::string caseName(const ::testing::TestParamInfo<Case> &info) {
  const Case &c = info.param;
  return std::string(storageName(c.storage)) + (c.tensorCores ? "_mma" : "_fma") + "_d" +
         std::to_string(c.headDim) + (c.causal ? "_causal" : "") + "_T" +
         std::to_string(c.queries) + "_S" + std::to_string(c.keys);
}

/// Device buffers of one case: host vectors the kernels read and write.
struct Buffers {
  std::vector<char> q, k, v, dO, o, dq, dk, dv;
  std::vector<float> lse, delta;
};

std::vector<char> poisoned(size_t bytes) { return std::vector<char>(bytes, '\xff'); }

template <class E> const typename E::Storage *in(const std::vector<char> &bytes) {
  return reinterpret_cast<const typename E::Storage *>(bytes.data());
}
template <class E> typename E::Storage *out(std::vector<char> &bytes) {
  return reinterpret_cast<typename E::Storage *>(bytes.data());
}

/// Forward, delta, dq and dk/dv, launched as Executor::runAttention launches them.
template <class E, int D, bool kCausal, bool kMma>
void runKernels(Buffers &b, int queries, int keys, float scale) {
  namespace f = ampc::flash;
  const int rowsPerBlock = kMma ? f::kMmaBlockRows : f::kRowsPerBlock;
  const Dim3 block{f::kThreads, 1, 1};
  const Dim3 queryGrid{static_cast<unsigned>((queries + rowsPerBlock - 1) / rowsPerBlock), kSlices,
                       1};
  const Dim3 keyGrid{static_cast<unsigned>((keys + rowsPerBlock - 1) / rowsPerBlock), kSlices, 1};
  const auto *q = in<E>(b.q), *k = in<E>(b.k), *v = in<E>(b.v), *dO = in<E>(b.dO);
  auto *o = out<E>(b.o), *dq = out<E>(b.dq), *dk = out<E>(b.dk), *dv = out<E>(b.dv);
  float *lse = b.lse.data(), *delta = b.delta.data();
  ampc::emu::launch(queryGrid, block, [&] {
    if constexpr (kMma)
      f::mmaAttentionForward<E, D, kCausal>(q, k, v, o, lse, queries, keys, scale);
    else
      f::flashAttentionForward<E, D, kCausal>(q, k, v, o, lse, queries, keys, scale);
  });
  const long long rows = static_cast<long long>(kSlices) * queries;
  ampc::emu::launch(Dim3{static_cast<unsigned>((rows + 3) / 4), 1, 1}, block,
                    [&] { f::flashAttentionBackwardDelta<E, D>(o, dO, delta, rows); });
  ampc::emu::launch(queryGrid, block, [&] {
    if constexpr (kMma)
      f::mmaAttentionBackwardDq<E, D, kCausal>(q, k, v, dO, lse, delta, dq, queries, keys, scale);
    else
      f::flashAttentionBackwardDq<E, D, kCausal>(q, k, v, dO, lse, delta, dq, queries, keys, scale);
  });
  ampc::emu::launch(keyGrid, block, [&] {
    if constexpr (kMma)
      f::mmaAttentionBackwardDkDv<E, D, kCausal>(q, k, v, dO, lse, delta, dk, dv, queries, keys,
                                                 scale);
    else
      f::flashAttentionBackwardDkDv<E, D, kCausal>(q, k, v, dO, lse, delta, dk, dv, queries, keys,
                                                   scale);
  });
}

template <class E, int D, bool kMma> void dispatchCausal(const Case &c, Buffers &b, float scale) {
  if (c.causal)
    runKernels<E, D, true, kMma>(b, c.queries, c.keys, scale);
  else
    runKernels<E, D, false, kMma>(b, c.queries, c.keys, scale);
}

template <class E, bool kMma> void dispatchHeadDim(const Case &c, Buffers &b, float scale) {
  switch (c.headDim) {
  case 16:
    return dispatchCausal<E, 16, kMma>(c, b, scale);
  case 32:
    return dispatchCausal<E, 32, kMma>(c, b, scale);
  case 64:
    return dispatchCausal<E, 64, kMma>(c, b, scale);
  case 128:
    return dispatchCausal<E, 128, kMma>(c, b, scale);
  }
  FAIL() << "head dim " << c.headDim;
}

void dispatch(const Case &c, Buffers &b, float scale) {
  namespace f = ampc::flash;
  if (c.storage == Storage::F32)
    return dispatchHeadDim<f::F32, false>(c, b, scale);
  if (c.storage == Storage::Bf16)
    return c.tensorCores ? dispatchHeadDim<f::Bf16, true>(c, b, scale)
                         : dispatchHeadDim<f::Bf16, false>(c, b, scale);
  return c.tensorCores ? dispatchHeadDim<f::F16, true>(c, b, scale)
                       : dispatchHeadDim<f::F16, false>(c, b, scale);
}

class FlashAttentionEmulated : public ::testing::TestWithParam<Case> {};

TEST_P(FlashAttentionEmulated, ForwardAndBackwardMatchTheCpuReference) {
  const Case c = GetParam();
  const int T = c.queries, S = c.keys, D = c.headDim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::mt19937 generator(99u + 7u * static_cast<unsigned>(D) + (c.causal ? 1u : 0u));
  const size_t qCount = static_cast<size_t>(kSlices) * T * D;
  const size_t kCount = static_cast<size_t>(kSlices) * S * D;
  const std::vector<double> q = randomInputs(qCount, c.storage, generator);
  const std::vector<double> k = randomInputs(kCount, c.storage, generator);
  const std::vector<double> v = randomInputs(kCount, c.storage, generator);
  const std::vector<double> dy = randomInputs(qCount, c.storage, generator);

  const size_t bytes = elementBytes(c.storage);
  Buffers b;
  b.q = encode(q, c.storage);
  b.k = encode(k, c.storage);
  b.v = encode(v, c.storage);
  b.dO = encode(dy, c.storage);
  b.o = poisoned(qCount * bytes);
  b.dq = poisoned(qCount * bytes);
  b.dk = poisoned(kCount * bytes);
  b.dv = poisoned(kCount * bytes);
  b.lse.assign(static_cast<size_t>(kSlices) * T, NAN);
  b.delta.assign(static_cast<size_t>(kSlices) * T, NAN);
  dispatch(c, b, static_cast<float>(scale));

  const AttentionExpected expected =
      referenceAttention(q, k, v, dy, kSlices, T, S, D, scale, c.causal);
  const std::vector<double> lse(b.lse.begin(), b.lse.end());

  const double tolerance = c.storage == Storage::F32 ? 1e-4 : 2e-2;
  EXPECT_LT(relativeError(decode(b.o, c.storage), expected.o), tolerance) << "o";
  EXPECT_LT(relativeError(lse, expected.lse), 1e-5) << "lse";
  EXPECT_LT(relativeError(decode(b.dq, c.storage), expected.dq), tolerance) << "dq";
  EXPECT_LT(relativeError(decode(b.dk, c.storage), expected.dk), tolerance) << "dk";
  EXPECT_LT(relativeError(decode(b.dv, c.storage), expected.dv), tolerance) << "dv";
}

// The tensor-core kernels in every head dim, both masks, one and several tiles per slice; the
// fp32-FMA kernels (the only ones for f32 storage) as the GPU test runs them.
INSTANTIATE_TEST_SUITE_P(TensorCores, FlashAttentionEmulated,
                         ::testing::Values(Case{Storage::Bf16, true, 64, false, 70, 70},
                                           Case{Storage::Bf16, true, 64, true, 37, 70},
                                           Case{Storage::Bf16, true, 64, true, 130, 130},
                                           Case{Storage::F16, true, 64, false, 70, 70},
                                           Case{Storage::F16, true, 64, true, 37, 70},
                                           Case{Storage::Bf16, true, 128, true, 100, 100},
                                           Case{Storage::F16, true, 128, false, 40, 90},
                                           Case{Storage::Bf16, true, 32, true, 70, 70},
                                           Case{Storage::F16, true, 16, false, 33, 20}),
                         caseName);
INSTANTIATE_TEST_SUITE_P(Fma, FlashAttentionEmulated,
                         ::testing::Values(Case{Storage::F32, false, 64, false, 70, 70},
                                           Case{Storage::F32, false, 64, true, 37, 70},
                                           Case{Storage::Bf16, false, 64, true, 37, 70},
                                           Case{Storage::F32, false, 128, true, 40, 40}),
                         caseName);

} // namespace
