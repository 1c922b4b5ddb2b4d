//===- FlashAttentionEmulatedTest.cpp - Attention kernels run in the device emulator -===//
//
// Runs the flash-attention kernels (FlashAttention.cuh's fp32-FMA ones, and for bf16 / f16
// FlashAttentionMma.cuh's tensor-core ones) thread by thread in the device emulator, with the
// grids the CUDA executor launches, and compares o, lse, dq, dk and dv with the CPU backend's
// attention computed in double on the same rounded inputs, with the GPU test's tolerances.
// Shapes cover partial tiles, several tiles per slice, causal masking with S > T (the causal
// offset) and head dims 16 to 128, with contiguous operands and with q, k, v read in place from
// a packed projection and dq, dk, dv written into one packed gradient buffer (strided rows,
// several batches and heads). Outputs start as NaN, so an element no thread writes fails, and
// every byte outside the outputs' windows must be left as it was.
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

struct Case {
  Storage storage;
  bool tensorCores;
  int headDim;
  bool causal;
  int queries;
  int keys;
  int batch = 1, heads = 2;
  /// q, k, v read from one packed [batch, T, 3 heads D] buffer, o and dO [batch, T, heads D],
  /// dq, dk, dv written into one packed gradient buffer (T = S); with rowPadding extra elements
  /// ending each row of those buffers.
  bool packed = false;
  int rowPadding = 0;
  /// Tensor cores at head dim 64: dq with 32-key tiles and dk/dv with 32-query tiles (the
  /// attention bench's variants) instead of MmaTileShape's 64.
  bool smallTiles = false;
};

std::string caseName(const ::testing::TestParamInfo<Case> &info) {
  const Case &c = info.param;
  return std::string(storageName(c.storage)) + (c.tensorCores ? "_mma" : "_fma") + "_d" +
         std::to_string(c.headDim) + (c.causal ? "_causal" : "") + "_T" +
         std::to_string(c.queries) + "_S" + std::to_string(c.keys) + "_B" +
         std::to_string(c.batch) + "_H" + std::to_string(c.heads) +
         (c.packed ? "_packed" + (c.rowPadding ? "_pad" + std::to_string(c.rowPadding) : "")
                   : std::string()) +
         (c.smallTiles ? "_tiles32" : "");
}

/// Device buffers of one case: host vectors the kernels read and write. q, k, v lie in
/// `inputs`, dq, dk, dv at the same places in `gradients`, o and dO at the same places in `o`
/// and `dO` (AttentionPlacement).
struct Buffers {
  std::vector<char> inputs, dO, o, gradients;
  std::vector<float> lse, delta;
};

std::vector<char> poisoned(size_t bytes) { return std::vector<char>(bytes, '\xff'); }

template <class E>
const typename E::Storage *in(const std::vector<char> &bytes, const Placement &at) {
  return reinterpret_cast<const typename E::Storage *>(bytes.data()) + at.offset;
}
template <class E> typename E::Storage *out(std::vector<char> &bytes, const Placement &at) {
  return reinterpret_cast<typename E::Storage *>(bytes.data()) + at.offset;
}

ampc::flash::OperandStrides strides(const Placement &at) { return {at.batch, at.head, at.row}; }

