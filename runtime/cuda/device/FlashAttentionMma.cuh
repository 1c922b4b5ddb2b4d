//===- FlashAttentionMma.cuh - Attention on tensor cores (mma.sync, sm_80+) -===//
//
// The forward, dq and dk/dv kernels of FlashAttention.cuh for bf16 and f16 storage, with every
// tile product on the tensor cores (mma.sync.m16n8k16, fp32 accumulation; TensorCore.cuh). The
// algorithm, the masking, the outputs and the entry-point signatures are FlashAttention.cuh's
// (the delta kernel is shared); what changes is the work split:
//
//   4 warps per block, each owning 16 rows of the block's 64 (query rows for dq, key rows for
//   dk/dv), so a block covers 64 rows (kMmaBlockRows) where the fp32 kernels cover 32: the
//   caller's grid is ceil(T / 64) for dq and ceil(S / 64) for dk/dv. The forward's warps own
//   two tiles of 16 query rows at head dims up to 64 (MmaForwardShape), so that each k and v
//   fragment a warp reads from shared memory by ldmatrix feeds two products instead of one:
//   128 query rows per block (kMmaForwardBlockRows), ceil(T / 128) blocks.
//   The streamed tiles (keys for the forward and dq, queries for dk/dv) are staged in shared
//   memory in their 16-bit storage type, rows padded by 16 bytes so that ldmatrix's 8 row
//   reads hit distinct banks; all under 48 KB of static shared memory.
//   A warp's own rows of q (and dO) live in registers as A fragments for the whole kernel
//   (16, or the forward's 32 at D <= 64).
//   Score tiles stay in registers: S = q k^T accumulates in mma D fragments, the softmax runs
//   on them (row statistics over the 4 lanes of a quad), and P (dS) rounded to the storage
//   type feeds the next product as A fragments without touching shared memory (as FA2 does).
//
// Per warp and tile (Bn streamed rows, head dim D):
//   forward  S = q k^T (D/16 x Bn/8 mma), online softmax, o += P v (Bn/16 x D/8 mma)
//   dq       S = q k^T, dP = dO v^T, dS = P (dP - delta), dq += dS k          (3 products)
//   dk/dv    S^T = k q^T, dP^T = v dO^T, dv += P^T dO, dk += dS^T q           (4 products)
// Tile sizes: forward 32 keys (kMmaForwardKeys: 64 with one row tile a warp), dq 64 keys (32 at
// D = 128), double-buffered: the next tile is copied
// by cp.async while the current one is used; dk/dv 64 queries, double-buffered, with the warp's
// k and v rows in registers (D <= 64), or 16 queries single-buffered with the block's k and v in
// shared memory, re-read by ldmatrix per product (D = 128).
//
// Operands lie where the layout argument says (FlashAttention.cuh, "Operand layouts"): rows are
// addressed with each operand's row stride. The plan keeps every row 16-byte aligned, which the
// 16-byte loads and cp.async copies need. An output's slice base is computed at the store, from
// the parameters, rather than held in registers through the tile loop.
//
// Numerics differ from the fp32 kernels only where the tensor cores need 16-bit operands: P
// and dS are rounded to the storage type before their products (the row sums use the unrounded
// P); all sums are fp32.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CUDA_DEVICE_FLASHATTENTIONMMA_CUH
#define AMPC_RUNTIME_CUDA_DEVICE_FLASHATTENTIONMMA_CUH

#include "runtime/cuda/device/FlashAttention.cuh"
#include "runtime/cuda/device/TensorCore.cuh"

