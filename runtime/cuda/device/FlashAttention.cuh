//===- FlashAttention.cuh - Fused attention forward and backward kernels --===//
//
// Flash-style scaled dot-product attention that never materialises the
// T x S score matrix, as device code for NVRTC (and nvcc). Each (batch x
// head) slice bh = b heads + h of q [T, D], k, v [S, D], o, dO [T, D] (and
// dq, dk, dv, written where q, k, v are read) is a row-major matrix whose rows
// may be strided: row t of slice (b, h) of an operand starts at element
// b batch + h head + t row of its pointer (a Layout, passed by value: strides
// in elements, the pointers already at the operand's first element). A
// contiguous [BH, T, D] tensor has strides (heads T D, T D, D); q, k, v read
// in place from a packed [B, T, 3 heads D] projection have (T 3 heads D, D,
// 3 heads D), o written into [B, T, heads D] has (T heads D, D, heads D). The
// f32 lse and delta are always contiguous [BH, T].
// Semantics match the CPU reference (runtime/cpu/AttentionKernel.cpp):
//   o[t] = sum_s softmax_s(scale q[t] . k[s]) v[s], where with causal masking
// key s is excluded when s > t + (S - T). A query row that sees no key (only
// possible when causal and T > S) gets o = 0 and lse = -inf here; the CPU
// reference gives NaN there (0/0).
//
// Storage is bf16, f16 (raw 16-bit patterns, converted with the round-to-
// nearest-even helpers of runtime/numerics/Float16.h) or f32; every product,
// sum and softmax statistic is fp32. Head dims 16, 32, 64 and 128 (Dv = Dh).
//
// The kernels (FlashAttention-2's algorithm):
//   forward   one block per 32 query rows: loops over key tiles with an
//             online softmax (running max m, running sum l, rescaled
//             accumulator), writes o and lse = m + log(l). Causal: key tiles
//             wholly above the diagonal are never loaded.
//   delta     delta[t] = sum_e dO[t, e] o[t, e] (= rowsum(dP * P)).
//   dq        one block per 32 query rows: recomputes P = exp(scale q k^T -
//             lse) tile by tile, dP = dO v^T, dS = P (dP - delta),
//             dq = scale dS k.
//   dk/dv     one block per 32 keys: loops over query tiles, recomputes P and
//             dS the same way, dv = P^T dO, dk = scale dS^T q.
// dq and dk/dv are separate kernels (7 tile products instead of FA2's 5 with
// an atomic dq) so that every output is written once, deterministically, in
// its storage type, with no f32 scratch for dq. Launch order: forward; then
// delta, dq, dk/dv (dq and dk/dv both read delta).
//
// The kernels here compute the tile products with fp32 FMAs from shared
// memory (each thread: one row of the tile, a quarter of its columns).
// Static shared memory stays under 48 KB for every (D, tile) choice, so no
// opt-in attribute is needed. The device program runs them for f32 storage.
// bf16 and f16 storage run the tensor-core kernels of FlashAttentionMma.cuh
// (mma.sync m16n8k16 with fp32 accumulators, tiles staged in the 16-bit
// storage type, 64 rows a block and 128 for the forward at head dims up to
// 64, cp.async double-buffered loads, P and dS rounded to the storage type as
// MMA operands), which keep this file's element types, operand layouts,
// masking, entry-point signatures and delta kernel.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CUDA_DEVICE_FLASHATTENTION_CUH
#define AMPC_RUNTIME_CUDA_DEVICE_FLASHATTENTION_CUH

#include "runtime/numerics/Float16.h"
#include "runtime/numerics/HostDevice.h"