/// Forward, delta, dq and dk/dv, launched as Executor::runAttention launches them: each
/// pointer at its operand's first element, the strides in the layout argument.
template <class E, int D, bool kCausal, bool kMma>
void runKernels(Buffers &b, const AttentionPlacement &p, float scale, bool smallTiles) {
  namespace f = ampc::flash;
  const int queries = p.queries, keys = p.keys, slices = p.batch * p.heads;
  const int rowsPerBlock = kMma ? f::kMmaBlockRows : f::kRowsPerBlock;
  const Dim3 block{f::kThreads, 1, 1};
  const int forwardRows = kMma ? f::kMmaForwardBlockRows<D> : f::kRowsPerBlock;
  const Dim3 forwardGrid{static_cast<unsigned>((queries + forwardRows - 1) / forwardRows),
                         static_cast<unsigned>(slices), 1};
  const Dim3 queryGrid{static_cast<unsigned>((queries + rowsPerBlock - 1) / rowsPerBlock),
                       static_cast<unsigned>(slices), 1};
  const Dim3 keyGrid{static_cast<unsigned>((keys + rowsPerBlock - 1) / rowsPerBlock),
                     static_cast<unsigned>(slices), 1};
  const f::Layout layout{p.heads,      strides(p.q), strides(p.k),
                         strides(p.v), strides(p.o), strides(p.o)};
  const auto *q = in<E>(b.inputs, p.q), *k = in<E>(b.inputs, p.k), *v = in<E>(b.inputs, p.v);
  const auto *dO = in<E>(b.dO, p.o);
  auto *o = out<E>(b.o, p.o), *dq = out<E>(b.gradients, p.q), *dk = out<E>(b.gradients, p.k),
       *dv = out<E>(b.gradients, p.v);
  float *lse = b.lse.data(), *delta = b.delta.data();
  ampc::emu::launch(forwardGrid, block, [&] {
    if constexpr (kMma)
      f::mmaAttentionForward<E, D, kCausal>(q, k, v, o, lse, queries, keys, scale, layout);
    else
      f::flashAttentionForward<E, D, kCausal>(q, k, v, o, lse, queries, keys, scale, layout);
  });
  const long long rows = static_cast<long long>(slices) * queries;
  ampc::emu::launch(Dim3{static_cast<unsigned>((rows + 3) / 4), 1, 1}, block, [&] {
    f::flashAttentionBackwardDelta<E, D>(o, dO, delta, rows, queries, layout);
  });
  ampc::emu::launch(queryGrid, block, [&] {
    if constexpr (kMma && D == 64) {
      if (smallTiles)
        f::mmaAttentionBackwardDq<E, D, kCausal, 32>(q, k, v, dO, lse, delta, dq, queries, keys,
                                                     scale, layout);
      else
        f::mmaAttentionBackwardDq<E, D, kCausal>(q, k, v, dO, lse, delta, dq, queries, keys,
                                                 scale, layout);
    } else if constexpr (kMma)
      f::mmaAttentionBackwardDq<E, D, kCausal>(q, k, v, dO, lse, delta, dq, queries, keys, scale,
                                               layout);
    else
      f::flashAttentionBackwardDq<E, D, kCausal>(q, k, v, dO, lse, delta, dq, queries, keys, scale,
                                                 layout);
  });
  ampc::emu::launch(keyGrid, block, [&] {
    if constexpr (kMma && D == 64) {
      if (smallTiles)
        f::mmaAttentionBackwardDkDv<E, D, kCausal, 32>(q, k, v, dO, lse, delta, dk, dv, queries,
                                                       keys, scale, layout);
      else
        f::mmaAttentionBackwardDkDv<E, D, kCausal>(q, k, v, dO, lse, delta, dk, dv, queries,
                                                   keys, scale, layout);
    } else if constexpr (kMma)
      f::mmaAttentionBackwardDkDv<E, D, kCausal>(q, k, v, dO, lse, delta, dk, dv, queries, keys,
                                                 scale, layout);
    else
      f::flashAttentionBackwardDkDv<E, D, kCausal>(q, k, v, dO, lse, delta, dk, dv, queries, keys,
                                                   scale, layout);
  });
}

template <class E, int D, bool kMma>
void dispatchCausal(const Case &c, Buffers &b, const AttentionPlacement &p, float scale) {
  if (c.causal)
    runKernels<E, D, true, kMma>(b, p, scale, c.smallTiles);
  else
    runKernels<E, D, false, kMma>(b, p, scale, c.smallTiles);
}

template <class E, bool kMma>
void dispatchHeadDim(const Case &c, Buffers &b, const AttentionPlacement &p, float scale) {
  switch (c.headDim) {
  case 16:
    return dispatchCausal<E, 16, kMma>(c, b, p, scale);
  case 32:
    return dispatchCausal<E, 32, kMma>(c, b, p, scale);
  case 64:
    return dispatchCausal<E, 64, kMma>(c, b, p, scale);
  case 128:
    return dispatchCausal<E, 128, kMma>(c, b, p, scale);
  }
  FAIL() << "head dim " << c.headDim;
}