namespace ampc {
namespace flash {

/// Rows of a block of the tensor-core kernels: 4 warps x 16 rows.
constexpr int kMmaBlockRows = 64;
constexpr int kMmaWarpRows = 16;

template <class E> struct IsBf16 { static constexpr bool value = false; };
template <> struct IsBf16<Bf16> { static constexpr bool value = true; };

template <int D> struct MmaTileShape {
  static_assert(D == 16 || D == 32 || D == 64 || D == 128, "head dim must be 16, 32, 64 or 128");
  static constexpr int stride = D + 8; ///< shared row length in elements (16 bytes of padding)
  /// Forward and dq stream double-buffered key tiles (two of k and v in shared memory); the
  /// forward's are kMmaForwardKeys.
  static constexpr int dqKeys = D == 128 ? 32 : 64;
  static constexpr int dkvQueries = D == 128 ? 16 : 64;
};

/// tile[r][:] = rows first + r of a [count, D] matrix of 16-bit elements whose rows are
/// rowStride apart (16-byte aligned), zeros for rows past count; 16-byte accesses, all threads
/// of the block.
template <int D, int Rows, int Stride>
__device__ __forceinline__ void stageTile(unsigned short (*tile)[Stride], const unsigned short *src,
                                          long long rowStride, int first, int count) {
  constexpr int chunks = D / 8; // 16-byte chunks per row
  for (int i = threadIdx.x; i < Rows * chunks; i += kThreads) {
    const int r = i / chunks, c = i % chunks;
    tc::Chunk16 value = {{0u, 0u, 0u, 0u}};
    if (first + r < count)
      value = *reinterpret_cast<const tc::Chunk16 *>(src + (first + r) * rowStride + c * 8);
    *reinterpret_cast<tc::Chunk16 *>(&tile[r][c * 8]) = value;
  }
}

/// stageTile with cp.async: the copies are in flight until waitAsyncCopies (zero-filled rows
/// past count), so the next tile loads while this one is used.
template <int D, int Rows, int Stride>
__device__ __forceinline__ void stageTileAsync(unsigned short (*tile)[Stride],
                                               const unsigned short *src, long long rowStride,
                                               int first, int count) {
  constexpr int chunks = D / 8;
  for (int i = threadIdx.x; i < Rows * chunks; i += kThreads) {
    const int r = i / chunks, c = i % chunks;
    const bool inside = first + r < count;
    tc::copyAsync16(&tile[r][c * 8], inside ? src + (first + r) * rowStride + c * 8 : src, inside);
  }
}

/// The tiles a block streams through shared memory: tile t holds rows begin + t BN .. of the
/// two [count, D] matrices \p a and \p b (k and v, or q and dO; rows aStride and bStride
/// elements apart). With two buffers, tile t + 1 is copied by cp.async (with
/// \p stageExtra(firstRow, buffer) staging whatever else the tile needs by plain stores) while
/// \p use(firstRow, buffer) works on tile t; with one, each tile is loaded, then used. Every thread
/// of the block calls both; a barrier before each use (the tile has arrived for every warp) and one
/// after (every warp is done with the buffer the next copy overwrites).
template <int D, int BN, int Buffers, int Stride, class StageExtra, class Use>
__device__ __forceinline__ void
streamTiles(unsigned short (*aTiles)[BN][Stride], unsigned short (*bTiles)[BN][Stride],
            const unsigned short *a, long long aStride, const unsigned short *b, long long bStride,
            int count, int begin, int tiles, StageExtra stageExtra, Use use) {
  static_assert(Buffers == 1 || Buffers == 2, "one or two buffers");
  auto stage = [&](int tile, int buffer) {
    const int first = begin + tile * BN;
    stageTileAsync<D, BN>(aTiles[buffer], a, aStride, first, count);
    stageTileAsync<D, BN>(bTiles[buffer], b, bStride, first, count);
    stageExtra(first, buffer);
    tc::commitAsyncCopies();
  };
  if (Buffers == 2 && tiles > 0)
    stage(0, 0);
  for (int tile = 0; tile < tiles; ++tile) {
    const int buffer = Buffers == 2 ? tile & 1 : 0;
    if (Buffers == 1) {
      stage(tile, 0);
      tc::waitAsyncCopies<0>();
    } else if (tile + 1 < tiles) {
      stage(tile + 1, buffer ^ 1);
      tc::waitAsyncCopies<1>();
    } else {
      tc::waitAsyncCopies<0>();
    }
    __syncthreads();
    use(begin + tile * BN, buffer);
    __syncthreads();
  }
}

/// No extra staging.
struct NothingExtra {
  __device__ __forceinline__ void operator()(int, int) const {}
};

/// The A fragments of 16 rows (first row \p row0) of a [count, D] matrix in global memory,
/// rows rowStride apart: frag[kk] covers columns 16 kk .. 16 kk + 15; rows past count are zeros.
template <int D>
__device__ __forceinline__ void loadRowFragments(unsigned (&frag)[D / 16][4],
                                                 const unsigned short *src, long long rowStride,
                                                 int row0, int count) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int rows[2] = {row0 + g, row0 + g + 8};
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int row = rows[r & 1];
      const int column = 16 * kk + 2 * t + (r & 2 ? 8 : 0);
      frag[kk][r] =
          row < count ? *reinterpret_cast<const unsigned *>(src + row * rowStride + column) : 0u;
    }
}