namespace ampc {
namespace flash {

//===----------------------------------------------------------------------===//
// Element types: storage in memory, fp32 in registers
//===----------------------------------------------------------------------===//

/// bf16 stored as its 16-bit pattern.
struct Bf16 {
  typedef unsigned short Storage;
  static __device__ __forceinline__ float load(Storage bits) {
    return numerics::bf16BitsToFloat(bits);
  }
  static __device__ __forceinline__ Storage store(float value) {
    return numerics::floatToBF16Bits(value);
  }
};

/// IEEE binary16 stored as its 16-bit pattern.
struct F16 {
  typedef unsigned short Storage;
  static __device__ __forceinline__ float load(Storage bits) {
    return numerics::f16BitsToFloat(bits);
  }
  static __device__ __forceinline__ Storage store(float value) {
    return numerics::floatToF16Bits(value);
  }
};

/// fp32 storage.
struct F32 {
  typedef float Storage;
  static __device__ __forceinline__ float load(Storage value) { return value; }
  static __device__ __forceinline__ Storage store(float value) { return value; }
};

//===----------------------------------------------------------------------===//
// Tile shapes
//===----------------------------------------------------------------------===//

/// Threads per block of every kernel: 4 warps. Each row of a block's own
/// tile (a query row, or a key row for dk/dv) belongs to 4 consecutive lanes
/// of one warp; lane (tid & 3) owns the columns (tid & 3) + 4 j.
constexpr int kThreads = 128;
constexpr int kRowsPerBlock = kThreads / 4; // 32
constexpr int kRowThreads = 4;

/// Key tile of the forward and dq kernels, query tile of the dk/dv kernel:
/// chosen so the fp32 shared tiles (rows padded by one word against bank
/// conflicts) fit in 48 KB.
template <int D> struct TileShape {
  static_assert(D == 16 || D == 32 || D == 64 || D == 128, "head dim must be 16, 32, 64 or 128");
  /// Forward: q[32][D+1] + k, v[fwdKeys][D+1] + p[32][fwdKeys+1]
  /// (D=128: 16.5 + 16.5 + 2.2 KB; D=64: 8.3 + 16.6 + 4.2 KB).
  static constexpr int fwdKeys = D == 128 ? 16 : 32;
  /// dq: q, dO[32][D+1] + k, v[dqKeys][D+1] + dS[32][dqKeys+1]
  /// (D=128: 33 + 8.3 + 1.2 KB; D=64: 16.6 + 16.6 + 4.2 KB).
  static constexpr int dqKeys = D == 128 ? 8 : 32;
  /// dk/dv: k, v[32][D+1] + q, dO[dkvQueries][D+1] + P, dS[32][dkvQueries+1]
  /// (D=128: 33 + 8.3 + 2.3 KB; D=64: 16.6 + 16.6 + 8.4 KB).
  static constexpr int dkvQueries = D == 128 ? 8 : 32;
};

//===----------------------------------------------------------------------===//
// Operand layouts
//===----------------------------------------------------------------------===//

/// Where one operand's rows lie, in elements: row t of slice (b, h) starts at
/// b batch + h head + t row. Each is a multiple of 16 bytes (the plan's
/// validation), so every row is 16-byte aligned when the pointer is.
struct OperandStrides {
  long long batch, head, row;
};

/// The layouts of one launch, the last parameter of every entry point (by
/// value, in the kernel's parameter space): blockIdx.y = b heads + h, and
/// the strides of q (and dq), k (and dk), v (and dv), o and dO. o and dO have
/// separate strides so that a backward can recompute o into contiguous
/// scratch while dO lies elsewhere.
struct Layout {
  int heads;
  OperandStrides q, k, v, o, dO;
};

/// The first element of slice (b, h) of an operand.
template <class T>
__device__ __forceinline__ T *sliceBase(T *pointer, const OperandStrides &strides, int b, int h) {
  return pointer + b * strides.batch + h * strides.head;
}

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ float negativeInfinity() { return __int_as_float(0xff800000); }

/// The maximum / sum over the 4 lanes that share a row.
__device__ __forceinline__ float rowMax(float value) {
  value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, 1));
  return fmaxf(value, __shfl_xor_sync(0xffffffffu, value, 2));
}
__device__ __forceinline__ float rowSum(float value) {
  value += __shfl_xor_sync(0xffffffffu, value, 1);
  return value + __shfl_xor_sync(0xffffffffu, value, 2);
}