void dispatch(const Case &c, Buffers &b, const AttentionPlacement &p, float scale) {
  namespace f = ampc::flash;
  if (c.storage == Storage::F32)
    return dispatchHeadDim<f::F32, false>(c, b, p, scale);
  if (c.storage == Storage::Bf16)
    return c.tensorCores ? dispatchHeadDim<f::Bf16, true>(c, b, p, scale)
                         : dispatchHeadDim<f::Bf16, false>(c, b, p, scale);
  return c.tensorCores ? dispatchHeadDim<f::F16, true>(c, b, p, scale)
                       : dispatchHeadDim<f::F16, false>(c, b, p, scale);
}

class FlashAttentionEmulated : public ::testing::TestWithParam<Case> {};

TEST_P(FlashAttentionEmulated, ForwardAndBackwardMatchTheCpuReference) {
  const Case c = GetParam();
  const int T = c.queries, S = c.keys, D = c.headDim, slices = c.batch * c.heads;
  ASSERT_TRUE(!c.packed || T == S) << "a packed projection has as many keys as queries";
  const AttentionPlacement p =
      c.packed ? AttentionPlacement::packed(c.batch, c.heads, T, D, c.rowPadding)
               : AttentionPlacement::contiguous(c.batch, c.heads, T, S, D);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::mt19937 generator(99u + 7u * static_cast<unsigned>(D) + (c.causal ? 1u : 0u));
  const size_t qCount = static_cast<size_t>(slices) * T * D;
  const size_t kCount = static_cast<size_t>(slices) * S * D;
  const std::vector<double> q = randomInputs(qCount, c.storage, generator);
  const std::vector<double> k = randomInputs(kCount, c.storage, generator);
  const std::vector<double> v = randomInputs(kCount, c.storage, generator);
  const std::vector<double> dy = randomInputs(qCount, c.storage, generator);

  // Inputs where the placement puts them (zeros between the windows); outputs all NaN bytes.
  std::vector<double> inputs(p.inputElements, 0.0), dOValues(p.outputElements, 0.0);
  p.place(inputs, q, p.q, T);
  p.place(inputs, k, p.k, S);
  p.place(inputs, v, p.v, S);
  p.place(dOValues, dy, p.o, T);
  const size_t bytes = elementBytes(c.storage);
  Buffers b;
  b.inputs = encode(inputs, c.storage);
  b.dO = encode(dOValues, c.storage);
  b.o = poisoned(p.outputElements * bytes);
  b.gradients = poisoned(p.inputElements * bytes);
  b.lse.assign(static_cast<size_t>(slices) * T, NAN);
  b.delta.assign(static_cast<size_t>(slices) * T, NAN);
  const Buffers before = b;
  dispatch(c, b, p, static_cast<float>(scale));

  const AttentionExpected expected =
      referenceAttention(q, k, v, dy, slices, T, S, D, scale, c.causal);
  const std::vector<double> lse(b.lse.begin(), b.lse.end());
  const std::vector<double> o = decode(b.o, c.storage), gradients = decode(b.gradients, c.storage);

  const double tolerance = c.storage == Storage::F32 ? 1e-4 : 2e-2;
  EXPECT_LT(relativeError(p.gather(o, p.o, T), expected.o), tolerance) << "o";
  // A row that sees no key (causal, more queries than keys) has lse -inf on both sides; the
  // others are compared as numbers.
  std::vector<double> seenLse, expectedSeenLse;
  for (size_t r = 0; r < lse.size(); ++r) {
    if (std::isinf(expected.lse[r]) && expected.lse[r] < 0) {
      EXPECT_TRUE(std::isinf(lse[r]) && lse[r] < 0) << "lse of row " << r << ": " << lse[r];
      continue;
    }
    seenLse.push_back(lse[r]);
    expectedSeenLse.push_back(expected.lse[r]);
  }
  EXPECT_LT(relativeError(seenLse, expectedSeenLse), 1e-5) << "lse";
  EXPECT_LT(relativeError(p.gather(gradients, p.q, T), expected.dq), tolerance) << "dq";
  EXPECT_LT(relativeError(p.gather(gradients, p.k, S), expected.dk), tolerance) << "dk";
  EXPECT_LT(relativeError(p.gather(gradients, p.v, S), expected.dv), tolerance) << "dv";
  // Nothing outside the windows was written, and the inputs are as they were.
  EXPECT_EQ(changedOutside(b.o, before.o, p.covered(p.outputElements, {{p.o, T}}), c.storage), 0u)
      << "o's buffer outside o";
  EXPECT_EQ(changedOutside(b.gradients, before.gradients,
                           p.covered(p.inputElements, {{p.q, T}, {p.k, S}, {p.v, S}}), c.storage),
            0u)
      << "the gradient buffer outside dq, dk and dv";
  EXPECT_TRUE(b.inputs == before.inputs && b.dO == before.dO) << "an input changed";
}

