//===- DeviceEmulatorTest.cpp - The emulator's threads, barriers and warp instructions -===//
//
// Pins what DeviceEmulator.h promises: barriers order writes to shared memory, exited threads
// count as arrived, a barrier that cannot complete is reported; shuffles (through the device
// code of KernelSupport.h: warpSum, blockSum); and the PTX ISA's register layouts of
// mma.m16n8k16 and ldmatrix, each checked element by element against the ISA's tables and
// then together (through TensorCore.cuh) as a matrix product.
//
//===----------------------------------------------------------------------===//

#include "DeviceEmulator.h"

#include "runtime/cuda/device/KernelSupport.h"
#include "runtime/cuda/device/TensorCore.cuh"

#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <vector>

namespace {

using ampc::emu::Dim3;
using ampc::emu::launch;

TEST(DeviceEmulator, EveryThreadOfEveryBlockRunsWithItsIndices) {
  std::vector<int> seen(3 * 2 * 64, 0);
  launch(Dim3{3, 2, 1}, Dim3{64, 1, 1}, [&] {
    const unsigned block = blockIdx.y * gridDim.x + blockIdx.x;
    seen[block * blockDim.x + threadIdx.x] += 1;
  });
  for (int count : seen)
    EXPECT_EQ(count, 1);
}

void rotateThroughShared(int *out) {
  __shared__ int values[96];
  values[threadIdx.x] = static_cast<int>(threadIdx.x) * 10;
  __syncthreads();
  out[threadIdx.x] = values[(threadIdx.x + 1) % 96];
}

TEST(DeviceEmulator, SyncthreadsOrdersSharedMemory) {
  std::vector<int> out(96, -1);
  launch(Dim3{}, Dim3{96, 1, 1}, [&] { rotateThroughShared(out.data()); });
  for (int i = 0; i < 96; ++i)
    EXPECT_EQ(out[i], (i + 1) % 96 * 10);
}

TEST(DeviceEmulator, ExitedThreadsCountAsArrived) {
  int after = 0;
  launch(Dim3{}, Dim3{64, 1, 1}, [&] {
    if (threadIdx.x >= 40)
      return;
    __syncthreads();
    ++after;
  });
  EXPECT_EQ(after, 40);
}

TEST(DeviceEmulator, SyncthreadsOrVotesOverTheBlockCallAfterCall) {
  // Per block: one thread votes true, then none, then all; a second block votes alone.
  std::vector<int> votes(2 * 96 * 3, -1);
  launch(Dim3{2, 1, 1}, Dim3{96, 1, 1}, [&] {
    int *mine = votes.data() + (blockIdx.x * 96 + threadIdx.x) * 3;
    mine[0] = __syncthreads_or(blockIdx.x == 0 && threadIdx.x == 70);
    mine[1] = __syncthreads_or(0);
    mine[2] = __syncthreads_or(1);
  });
  for (int block = 0; block < 2; ++block)
    for (int t = 0; t < 96; ++t) {
      const int *got = votes.data() + (block * 96 + t) * 3;
      EXPECT_EQ(got[0], block == 0 ? 1 : 0) << block << " " << t;
      EXPECT_EQ(got[1], 0) << block << " " << t;
      EXPECT_EQ(got[2], 1) << block << " " << t;
    }
}

TEST(DeviceEmulator, ABarrierThatCannotCompleteIsReported) {
  EXPECT_THROW(launch(Dim3{}, Dim3{32, 1, 1},
                      [&] {
                        if (threadIdx.x == 0)
                          __syncthreads();
                        else
                          __syncwarp();
                      }),
               std::runtime_error);
}

TEST(DeviceEmulator, ShufflesAndBlockReductions) {
  std::vector<float> warpSums(128), blockSums(128);
  std::vector<int> shuffled(128);
  launch(Dim3{}, Dim3{128, 1, 1}, [&] {
    __shared__ float scratch[32];
    const float value = static_cast<float>(threadIdx.x);
    warpSums[threadIdx.x] = ampc::device::warpSum(value);
    blockSums[threadIdx.x] = ampc::device::blockSum(value, scratch);
    shuffled[threadIdx.x] = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x), 5);
  });
  for (int i = 0; i < 128; ++i) {
    const int warp = i / 32;
    EXPECT_EQ(warpSums[i], static_cast<float>(32 * 32 * warp + 31 * 16)) << i;
    EXPECT_EQ(blockSums[i], 127.0f * 64.0f) << i;
    EXPECT_EQ(shuffled[i], warp * 32 + 5) << i;
  }
}