/// acc[m][n] (M row tiles of 16, each 16 x 8 tiles over N = 8 Ntiles columns) += A_m (16 x K,
/// fragments a[m][K/16]) times B, a shared tile's rows from firstRow: with kTileIsBt the tile is
/// [N, K] and B its transpose (B[k][n] = tile[firstRow + n][k]; plain ldmatrix), else the tile
/// is [K, N] and B itself (B[k][n] = tile[firstRow + k][n]; ldmatrix .trans). Each B fragment is
/// read from shared memory once and used by all M row tiles, so M = 2 halves the ldmatrix
/// traffic per product.
template <bool kBf16, bool kTileIsBt, int M, int K, int Ntiles, int Stride>
__device__ __forceinline__ void mmaRowTilesTimesTile(float (&acc)[M][Ntiles][4],
                                                     const unsigned (&a)[M][K / 16][4],
                                                     const unsigned short (*tile)[Stride],
                                                     int firstRow) {
  const int lane = threadIdx.x % 32;
  // ldmatrix x4: matrix i = lane / 8 is rows (n) 8 (i / 2) .. +7, columns (k) 8 (i % 2) .. +7
  // of a [N, K] tile; .trans: rows (k) 8 (i % 2) .. +7, columns (n) 8 (i / 2) .. +7 of a
  // [K, N] tile, this pair of n-tiles.
  const int rowInPair = (lane / 16) * 8 + lane % 8, columnHalf = ((lane / 8) % 2) * 8;
  const int row = ((lane / 8) % 2) * 8 + lane % 8, columnPair = (lane / 16) * 8;
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk)
#pragma unroll
    for (int n = 0; n < Ntiles; n += 2) {
      unsigned b[4];
      if constexpr (kTileIsBt)
        tc::ldmatrixX4(b, &tile[firstRow + 8 * n + rowInPair][16 * kk + columnHalf]);
      else
        tc::ldmatrixX4Trans(b, &tile[firstRow + 16 * kk + row][8 * n + columnPair]);
      const unsigned b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
#pragma unroll
      for (int m = 0; m < M; ++m) {
        tc::mma16816<kBf16>(acc[m][n], a[m][kk], b0);
        tc::mma16816<kBf16>(acc[m][n + 1], a[m][kk], b1);
      }
    }
}

/// acc[n] (16 x 8 tiles over N = 8 Ntiles columns) += A (16 x K, fragments a[K/16]) times the
/// transpose of a shared [N, K] tile's rows firstRow.. (B[k][n] = tile[firstRow + n][k]).
template <bool kBf16, int K, int Ntiles, int Stride>
__device__ __forceinline__ void
mmaRowsTimesTileT(float (&acc)[Ntiles][4], const unsigned (&a)[K / 16][4],
                  const unsigned short (*tile)[Stride], int firstRow) {
  mmaRowTilesTimesTile<kBf16, true, 1, K, Ntiles>(
      reinterpret_cast<float(&)[1][Ntiles][4]>(acc),
      reinterpret_cast<const unsigned(&)[1][K / 16][4]>(a), tile, firstRow);
}

/// acc[n] (16 x 8 tiles over D = 8 Ntiles columns) += A (16 x K, fragments a[K/16]) times a
/// shared [K, D] tile's rows firstRow.. (B[k][n] = tile[firstRow + k][n]): ldmatrix .trans.
template <bool kBf16, int K, int Ntiles, int Stride>
__device__ __forceinline__ void
mmaRowsTimesTile(float (&acc)[Ntiles][4], const unsigned (&a)[K / 16][4],
                 const unsigned short (*tile)[Stride], int firstRow) {
  mmaRowTilesTimesTile<kBf16, false, 1, K, Ntiles>(
      reinterpret_cast<float(&)[1][Ntiles][4]>(acc),
      reinterpret_cast<const unsigned(&)[1][K / 16][4]>(a), tile, firstRow);
}

/// The A fragments of 16 rows of a shared [.., K] tile (rows firstRow..firstRow + 15).
template <int K, int Stride>
__device__ __forceinline__ void
tileRowFragments(unsigned (&frag)[K / 16][4], const unsigned short (*tile)[Stride], int firstRow) {
  const int lane = threadIdx.x % 32;
  // ldmatrix x4: matrix i = lane / 8 is rows 8 (i % 2) .. +7, columns 8 (i / 2) .. +7, which
  // are a0..a3 of the A layout.
  const int row = ((lane / 8) % 2) * 8 + lane % 8, columnHalf = (lane / 16) * 8;
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk)
    tc::ldmatrixX4(frag[kk], &tile[firstRow + row][16 * kk + columnHalf]);
}

/// The D fragments of a 16 x N product (N = 8 Ntiles) packed as the A fragments of the next
/// product with K = N.
template <bool kBf16, int Ntiles>
__device__ __forceinline__ void packAsA(unsigned (&a)[Ntiles / 2][4], const float (&d)[Ntiles][4]) {
#pragma unroll
  for (int j = 0; j < Ntiles / 2; ++j) {
    a[j][0] = tc::packPair<kBf16>(d[2 * j][0], d[2 * j][1]);
    a[j][1] = tc::packPair<kBf16>(d[2 * j][2], d[2 * j][3]);
    a[j][2] = tc::packPair<kBf16>(d[2 * j + 1][0], d[2 * j + 1][1]);
    a[j][3] = tc::packPair<kBf16>(d[2 * j + 1][2], d[2 * j + 1][3]);
  }
}