/// tile[r][c] = src[(first + r) rowStride + c] as fp32 for the rows first + r
/// < rowCount, 0 for the rest (so padding rows add nothing to any product).
/// Reads Rows rows of D contiguous elements, coalesced.
template <class E, int D, int Rows, int Stride>
__device__ __forceinline__ void loadTile(float (*tile)[Stride], const typename E::Storage *src,
                                         long long rowStride, int first, int rowCount) {
  for (int i = threadIdx.x; i < Rows * D; i += kThreads) {
    const int r = i / D, c = i % D;
    tile[r][c] = first + r < rowCount ? E::load(src[(first + r) * rowStride + c]) : 0.0f;
  }
}

/// The dot product of two shared fp32 rows of length D, summed in order.
/// Unrolled by 8, not fully: full unrolling inside the callers' unrolled
/// column loops made NVRTC's front end 7x slower for no register gain.
template <int D> __device__ __forceinline__ float dotRow(const float *a, const float *b) {
  float sum = 0.0f;
#pragma unroll 8
  for (int d = 0; d < D; ++d)
    sum = fmaf(a[d], b[d], sum);
  return sum;
}

/// Whether key s is visible from query t (s < keys already checked).
template <bool kCausal> __device__ __forceinline__ bool visible(int t, int s, int causalOffset) {
  return !kCausal || s <= t + causalOffset;
}

/// The end of the keys any query in [firstQuery, firstQuery + rows) sees.
template <bool kCausal>
__device__ __forceinline__ int keyEnd(int firstQuery, int rows, int queries, int keys) {
  if (!kCausal)
    return keys;
  const int end = firstQuery + rows + (keys - queries); // last t + offset + 1
  return end < 0 ? 0 : (end < keys ? end : keys);
}

//===----------------------------------------------------------------------===//
// flash_attention_forward
//===----------------------------------------------------------------------===//