/// A bf16 or f16 pattern that encodes (matrix, row, column) exactly: small integers.
uint16_t code(bool bf16, int value) {
  return bf16 ? ampc::numerics::floatToBF16Bits(static_cast<float>(value))
              : ampc::numerics::floatToF16Bits(static_cast<float>(value));
}

TEST(DeviceEmulator, LdmatrixFollowsThePtxLayout) {
  // Four 8x8 matrices, element (i, r, c) = 64 i + 8 r + c, rows 16 bytes apart plus padding.
  constexpr int kStride = 12;
  std::vector<uint16_t> shared(4 * 8 * kStride);
  for (int i = 0; i < 4; ++i)
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 8; ++c)
        shared[(i * 8 + r) * kStride + c] = static_cast<uint16_t>(64 * i + 8 * r + c);
  std::vector<unsigned> plain(32 * 4), transposed(32 * 4);
  launch(Dim3{}, Dim3{32, 1, 1}, [&] {
    const int lane = threadIdx.x;
    const uint16_t *row = &shared[lane * kStride]; // lanes 8i..8i+7: rows of matrix i
    unsigned r[4], rt[4];
    ampc::tc::ldmatrixX4(r, row);
    ampc::tc::ldmatrixX4Trans(rt, row);
    for (int i = 0; i < 4; ++i) {
      plain[lane * 4 + i] = r[i];
      transposed[lane * 4 + i] = rt[i];
    }
  });
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      // PTX ISA, ldmatrix: thread l holds row l/4, elements 2(l%4) and 2(l%4)+1 of each
      // matrix; with .trans the element at row 2(l%4) (+1), column l/4.
      const unsigned row = lane / 4, column = 2 * (lane % 4);
      const unsigned lo = 64 * i + 8 * row + column, hi = lo + 1;
      EXPECT_EQ(plain[lane * 4 + i], lo | hi << 16) << "lane " << lane << " matrix " << i;
      const unsigned tlo = 64 * i + 8 * column + row, thi = tlo + 8;
      EXPECT_EQ(transposed[lane * 4 + i], tlo | thi << 16) << "lane " << lane << " matrix " << i;
    }
}

class Mma : public ::testing::TestWithParam<bool> {};