template <int Ntiles> __device__ __forceinline__ void zero(float (&acc)[Ntiles][4]) {
#pragma unroll
  for (int n = 0; n < Ntiles; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      acc[n][e] = 0.0f;
}

/// Stores 16 rows (first row0) of a 16 x D f32 fragment set, times \p scale, into a [count, D]
/// matrix of 16-bit elements with rows rowStride apart (rows past count are skipped).
template <bool kBf16, int D>
__device__ __forceinline__ void storeRows(unsigned short *dst, long long rowStride,
                                          const float (&acc)[D / 8][4], int row0, int count,
                                          float scale0, float scale1) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = row0 + g + 8 * half;
    if (row >= count)
      continue;
    const float scale = half ? scale1 : scale0;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<unsigned *>(dst + row * rowStride + 8 * n + 2 * t) =
          tc::packPair<kBf16>(acc[n][2 * half] * scale, acc[n][2 * half + 1] * scale);
  }
}

//===----------------------------------------------------------------------===//
// Forward
//===----------------------------------------------------------------------===//

/// Row tiles of 16 query rows per warp in the forward: 2 for head dims up to 64 (a block covers
/// 128 query rows), so that every k and v fragment read from shared memory feeds two products;
/// 1 at 128, where two tiles' accumulators would not fit the registers.
template <int D> struct MmaForwardShape {
  static constexpr int rowTiles = D <= 64 ? 2 : 1;
  static constexpr int warpRows = kMmaWarpRows * rowTiles;
  static constexpr int blockRows = 4 * warpRows;
};

/// Keys per streamed tile of the forward with M row tiles a warp: 64 for one tile at head dims
/// up to 64, else 32, where two tiles' scores, accumulators and q fragments leave no registers
/// for 64 (ptxas: 212 registers and no spills at D = 64 on sm_80 and sm_90 against 255 and
/// 24-148 bytes of spills with 64 keys).
template <int D, int M> constexpr int kMmaForwardKeys = M == 1 && D <= 64 ? 64 : 32;

/// The forward's query rows per block at head dim D: the grid is ceil(T / this).
template <int D> constexpr int kMmaForwardBlockRows = MmaForwardShape<D>::blockRows;

/// One key tile of the forward for one warp's M row tiles (rows row0 + 16 m ..): S = q k^T
/// (scaled to base 2, masked when kMask), the online softmax update of each row's running max
/// and sum, acc = acc * correction + P v. Only a tile past the last key or crossing the causal
/// diagonal needs the mask; the caller instantiates the two forms.
template <bool kBf16, int M, int D, int BN, bool kCausal, bool kMask, int Stride>
__device__ __forceinline__ void
forwardTile(const unsigned (&qa)[M][D / 16][4], float (&acc)[M][D / 8][4],
            float (&runningMax)[M][2], float (&runningSum)[M][2],
            const unsigned short (*kTile)[Stride], const unsigned short (*vTile)[Stride], int row0,
            int firstKey, int keys, int causalOffset, float scaleLog2) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  float s[M][BN / 8][4];
#pragma unroll
  for (int m = 0; m < M; ++m)
    zero(s[m]);
  mmaRowTilesTimesTile<kBf16, true, M, D, BN / 8>(s, qa, kTile, 0);
  unsigned p[M][BN / 16][4];
#pragma unroll
  for (int m = 0; m < M; ++m) {
    float tileMax[2] = {negativeInfinity(), negativeInfinity()};
#pragma unroll
    for (int n = 0; n < BN / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = row0 + 16 * m + g + (e >= 2 ? 8 : 0);
        const int key = firstKey + 8 * n + 2 * t + (e & 1);
        const bool seen = !kMask || (key < keys && visible<kCausal>(row, key, causalOffset));
        s[m][n][e] = seen ? s[m][n][e] * scaleLog2 : negativeInfinity();
        tileMax[e >> 1] = fmaxf(tileMax[e >> 1], s[m][n][e]);
      }
    float correction[2], base[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float newMax = fmaxf(runningMax[m][h], rowMax(tileMax[h]));
      base[h] = newMax == negativeInfinity() ? 0.0f : newMax;
      correction[h] = exp2f(runningMax[m][h] - base[h]);
      runningMax[m][h] = newMax;
    }
    float tileSum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < BN / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[m][n][e] = exp2f(s[m][n][e] - base[e >> 1]);
        tileSum[e >> 1] += s[m][n][e];
      }
#pragma unroll
    for (int h = 0; h < 2; ++h)
      runningSum[m][h] = runningSum[m][h] * correction[h] + rowSum(tileSum[h]);
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc[m][n][e] *= correction[e >> 1];
    packAsA<kBf16, BN / 8>(p[m], s[m]);
  }
  mmaRowTilesTimesTile<kBf16, false, M, BN, D / 8>(acc, p, vTile, 0);
}