/// o[bh, t, :] = softmax_s(scale q[bh, t] . k[bh, s]) v[bh, s, :] and
/// lse[bh, t] = log sum_s exp(scale q[bh, t] . k[bh, s]) for the 32 query
/// rows of block (blockIdx.x, bh = blockIdx.y). Reads its q rows once and
/// the k, v rows up to the causal limit once; writes 32 rows of o and lse.
/// Softmax runs in base 2: x2 = x log2(e), exp(x) = exp2(x2).
template <class E, int D, bool kCausal>
__device__ __forceinline__ void flashAttentionForward(const typename E::Storage *__restrict__ q,
                                                      const typename E::Storage *__restrict__ k,
                                                      const typename E::Storage *__restrict__ v,
                                                      typename E::Storage *__restrict__ o,
                                                      float *__restrict__ lse, int queries,
                                                      int keys, float scale, Layout layout) {
  constexpr int BM = kRowsPerBlock, BN = TileShape<D>::fwdKeys;
  __shared__ float qTile[BM][D + 1];
  __shared__ float kTile[BN][D + 1];
  __shared__ float vTile[BN][D + 1];
  __shared__ float pTile[BM][BN + 1];

  const int bh = blockIdx.y, b = bh / layout.heads, h = bh % layout.heads;
  q = sliceBase(q, layout.q, b, h);
  k = sliceBase(k, layout.k, b, h);
  v = sliceBase(v, layout.v, b, h);
  o = sliceBase(o, layout.o, b, h);
  lse += static_cast<long long>(bh) * queries;
  const int firstQuery = blockIdx.x * BM;
  const int row = threadIdx.x / kRowThreads, part = threadIdx.x % kRowThreads;
  const int t = firstQuery + row;
  const int causalOffset = keys - queries;
  const float scaleLog2 = scale * kLog2e;

  loadTile<E, D, BM>(qTile, q, layout.q.row, firstQuery, queries);

  float acc[D / 4];
#pragma unroll
  for (int j = 0; j < D / 4; ++j)
    acc[j] = 0.0f;
  float runningMax = negativeInfinity(), runningSum = 0.0f;

  const int end = keyEnd<kCausal>(firstQuery, BM, queries, keys);
  for (int firstKey = 0; firstKey < end; firstKey += BN) {
    __syncthreads(); // the previous tile's readers are done
    loadTile<E, D, BN>(kTile, k, layout.k.row, firstKey, keys);
    loadTile<E, D, BN>(vTile, v, layout.v.row, firstKey, keys);
    __syncthreads();

    // Scores of this thread's columns c = part + 4 j (base-2 units).
    float score[BN / 4];
    float tileMax = negativeInfinity();
#pragma unroll
    for (int j = 0; j < BN / 4; ++j) {
      const int c = part + 4 * j, s = firstKey + c;
      const float dot = dotRow<D>(qTile[row], kTile[c]) * scaleLog2;
      score[j] = s < keys && visible<kCausal>(t, s, causalOffset) ? dot : negativeInfinity();
      tileMax = fmaxf(tileMax, score[j]);
    }
    const float newMax = fmaxf(runningMax, rowMax(tileMax));
    // While every key so far is masked, subtract 0 instead of -inf.
    const float base = newMax == negativeInfinity() ? 0.0f : newMax;
    const float correction = exp2f(runningMax - base);
    float tileSum = 0.0f;
#pragma unroll
    for (int j = 0; j < BN / 4; ++j) {
      const float p = exp2f(score[j] - base);
      pTile[row][part + 4 * j] = p;
      tileSum += p;
    }
    runningSum = runningSum * correction + rowSum(tileSum);
    runningMax = newMax;
    // The row's 4 lanes (one warp) wrote pTile[row]; they read it back.
    __syncwarp();
    // acc = acc * correction + P v.
#pragma unroll
    for (int j = 0; j < D / 4; ++j)
      acc[j] *= correction;
    for (int c = 0; c < BN; ++c) {
      const float p = pTile[row][c];
#pragma unroll
      for (int j = 0; j < D / 4; ++j)
        acc[j] = fmaf(p, vTile[c][part + 4 * j], acc[j]);
    }
  }

  if (t < queries) {
    const float inverse = runningSum > 0.0f ? 1.0f / runningSum : 0.0f;
#pragma unroll
    for (int j = 0; j < D / 4; ++j)
      o[t * layout.o.row + part + 4 * j] = E::store(acc[j] * inverse);
    if (part == 0)
      lse[t] = runningSum > 0.0f ? (runningMax + log2f(runningSum)) * kLn2 : negativeInfinity();
  }
}

//===----------------------------------------------------------------------===//
// flash_attention_backward_delta
//===----------------------------------------------------------------------===//

/// delta[r] = sum_e dO[r, e] o[r, e] over all rows r = bh T + t < rows (=
/// BH x T): one warp per row, 4 rows per block. Reads dO and o once, writes
/// delta (contiguous).
template <class E, int D>
__device__ __forceinline__ void
flashAttentionBackwardDelta(const typename E::Storage *__restrict__ o,
                            const typename E::Storage *__restrict__ dO, float *__restrict__ delta,
                            long long rows, int queries, Layout layout) {
  const long long r = static_cast<long long>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) // whole warps leave together
    return;
  const long long bh = r / queries;
  const int t = static_cast<int>(r - bh * queries);
  const int b = static_cast<int>(bh / layout.heads), h = static_cast<int>(bh % layout.heads);
  o = sliceBase(o, layout.o, b, h) + t * layout.o.row;
  dO = sliceBase(dO, layout.dO, b, h) + t * layout.dO.row;
  float sum = 0.0f;
  for (int e = lane; e < D; e += 32)
    sum += E::load(dO[e]) * E::load(o[e]);
#pragma unroll
  for (int width = 16; width > 0; width /= 2)
    sum += __shfl_xor_sync(0xffffffffu, sum, width);
  if (lane == 0)
    delta[r] = sum;
}