// The tensor-core kernels in every head dim, both masks, one and several tiles per slice; the
// fp32-FMA kernels (the only ones for f32 storage) as the GPU test runs them. Every operand
// contiguous (one slice per head, 2 heads).
INSTANTIATE_TEST_SUITE_P(TensorCores, FlashAttentionEmulated,
                         ::testing::Values(Case{Storage::Bf16, true, 64, false, 70, 70},
                                           Case{Storage::Bf16, true, 64, true, 37, 70},
                                           Case{Storage::Bf16, true, 64, true, 130, 130},
                                           // More queries than keys: the first 60 rows see none.
                                           Case{Storage::Bf16, true, 64, true, 130, 70},
                                           Case{Storage::F16, true, 64, false, 70, 70},
                                           Case{Storage::F16, true, 64, true, 37, 70},
                                           Case{Storage::Bf16, true, 128, true, 100, 100},
                                           Case{Storage::F16, true, 128, false, 40, 90},
                                           Case{Storage::Bf16, true, 32, true, 70, 70},
                                           Case{Storage::F16, true, 32, true, 150, 190},
                                           Case{Storage::F16, true, 16, false, 33, 20}),
                         caseName);
INSTANTIATE_TEST_SUITE_P(Fma, FlashAttentionEmulated,
                         ::testing::Values(Case{Storage::F32, false, 64, false, 70, 70},
                                           Case{Storage::F32, false, 64, true, 37, 70},
                                           Case{Storage::Bf16, false, 64, true, 37, 70},
                                           Case{Storage::F32, false, 128, true, 40, 40}),
                         caseName);
// q, k, v read in place from a packed [B, T, 3 H D] projection, o and dO [B, T, H D], dq, dk,
// dv written into one packed gradient buffer: B = H = 2, T not a multiple of the block rows;
// one case with padded rows, so the windows have gaps between them.
INSTANTIATE_TEST_SUITE_P(
    PackedTensorCores, FlashAttentionEmulated,
    ::testing::Values(Case{Storage::Bf16, true, 64, true, 80, 80, 2, 2, true},
                      Case{Storage::F16, true, 64, false, 80, 80, 2, 2, true},
                      Case{Storage::Bf16, true, 128, false, 100, 100, 2, 2, true},
                      Case{Storage::F16, true, 128, true, 100, 100, 2, 2, true},
                      Case{Storage::Bf16, true, 64, true, 70, 70, 2, 3, true, 8}),
    caseName);
// The attention bench's backward variants at head dim 64 (32-row tiles for dq and dk/dv):
// causal with S > T, non-causal with partial tiles, and on the packed layout.
INSTANTIATE_TEST_SUITE_P(
    SmallTiles, FlashAttentionEmulated,
    ::testing::Values(Case{Storage::Bf16, true, 64, true, 100, 130, 1, 2, false, 0, true},
                      Case{Storage::F16, true, 64, false, 70, 45, 1, 2, false, 0, true},
                      Case{Storage::Bf16, true, 64, true, 80, 80, 2, 2, true, 0, true}),
    caseName);
INSTANTIATE_TEST_SUITE_P(
    PackedFma, FlashAttentionEmulated,
    ::testing::Values(Case{Storage::F32, false, 64, false, 80, 80, 2, 2, true},
                      Case{Storage::Bf16, false, 64, true, 80, 80, 2, 2, true},
                      Case{Storage::F32, false, 128, true, 100, 100, 2, 2, true},
                      Case{Storage::Bf16, false, 128, false, 100, 100, 2, 2, true, 8}),
    caseName);

} // namespace