/// The forward of one block: BlockRows = 64 M query rows, M 16-row tiles a warp (the entry
/// points use MmaForwardShape's; M = 1 is the kernel with one tile a warp, which the attention
/// bench times beside it).
template <class E, int D, bool kCausal, int M = MmaForwardShape<D>::rowTiles>
__device__ __forceinline__ void
mmaAttentionForward(const unsigned short *__restrict__ q, const unsigned short *__restrict__ k,
                    const unsigned short *__restrict__ v, unsigned short *__restrict__ o,
                    float *__restrict__ lse, int queries, int keys, float scale, Layout layout) {
  constexpr bool kBf16 = IsBf16<E>::value;
  constexpr int BN = kMmaForwardKeys<D, M>, Stride = MmaTileShape<D>::stride;
  constexpr int WarpRows = kMmaWarpRows * M, BlockRows = 4 * WarpRows;
  struct alignas(16) Tiles {
    unsigned short k[2][BN][Stride];
    unsigned short v[2][BN][Stride];
  };
  __shared__ Tiles smem;

  const int bh = blockIdx.y, b = bh / layout.heads, h = bh % layout.heads;
  q = sliceBase(q, layout.q, b, h);
  k = sliceBase(k, layout.k, b, h);
  v = sliceBase(v, layout.v, b, h);
  lse += static_cast<long long>(bh) * queries;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int firstQuery = blockIdx.x * BlockRows, row0 = firstQuery + warp * WarpRows;
  const int causalOffset = keys - queries;
  const float scaleLog2 = scale * kLog2e;

  unsigned qa[M][D / 16][4];
  float acc[M][D / 8][4];
  float runningMax[M][2], runningSum[M][2];
#pragma unroll
  for (int m = 0; m < M; ++m) {
    loadRowFragments<D>(qa[m], q, layout.q.row, row0 + 16 * m, queries);
    zero(acc[m]);
    runningMax[m][0] = runningMax[m][1] = negativeInfinity();
    runningSum[m][0] = runningSum[m][1] = 0.0f;
  }

  const int end = keyEnd<kCausal>(firstQuery, BlockRows, queries, keys);
  const int warpEnd = keyEnd<kCausal>(row0, WarpRows, queries, keys);
  // The keys every row of the warp sees: below the causal diagonal of its first row (or all).
  const int unmaskedEnd = keyEnd<kCausal>(row0, 1, queries, keys);
  streamTiles<D, BN, 2>(
      smem.k, smem.v, k, layout.k.row, v, layout.v.row, keys, 0, (end + BN - 1) / BN,
      NothingExtra(), [&](int firstKey, int buffer) {
        if (firstKey >= warpEnd) // every key is masked for this warp
          return;
        if (firstKey + BN <= unmaskedEnd)
          forwardTile<kBf16, M, D, BN, kCausal, false>(qa, acc, runningMax, runningSum,
                                                       smem.k[buffer], smem.v[buffer], row0,
                                                       firstKey, keys, causalOffset, scaleLog2);
        else
          forwardTile<kBf16, M, D, BN, kCausal, true>(qa, acc, runningMax, runningSum,
                                                      smem.k[buffer], smem.v[buffer], row0,
                                                      firstKey, keys, causalOffset, scaleLog2);
      });

  // o's slice from the parameters here rather than held through the loop.
  unsigned short *out =
      sliceBase(o, layout.o, blockIdx.y / layout.heads, blockIdx.y % layout.heads);
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const int rowTile = row0 + 16 * m;
    storeRows<kBf16, D>(out, layout.o.row, acc[m], rowTile, queries,
                        runningSum[m][0] > 0.0f ? 1.0f / runningSum[m][0] : 0.0f,
                        runningSum[m][1] > 0.0f ? 1.0f / runningSum[m][1] : 0.0f);
    if (t == 0)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = rowTile + g + 8 * h;
        if (row < queries)
          lse[row] = runningSum[m][h] > 0.0f ? (runningMax[m][h] + log2f(runningSum[m][h])) * kLn2
                                             : negativeInfinity();
      }
  }
}

//===----------------------------------------------------------------------===//
// Backward: dq
//===----------------------------------------------------------------------===//

/// One key tile of dq for one warp: S = q k^T, dP = dO v^T, dS = P (dP - delta) with
/// P = exp(S scale - lse), dq += dS k (unscaled; the caller applies the scale). kMask: the tile
/// has rows past T, keys past S or crosses the causal diagonal (else no element is tested).
template <bool kBf16, int D, int BN, bool kCausal, bool kMask, int Stride>
__device__ __forceinline__ void
dqTile(const unsigned (&qa)[D / 16][4], const unsigned (&dOa)[D / 16][4], float (&acc)[D / 8][4],
       const float (&rowLse2)[2], const float (&rowDelta)[2], const unsigned short (*kTile)[Stride],
       const unsigned short (*vTile)[Stride], int row0, int firstKey, int queries, int keys,
       int causalOffset, float scaleLog2) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  float s[BN / 8][4], dP[BN / 8][4];
  zero(s);
  zero(dP);
  mmaRowsTimesTileT<kBf16, D, BN / 8>(s, qa, kTile, 0);
  mmaRowsTimesTileT<kBf16, D, BN / 8>(dP, dOa, vTile, 0);