//===----------------------------------------------------------------------===//
// flash_attention_backward_dq
//===----------------------------------------------------------------------===//

/// dq[bh, t, :] = scale sum_s dS[t, s] k[bh, s, :] with P[t, s] =
/// exp(scale q[t] . k[s] - lse[t]), dP[t, s] = dO[t] . v[s], dS = P (dP -
/// delta[t]), for the 32 query rows of block (blockIdx.x, bh = blockIdx.y).
/// Reads q, dO, lse, delta of its rows once and k, v up to the causal limit
/// once; writes 32 rows of dq.
template <class E, int D, bool kCausal>
__device__ __forceinline__ void flashAttentionBackwardDq(
    const typename E::Storage *__restrict__ q, const typename E::Storage *__restrict__ k,
    const typename E::Storage *__restrict__ v, const typename E::Storage *__restrict__ dO,
    const float *__restrict__ lse, const float *__restrict__ delta,
    typename E::Storage *__restrict__ dq, int queries, int keys, float scale, Layout layout) {
  constexpr int BM = kRowsPerBlock, BN = TileShape<D>::dqKeys;
  __shared__ float qTile[BM][D + 1];
  __shared__ float dOTile[BM][D + 1];
  __shared__ float kTile[BN][D + 1];
  __shared__ float vTile[BN][D + 1];
  __shared__ float dSTile[BM][BN + 1];

  const int bh = blockIdx.y, b = bh / layout.heads, h = bh % layout.heads;
  q = sliceBase(q, layout.q, b, h);
  k = sliceBase(k, layout.k, b, h);
  v = sliceBase(v, layout.v, b, h);
  dO = sliceBase(dO, layout.dO, b, h);
  dq = sliceBase(dq, layout.q, b, h);
  lse += static_cast<long long>(bh) * queries;
  delta += static_cast<long long>(bh) * queries;
  const int firstQuery = blockIdx.x * BM;
  const int row = threadIdx.x / kRowThreads, part = threadIdx.x % kRowThreads;
  const int t = firstQuery + row;
  const int causalOffset = keys - queries;
  const float scaleLog2 = scale * kLog2e;
  // The row's statistics stay in registers (padding rows: 0, never used).
  const float rowLse2 = t < queries ? lse[t] * kLog2e : 0.0f;
  const float rowDelta = t < queries ? delta[t] : 0.0f;

  loadTile<E, D, BM>(qTile, q, layout.q.row, firstQuery, queries);
  loadTile<E, D, BM>(dOTile, dO, layout.dO.row, firstQuery, queries);

  float acc[D / 4];
#pragma unroll
  for (int j = 0; j < D / 4; ++j)
    acc[j] = 0.0f;

  const int end = keyEnd<kCausal>(firstQuery, BM, queries, keys);
  for (int firstKey = 0; firstKey < end; firstKey += BN) {
    __syncthreads();
    loadTile<E, D, BN>(kTile, k, layout.k.row, firstKey, keys);
    loadTile<E, D, BN>(vTile, v, layout.v.row, firstKey, keys);
    __syncthreads();
#pragma unroll
    for (int j = 0; j < BN / 4; ++j) {
      const int c = part + 4 * j, s = firstKey + c;
      float dS = 0.0f;
      if (s < keys && visible<kCausal>(t, s, causalOffset)) {
        const float p = exp2f(dotRow<D>(qTile[row], kTile[c]) * scaleLog2 - rowLse2);
        const float dP = dotRow<D>(dOTile[row], vTile[c]);
        dS = p * (dP - rowDelta);
      }
      dSTile[row][c] = dS;
    }
    __syncwarp();
    for (int c = 0; c < BN; ++c) {
      const float dS = dSTile[row][c];
#pragma unroll
      for (int j = 0; j < D / 4; ++j)
        acc[j] = fmaf(dS, kTile[c][part + 4 * j], acc[j]);
    }
  }

  if (t < queries) {
#pragma unroll
    for (int j = 0; j < D / 4; ++j)
      dq[t * layout.q.row + part + 4 * j] = E::store(acc[j] * scale);
  }
}