TEST_P(Mma, FragmentsFollowThePtxLayout) {
  const bool bf16 = GetParam();
  // A[m][k] = m + 1 on the diagonal block picks rows; B[k][n] = 16 n + k: D = A B exposes
  // which element every register holds.
  std::vector<float> result(32 * 4);
  launch(Dim3{}, Dim3{32, 1, 1}, [&] {
    const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    auto a = [&](int m, int k) { return code(bf16, m == k ? m + 1 : 0); };
    auto b = [&](int k, int n) { return code(bf16, 16 * n + k); };
    // The PTX ISA's "Matrix Fragments for mma.m16n8k16 with floating point type".
    const unsigned fa[4] = {a(g, 2 * t) | unsigned(a(g, 2 * t + 1)) << 16,
                            a(g + 8, 2 * t) | unsigned(a(g + 8, 2 * t + 1)) << 16,
                            a(g, 2 * t + 8) | unsigned(a(g, 2 * t + 9)) << 16,
                            a(g + 8, 2 * t + 8) | unsigned(a(g + 8, 2 * t + 9)) << 16};
    const unsigned fb[2] = {b(2 * t, g) | unsigned(b(2 * t + 1, g)) << 16,
                            b(2 * t + 8, g) | unsigned(b(2 * t + 9, g)) << 16};
    float d[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    if (bf16)
      ampc::tc::mma16816<true>(d, fa, fb);
    else
      ampc::tc::mma16816<false>(d, fa, fb);
    for (int e = 0; e < 4; ++e)
      result[lane * 4 + e] = d[e];
  });
  for (int lane = 0; lane < 32; ++lane)
    for (int e = 0; e < 4; ++e) {
      const int m = lane / 4 + (e >= 2 ? 8 : 0), n = 2 * (lane % 4) + (e & 1);
      // D[m][n] = 0.5 + (m + 1) B[m][n]
      EXPECT_EQ(result[lane * 4 + e], 0.5f + static_cast<float>((m + 1) * (16 * n + m)))
          << "lane " << lane << " element " << e;
    }
}

TEST_P(Mma, LdmatrixFedProductsComputeAMatrixProduct) {
  const bool bf16 = GetParam();
  // C (16 x 16) = A (16 x 32) B (32 x 16) with A row-major and B given both ways: as its
  // transpose Bt [16][32] (ldmatrix) and row-major [32][16] (ldmatrix .trans).
  std::mt19937 generator(7);
  std::uniform_int_distribution<int> small(-8, 8);
  std::vector<uint16_t> a(16 * 32), bt(16 * 32), b(32 * 16);
  std::vector<double> expected(16 * 16, 0.0);
  std::vector<int> av(16 * 32), bv(32 * 16);
  for (int i = 0; i < 16 * 32; ++i) {
    av[i] = small(generator);
    bv[i] = small(generator);
  }
  for (int m = 0; m < 16; ++m)
    for (int k = 0; k < 32; ++k)
      a[m * 32 + k] = code(bf16, av[m * 32 + k]);
  for (int k = 0; k < 32; ++k)
    for (int n = 0; n < 16; ++n) {
      b[k * 16 + n] = code(bf16, bv[k * 16 + n]);
      bt[n * 32 + k] = code(bf16, bv[k * 16 + n]);
    }
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n)
      for (int k = 0; k < 32; ++k)
        expected[m * 16 + n] += av[m * 32 + k] * bv[k * 16 + n];

  std::vector<float> viaTranspose(16 * 16), viaTrans(16 * 16);
  launch(Dim3{}, Dim3{32, 1, 1}, [&] {
    const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    float c1[2][4] = {}, c2[2][4] = {};
    for (int kk = 0; kk < 2; ++kk) {
      unsigned fa[4];
      // A: matrix i = rows 8 (i % 2).., columns 16 kk + 8 (i / 2)..
      ampc::tc::ldmatrixX4(fa, &a[(8 * ((lane / 8) % 2) + lane % 8) * 32 + 16 * kk +
                                  8 * (lane / 16)]);
      unsigned fb[4], fbt[4];
      // Bt rows are n: matrix i = n 8 (i / 2).., k 16 kk + 8 (i % 2)..
      ampc::tc::ldmatrixX4(fb, &bt[(8 * (lane / 16) + lane % 8) * 32 + 16 * kk +
                                   8 * ((lane / 8) % 2)]);
      // B rows are k: matrix i = k 16 kk + 8 (i % 2).., n 8 (i / 2)..
      ampc::tc::ldmatrixX4Trans(fbt, &b[(16 * kk + 8 * ((lane / 8) % 2) + lane % 8) * 16 +
                                        8 * (lane / 16)]);
      for (int n = 0; n < 2; ++n) {
        const unsigned pb[2] = {fb[2 * n], fb[2 * n + 1]}, pbt[2] = {fbt[2 * n], fbt[2 * n + 1]};
        if (bf16) {
          ampc::tc::mma16816<true>(c1[n], fa, pb);
          ampc::tc::mma16816<true>(c2[n], fa, pbt);
        } else {
          ampc::tc::mma16816<false>(c1[n], fa, pb);
          ampc::tc::mma16816<false>(c2[n], fa, pbt);
        }
      }
    }
    for (int n = 0; n < 2; ++n)
      for (int e = 0; e < 4; ++e) {
        const int row = g + (e >= 2 ? 8 : 0), column = 8 * n + 2 * t + (e & 1);
        viaTranspose[row * 16 + column] = c1[n][e];
        viaTrans[row * 16 + column] = c2[n][e];
      }
  });
  for (int i = 0; i < 256; ++i) {
    EXPECT_EQ(viaTranspose[i], expected[i]) << i;
    EXPECT_EQ(viaTrans[i], expected[i]) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, Mma, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool> &info) {
                           return std::string(info.param ? "bf16" : "f16");
                         });

} // namespace