#pragma unroll
  for (int n = 0; n < BN / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int h = e >> 1;
      const int row = row0 + g + 8 * h, key = firstKey + 8 * n + 2 * t + (e & 1);
      const bool seen =
          !kMask || (row < queries && key < keys && visible<kCausal>(row, key, causalOffset));
      const float p = exp2f(s[n][e] * scaleLog2 - rowLse2[h]);
      s[n][e] = seen ? p * (dP[n][e] - rowDelta[h]) : 0.0f; // dS
    }
  unsigned dS[BN / 16][4];
  packAsA<kBf16, BN / 8>(dS, s);
  mmaRowsTimesTile<kBf16, BN, D / 8>(acc, dS, kTile, 0);
}

/// BN: the keys of a streamed tile (MmaTileShape's by default; the attention bench also times
/// 32 at head dim 64).
template <class E, int D, bool kCausal, int BN = MmaTileShape<D>::dqKeys>
__device__ __forceinline__ void
mmaAttentionBackwardDq(const unsigned short *__restrict__ q, const unsigned short *__restrict__ k,
                       const unsigned short *__restrict__ v, const unsigned short *__restrict__ dO,
                       const float *__restrict__ lse, const float *__restrict__ delta,
                       unsigned short *__restrict__ dq, int queries, int keys, float scale,
                       Layout layout) {
  static_assert(BN % 16 == 0, "dq's key tiles are whole 16-key k-steps");
  constexpr bool kBf16 = IsBf16<E>::value;
  constexpr int Stride = MmaTileShape<D>::stride;
  struct alignas(16) Tiles {
    unsigned short k[2][BN][Stride];
    unsigned short v[2][BN][Stride];
  };
  __shared__ Tiles smem;

  const int bh = blockIdx.y, b = bh / layout.heads, h = bh % layout.heads;
  q = sliceBase(q, layout.q, b, h);
  k = sliceBase(k, layout.k, b, h);
  v = sliceBase(v, layout.v, b, h);
  dO = sliceBase(dO, layout.dO, b, h);
  lse += static_cast<long long>(bh) * queries;
  delta += static_cast<long long>(bh) * queries;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int firstQuery = blockIdx.x * kMmaBlockRows, row0 = firstQuery + warp * kMmaWarpRows;
  const int causalOffset = keys - queries;
  const float scaleLog2 = scale * kLog2e;
  float rowLse2[2], rowDelta[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + g + 8 * h;
    rowLse2[h] = row < queries ? lse[row] * kLog2e : 0.0f;
    rowDelta[h] = row < queries ? delta[row] : 0.0f;
  }

  unsigned qa[D / 16][4], dOa[D / 16][4];
  loadRowFragments<D>(qa, q, layout.q.row, row0, queries);
  loadRowFragments<D>(dOa, dO, layout.dO.row, row0, queries);
  float acc[D / 8][4];
  zero(acc);

  const int end = keyEnd<kCausal>(firstQuery, kMmaBlockRows, queries, keys);
  const int warpEnd = keyEnd<kCausal>(row0, kMmaWarpRows, queries, keys);
  // Tiles every row of the warp sees whole: its rows all before T, the keys before S and below
  // the causal diagonal of its first row.
  const int unmaskedEnd =
      row0 + kMmaWarpRows <= queries ? keyEnd<kCausal>(row0, 1, queries, keys) : 0;
  streamTiles<D, BN, 2>(
      smem.k, smem.v, k, layout.k.row, v, layout.v.row, keys, 0, (end + BN - 1) / BN,
      NothingExtra(), [&](int firstKey, int buffer) {
        if (firstKey >= warpEnd)
          return;
        // (Not at D = 128, where a second form of the tile spills registers.)
        if constexpr (D <= 64)
          if (firstKey + BN <= unmaskedEnd) {
            dqTile<kBf16, D, BN, kCausal, false>(qa, dOa, acc, rowLse2, rowDelta, smem.k[buffer],
                                                 smem.v[buffer], row0, firstKey, queries, keys,
                                                 causalOffset, scaleLog2);
            return;
          }
        dqTile<kBf16, D, BN, kCausal, true>(qa, dOa, acc, rowLse2, rowDelta, smem.k[buffer],
                                              smem.v[buffer], row0, firstKey, queries, keys,
                                              causalOffset, scaleLog2);
      });
  // dq's slice from the parameters here rather than held through the loop.
  storeRows<kBf16, D>(sliceBase(dq, layout.q, blockIdx.y / layout.heads, blockIdx.y % layout.heads),
                      layout.q.row, acc, row0, queries, scale, scale);
}

//===----------------------------------------------------------------------===//
// Backward: dk and dv
//===----------------------------------------------------------------------===//