//===----------------------------------------------------------------------===//
// flash_attention_backward_dkdv
//===----------------------------------------------------------------------===//

/// dv[bh, s, :] = sum_t P[t, s] dO[bh, t, :] and dk[bh, s, :] = scale sum_t
/// dS[t, s] q[bh, t, :] (P, dS as in the dq kernel) for the 32 keys of block
/// (blockIdx.x, bh = blockIdx.y). Reads its k, v rows once and q, dO, lse,
/// delta from the first query that sees them (causal) once; writes 32 rows
/// of dk and dv (zeros for keys no query sees).
template <class E, int D, bool kCausal>
__device__ __forceinline__ void flashAttentionBackwardDkDv(
    const typename E::Storage *__restrict__ q, const typename E::Storage *__restrict__ k,
    const typename E::Storage *__restrict__ v, const typename E::Storage *__restrict__ dO,
    const float *__restrict__ lse, const float *__restrict__ delta,
    typename E::Storage *__restrict__ dk, typename E::Storage *__restrict__ dv, int queries,
    int keys, float scale, Layout layout) {
  constexpr int BN = kRowsPerBlock, BM = TileShape<D>::dkvQueries;
  __shared__ float kTile[BN][D + 1];
  __shared__ float vTile[BN][D + 1];
  __shared__ float qTile[BM][D + 1];
  __shared__ float dOTile[BM][D + 1];
  __shared__ float pTile[BN][BM + 1];  // transposed: [key][query]
  __shared__ float dSTile[BN][BM + 1]; // transposed: [key][query]
  __shared__ float lseTile[BM];        // base 2
  __shared__ float deltaTile[BM];

  const int bh = blockIdx.y, b = bh / layout.heads, h = bh % layout.heads;
  q = sliceBase(q, layout.q, b, h);
  k = sliceBase(k, layout.k, b, h);
  v = sliceBase(v, layout.v, b, h);
  dO = sliceBase(dO, layout.dO, b, h);
  dk = sliceBase(dk, layout.k, b, h);
  dv = sliceBase(dv, layout.v, b, h);
  lse += static_cast<long long>(bh) * queries;
  delta += static_cast<long long>(bh) * queries;
  const int firstKey = blockIdx.x * BN;
  const int row = threadIdx.x / kRowThreads, part = threadIdx.x % kRowThreads;
  const int s = firstKey + row;
  const int causalOffset = keys - queries;
  const float scaleLog2 = scale * kLog2e;

  loadTile<E, D, BN>(kTile, k, layout.k.row, firstKey, keys);
  loadTile<E, D, BN>(vTile, v, layout.v.row, firstKey, keys);

  float dkAcc[D / 4], dvAcc[D / 4];
#pragma unroll
  for (int j = 0; j < D / 4; ++j)
    dkAcc[j] = dvAcc[j] = 0.0f;

  // Causal: query t sees key firstKey first when t = firstKey - offset;
  // start at the query tile holding it.
  int begin = 0;
  if (kCausal) {
    begin = firstKey - causalOffset;
    begin = begin < 0 ? 0 : begin - begin % BM;
  }
  for (int firstQuery = begin; firstQuery < queries; firstQuery += BM) {
    __syncthreads();
    loadTile<E, D, BM>(qTile, q, layout.q.row, firstQuery, queries);
    loadTile<E, D, BM>(dOTile, dO, layout.dO.row, firstQuery, queries);
    for (int r = threadIdx.x; r < BM; r += kThreads) {
      const bool inside = firstQuery + r < queries;
      lseTile[r] = inside ? lse[firstQuery + r] * kLog2e : 0.0f;
      deltaTile[r] = inside ? delta[firstQuery + r] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < BM / 4; ++j) {
      const int c = part + 4 * j, t = firstQuery + c;
      float p = 0.0f, dS = 0.0f;
      if (t < queries && s < keys && visible<kCausal>(t, s, causalOffset)) {
        p = exp2f(dotRow<D>(qTile[c], kTile[row]) * scaleLog2 - lseTile[c]);
        const float dP = dotRow<D>(dOTile[c], vTile[row]);
        dS = p * (dP - deltaTile[c]);
      }
      pTile[row][c] = p;
      dSTile[row][c] = dS;
    }
    __syncwarp();
    for (int c = 0; c < BM; ++c) {
      const float p = pTile[row][c], dS = dSTile[row][c];
#pragma unroll
      for (int j = 0; j < D / 4; ++j) {
        dvAcc[j] = fmaf(p, dOTile[c][part + 4 * j], dvAcc[j]);
        dkAcc[j] = fmaf(dS, qTile[c][part + 4 * j], dkAcc[j]);
      }
    }
  }

  if (s < keys) {
#pragma unroll
    for (int j = 0; j < D / 4; ++j) {
      const int column = part + 4 * j;
      dk[s * layout.k.row + column] = E::store(dkAcc[j] * scale);
      dv[s * layout.v.row + column] = E::store(dvAcc[j]);
    }
  }
}

} // namespace flash
} // namespace ampc

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//
//
// AMPC_FLASH_ATTENTION_ENTRY_POINTS(bf16, ampc::flash::Bf16, 64) defines, for
// one element type and head dim (grids: blockIdx.y = bh; blockIdx.x = 32-row
// tile of queries (fwd, dq) or keys (dkdv); delta: ceil(BH T / 4) blocks; all
// with kThreads = 128 threads and no dynamic shared memory):
//   ampc_flash_attention_fwd_bf16_d64[_causal](q, k, v, o, lse, T, S, scale,
//                                              layout)
//   ampc_flash_attention_bwd_delta_bf16_d64(o, dO, delta, BH * T, T, layout)
//   ampc_flash_attention_bwd_dq_bf16_d64[_causal](q, k, v, dO, lse, delta,
//                                                 dq, T, S, scale, layout)
//   ampc_flash_attention_bwd_dkdv_bf16_d64[_causal](q, k, v, dO, lse, delta,
//                                                   dk, dv, T, S, scale, layout)
// layout is an ampc::flash::Layout by value (the host passes a struct of the
// same bytes: int heads, 4 bytes of padding, then the 3 x 8-byte strides of
// q, k, v, o and dO; 128 bytes); each pointer is at its operand's first
// element (element (0, 0, 0, 0) of its [B, H, rows, D] view).
// A translation unit includes this header and expands the macro for the
// combinations it needs; defining AMPC_FLASH_ATTENTION_ALL_ENTRY_POINTS
// before the include expands all twelve (dtype, head dim) combinations.

#define AMPC_FLASH_ATTENTION_CAUSAL_VARIANTS(NAME, ELEMENT, D, SUFFIX, CAUSAL)                     \
  extern "C" __global__ void __launch_bounds__(ampc::flash::kThreads)                              \
      ampc_flash_attention_fwd_##NAME##_d##D##SUFFIX(                                              \
          const ELEMENT::Storage *q, const ELEMENT::Storage *k, const ELEMENT::Storage *v,         \
          ELEMENT::Storage *o, float *lse, int queries, int keys, float scale,                     \
          ampc::flash::Layout layout) {                                                            \
    ampc::flash::flashAttentionForward<ELEMENT, D, CAUSAL>(q, k, v, o, lse, queries, keys, scale,  \
                                                           layout);                                \
  }                                                                                                \
  extern "C" __global__ void __launch_bounds__(ampc::flash::kThreads)                              \
      ampc_flash_attention_bwd_dq_##NAME##_d##D##SUFFIX(                                           \
          const ELEMENT::Storage *q, const ELEMENT::Storage *k, const ELEMENT::Storage *v,         \
          const ELEMENT::Storage *dO, const float *lse, const float *delta, ELEMENT::Storage *dq,  \
          int queries, int keys, float scale, ampc::flash::Layout layout) {                        \
    ampc::flash::flashAttentionBackwardDq<ELEMENT, D, CAUSAL>(q, k, v, dO, lse, delta, dq,         \
                                                              queries, keys, scale, layout);       \
  }                                                                                                \
  extern "C" __global__ void __launch_bounds__(ampc::flash::kThreads)                              \
      ampc_flash_attention_bwd_dkdv_##NAME##_d##D##SUFFIX(                                         \
          const ELEMENT::Storage *q, const ELEMENT::Storage *k, const ELEMENT::Storage *v,         \
          const ELEMENT::Storage *dO, const float *lse, const float *delta, ELEMENT::Storage *dk,  \
          ELEMENT::Storage *dv, int queries, int keys, float scale, ampc::flash::Layout layout) {  \
    ampc::flash::flashAttentionBackwardDkDv<ELEMENT, D, CAUSAL>(q, k, v, dO, lse, delta, dk, dv,   \
                                                                queries, keys, scale, layout);     \
  }