/// BM: the queries of a streamed tile (MmaTileShape's by default; the attention bench also times
/// 32 at head dim 64).
template <class E, int D, bool kCausal, int BM = MmaTileShape<D>::dkvQueries>
__device__ __forceinline__ void
mmaAttentionBackwardDkDv(const unsigned short *__restrict__ q, const unsigned short *__restrict__ k,
                         const unsigned short *__restrict__ v,
                         const unsigned short *__restrict__ dO, const float *__restrict__ lse,
                         const float *__restrict__ delta, unsigned short *__restrict__ dk,
                         unsigned short *__restrict__ dv, int queries, int keys, float scale,
                         Layout layout) {
  static_assert(BM % 16 == 0, "dk/dv's query tiles are whole 16-query k-steps");
  constexpr bool kBf16 = IsBf16<E>::value;
  constexpr int Stride = MmaTileShape<D>::stride;
  // Head dims up to 64: the warp's k and v rows live in registers as A fragments and the query
  // tiles are double-buffered. 128: k and v stay in shared memory (re-read by ldmatrix), which
  // leaves room for one query tile only.
  constexpr bool kFragments = D <= 64;
  constexpr int Buffers = kFragments ? 2 : 1, KeyRows = kFragments ? 1 : kMmaBlockRows;
  struct alignas(16) Tiles {
    unsigned short k[KeyRows][Stride];
    unsigned short v[KeyRows][Stride];
    unsigned short q[Buffers][BM][Stride];
    unsigned short dO[Buffers][BM][Stride];
    float lse2[Buffers][BM];
    float delta[Buffers][BM];
  };
  __shared__ Tiles smem;

  const int bh = blockIdx.y, b = bh / layout.heads, h = bh % layout.heads;
  q = sliceBase(q, layout.q, b, h);
  k = sliceBase(k, layout.k, b, h);
  v = sliceBase(v, layout.v, b, h);
  dO = sliceBase(dO, layout.dO, b, h);
  lse += static_cast<long long>(bh) * queries;
  delta += static_cast<long long>(bh) * queries;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int firstKey = blockIdx.x * kMmaBlockRows, warpRow = warp * kMmaWarpRows;
  const int key0 = firstKey + warpRow;
  const int causalOffset = keys - queries;
  const float scaleLog2 = scale * kLog2e;

  unsigned ka[D / 16][4], va[D / 16][4]; // unused (and optimised away) at D = 128
  if constexpr (kFragments) {
    loadRowFragments<D>(ka, k, layout.k.row, key0, keys);
    loadRowFragments<D>(va, v, layout.v.row, key0, keys);
  } else {
    // Visible to every warp after the first tile's barrier.
    stageTile<D, KeyRows>(smem.k, k, layout.k.row, firstKey, keys);
    stageTile<D, KeyRows>(smem.v, v, layout.v.row, firstKey, keys);
  }
  float dkAcc[D / 8][4], dvAcc[D / 8][4];
  zero(dkAcc);
  zero(dvAcc);

  // Causal: query t sees key s when s <= t + offset; the block's first key is first seen by
  // query firstKey - offset (this warp's by key0 - offset).
  int begin = 0, warpBegin = 0;
  if (kCausal) {
    begin = firstKey - causalOffset;
    begin = begin < 0 ? 0 : begin - begin % BM;
    warpBegin = key0 - causalOffset;
  }
  const int tiles = begin < queries ? (queries - begin + BM - 1) / BM : 0;
  auto stageRowStatistics = [&](int firstQuery, int buffer) {
    for (int r = threadIdx.x; r < BM; r += kThreads) {
      const bool inside = firstQuery + r < queries;
      smem.lse2[buffer][r] = inside ? lse[firstQuery + r] * kLog2e : 0.0f;
      smem.delta[buffer][r] = inside ? delta[firstQuery + r] : 0.0f;
    }
  };
  streamTiles<D, BM, Buffers>(
      smem.q, smem.dO, q, layout.q.row, dO, layout.dO.row, queries, begin, tiles,
      stageRowStatistics,
      [&](int firstQuery, int buffer) {
        if (kCausal && firstQuery + BM <= warpBegin) // no query of the tile sees these keys
          return;
        // S^T = k q^T and dP^T = v dO^T: rows are this warp's 16 keys, columns the BM queries.
        float sT[BM / 8][4], dPT[BM / 8][4];
        zero(sT);
        zero(dPT);
        if constexpr (kFragments) {
          mmaRowsTimesTileT<kBf16, D, BM / 8>(sT, ka, smem.q[buffer], 0);
          mmaRowsTimesTileT<kBf16, D, BM / 8>(dPT, va, smem.dO[buffer], 0);
        } else {
          unsigned rows[D / 16][4];
          tileRowFragments<D>(rows, smem.k, warpRow);
          mmaRowsTimesTileT<kBf16, D, BM / 8>(sT, rows, smem.q[buffer], 0);
          tileRowFragments<D>(rows, smem.v, warpRow);
          mmaRowsTimesTileT<kBf16, D, BM / 8>(dPT, rows, smem.dO[buffer], 0);
        }
#pragma unroll
        for (int n = 0; n < BM / 8; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int column = 8 * n + 2 * t + (e & 1);
            const int key = key0 + g + (e >= 2 ? 8 : 0), query = firstQuery + column;
            const bool seen =
                query < queries && key < keys && visible<kCausal>(query, key, causalOffset);
            const float p = seen ? exp2f(sT[n][e] * scaleLog2 - smem.lse2[buffer][column]) : 0.0f;
            sT[n][e] = p;
            dPT[n][e] = p * (dPT[n][e] - smem.delta[buffer][column]); // dS^T
          }
        unsigned pa[BM / 16][4], dSa[BM / 16][4];
        packAsA<kBf16, BM / 8>(pa, sT);
        packAsA<kBf16, BM / 8>(dSa, dPT);
        mmaRowsTimesTile<kBf16, BM, D / 8>(dvAcc, pa, smem.dO[buffer], 0);
        mmaRowsTimesTile<kBf16, BM, D / 8>(dkAcc, dSa, smem.q[buffer], 0);
      });
  // dk's and dv's slices from the parameters here rather than held through the loop.
  const int outB = blockIdx.y / layout.heads, outH = blockIdx.y % layout.heads;
  storeRows<kBf16, D>(sliceBase(dk, layout.k, outB, outH), layout.k.row, dkAcc, key0, keys, scale,
                      scale);
  storeRows<kBf16, D>(sliceBase(dv, layout.v, outB, outH), layout.v.row, dvAcc, key0, keys, 1.0f,
                      1.0f);
}

} // namespace flash
} // namespace ampc

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//
//
// AMPC_FLASH_ATTENTION_MMA_ENTRY_POINTS(bf16, ampc::flash::Bf16, 64) defines the same entry
// points, with the same parameters, as AMPC_FLASH_ATTENTION_ENTRY_POINTS (FlashAttention.cuh)
// for a 16-bit element type, the forward, dq and dk/dv on tensor cores (grids of
// ceil(T / kMmaForwardBlockRows<D>) blocks of kThreads for the forward, ceil(rows /
// kMmaBlockRows) for dq and dk/dv), the delta kernel unchanged. A translation
// unit expands one of the two macros per (dtype, head dim), not both.