#define AMPC_FLASH_ATTENTION_ENTRY_POINTS(NAME, ELEMENT, D)                                        \
  AMPC_FLASH_ATTENTION_CAUSAL_VARIANTS(NAME, ELEMENT, D, , false)                                  \
  AMPC_FLASH_ATTENTION_CAUSAL_VARIANTS(NAME, ELEMENT, D, _causal, true)                            \
  AMPC_FLASH_ATTENTION_DELTA(NAME, ELEMENT, D)

/// The delta kernel's entry point, shared by the fp32 and tensor-core macros.
#define AMPC_FLASH_ATTENTION_DELTA(NAME, ELEMENT, D)                                               \
  extern "C" __global__ void __launch_bounds__(ampc::flash::kThreads)                              \
      ampc_flash_attention_bwd_delta_##NAME##_d##D(const ELEMENT::Storage *o,                      \
                                                   const ELEMENT::Storage *dO, float *delta,       \
                                                   long long rows, int queries,                    \
                                                   ampc::flash::Layout layout) {                   \
    ampc::flash::flashAttentionBackwardDelta<ELEMENT, D>(o, dO, delta, rows, queries, layout);     \
  }

#if defined(AMPC_FLASH_ATTENTION_ALL_ENTRY_POINTS)
AMPC_FLASH_ATTENTION_ENTRY_POINTS(bf16, ampc::flash::Bf16, 16)
AMPC_FLASH_ATTENTION_ENTRY_POINTS(bf16, ampc::flash::Bf16, 32)
AMPC_FLASH_ATTENTION_ENTRY_POINTS(bf16, ampc::flash::Bf16, 64)
AMPC_FLASH_ATTENTION_ENTRY_POINTS(bf16, ampc::flash::Bf16, 128)
AMPC_FLASH_ATTENTION_ENTRY_POINTS(f16, ampc::flash::F16, 16)
AMPC_FLASH_ATTENTION_ENTRY_POINTS(f16, ampc::flash::F16, 32)
AMPC_FLASH_ATTENTION_ENTRY_POINTS(f16, ampc::flash::F16, 64)
AMPC_FLASH_ATTENTION_ENTRY_POINTS(f16, ampc::flash::F16, 128)
AMPC_FLASH_ATTENTION_ENTRY_POINTS(f32, ampc::flash::F32, 16)
AMPC_FLASH_ATTENTION_ENTRY_POINTS(f32, ampc::flash::F32, 32)
AMPC_FLASH_ATTENTION_ENTRY_POINTS(f32, ampc::flash::F32, 64)
AMPC_FLASH_ATTENTION_ENTRY_POINTS(f32, ampc::flash::F32, 128)
#endif

#endif // AMPC_RUNTIME_CUDA_DEVICE_FLASHATTENTION_CUH