#define AMPC_FLASH_ATTENTION_MMA_CAUSAL_VARIANTS(NAME, ELEMENT, D, SUFFIX, CAUSAL)                 \
  extern "C" __global__ void __launch_bounds__(ampc::flash::kThreads)                              \
      ampc_flash_attention_fwd_##NAME##_d##D##SUFFIX(                                              \
          const unsigned short *q, const unsigned short *k, const unsigned short *v,               \
          unsigned short *o, float *lse, int queries, int keys, float scale,                       \
          ampc::flash::Layout layout) {                                                            \
    ampc::flash::mmaAttentionForward<ELEMENT, D, CAUSAL>(q, k, v, o, lse, queries, keys, scale,    \
                                                         layout);                                  \
  }                                                                                                \
  extern "C" __global__ void __launch_bounds__(ampc::flash::kThreads)                              \
      ampc_flash_attention_bwd_dq_##NAME##_d##D##SUFFIX(                                           \
          const unsigned short *q, const unsigned short *k, const unsigned short *v,               \
          const unsigned short *dO, const float *lse, const float *delta, unsigned short *dq,      \
          int queries, int keys, float scale, ampc::flash::Layout layout) {                        \
    ampc::flash::mmaAttentionBackwardDq<ELEMENT, D, CAUSAL>(q, k, v, dO, lse, delta, dq, queries,  \
                                                            keys, scale, layout);                  \
  }                                                                                                \
  extern "C" __global__ void __launch_bounds__(ampc::flash::kThreads)                              \
      ampc_flash_attention_bwd_dkdv_##NAME##_d##D##SUFFIX(                                         \
          const unsigned short *q, const unsigned short *k, const unsigned short *v,               \
          const unsigned short *dO, const float *lse, const float *delta, unsigned short *dk,      \
          unsigned short *dv, int queries, int keys, float scale, ampc::flash::Layout layout) {    \
    ampc::flash::mmaAttentionBackwardDkDv<ELEMENT, D, CAUSAL>(q, k, v, dO, lse, delta, dk, dv,     \
                                                              queries, keys, scale, layout);       \
  }

#define AMPC_FLASH_ATTENTION_MMA_ENTRY_POINTS(NAME, ELEMENT, D)                                    \
  AMPC_FLASH_ATTENTION_MMA_CAUSAL_VARIANTS(NAME, ELEMENT, D, , false)                              \
  AMPC_FLASH_ATTENTION_MMA_CAUSAL_VARIANTS(NAME, ELEMENT, D, _causal, true)                        \
  AMPC_FLASH_ATTENTION_DELTA(NAME, ELEMENT, D)

#endif // AMPC_RUNTIME_CUDA_DEVICE_FLASHATTENTIONMMA_CUH
