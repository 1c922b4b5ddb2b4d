//===- ColumnSum.cuh - Two-stage column sums over [rows, L] ---------------===//
//
// The fixed skeleton of the column sums generated kernels compute (bias gradients, a norm
// gradient's dgamma and dbeta, sums over leading axes): out[j] = sum over the rows of x[row, j],
// in f32, in two kernels. One block per 32 columns (the whole sum in one block) would leave most
// of the GPU idle when L is a few hundred while each thread looped over thousands of rows;
// instead the first stage splits the rows into chunks (the grid's y dimension) and writes each
// chunk's partial sums to scratch, and the second adds the chunks in order, so the result does
// not depend on the grid. The generator (compiler/cuda/CudaCodegenRows.cpp, columnSumKernels)
// passes what it generates as functors: the first stage's addition of a row (the operands'
// loads and the group's fused producers, evaluated element by element), the second's store of a
// column (the group's fused consumers and accumulate_grad additions); the counts that size
// registers, shared memory and loops are template arguments. NVRTC-compilable.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CUDA_DEVICE_COLUMNSUM_CUH
#define AMPC_RUNTIME_CUDA_DEVICE_COLUMNSUM_CUH

#include "runtime/cuda/device/KernelSupport.h"

namespace ampc {
namespace device {

/// Stage 1, one column a thread: block (x, c) of (32 columns, 8 row slices) threads sums columns
/// [32 x, 32 x + 32) over chunk c of the rows (chunks: gridDim.y, compiled into the launch);
/// each slice takes every 8th row of the chunk, the slices meet in shared memory, and the f32
/// partial of sum s goes to columnPartials[s][c][column] (Sums: 1 or 2 sums at once).
/// `addElement(row, i, sum0, sum1)` adds element i = row * L + column to the thread's sums.
/// Memory: the operands read once, coalesced along the columns, one element an access.
template <int Sums, typename AddElement>
__device__ __forceinline__ void columnSumPartial(long long rows, long long L, float *columnPartials,
                                                 AddElement addElement) {
  __shared__ float partial[Sums][8][33];
  const long long column = static_cast<long long>(blockIdx.x) * 32 + threadIdx.x;
  // This block's chunk of rows: [first, last).
  const long long chunkRows = (rows + gridDim.y - 1) / gridDim.y;
  const long long first = static_cast<long long>(blockIdx.y) * chunkRows;
  const long long last = min(rows, first + chunkRows);
  float sum0 = 0.0f, sum1 = 0.0f;
  if (column < L) {
    for (long long row = first + threadIdx.y; row < last; row += blockDim.y)
      addElement(row, row * L + column, sum0, sum1);
  }
  partial[0][threadIdx.y][threadIdx.x] = sum0;
  if (Sums == 2)
    partial[Sums - 1][threadIdx.y][threadIdx.x] = sum1;
  __syncthreads();
  if (threadIdx.y == 0 && column < L) {
    for (int s = 0; s < Sums; ++s) {
      float total = 0.0f;
      for (int y = 0; y < 8; ++y)
        total += partial[s][y][threadIdx.x];
      columnPartials[(static_cast<long long>(s) * gridDim.y + blockIdx.y) * L + column] = total;
    }
  }
}

/// Stage 1 in packs: a thread takes the pack p of Width consecutive columns (16 bytes of its
/// narrowest operand: 8 bf16/f16 columns, 4 f32; Packs = L / Width packs a row, compiled in), so
/// a block covers 32 Width columns and a warp reads 512 contiguous bytes of a row per access,
/// four rows in flight. `addRow(row, p, sum0, sum1)` loads the row's pack p of each operand and
/// adds its Width elements to the thread's sums (float[Width] each). The 8 slices meet in shared
/// memory (a float of padding a slice), and the block's 256 threads each add one column's slices
/// in slice order into columnPartials[s][c][column].
/// Memory: the operands read once, coalesced, in 16-byte packs.
template <int Sums, int Width, long long Packs, typename AddRow>
__device__ __forceinline__ void columnSumPartialPacked(long long rows, long long L,
                                                       float *columnPartials, AddRow addRow) {
  constexpr int kColumns = 32 * Width;
  // Each slice's sums of the block's columns, padded a float per slice.
  __shared__ float partial[Sums][8][kColumns + 1];
  const long long p = static_cast<long long>(blockIdx.x) * 32 + threadIdx.x;
  // This block's chunk of rows: [first, last).
  const long long chunkRows = (rows + gridDim.y - 1) / gridDim.y;
  const long long first = static_cast<long long>(blockIdx.y) * chunkRows;
  const long long last = min(rows, first + chunkRows);
  float sum0[Width] = {}, sum1[Width] = {};
  if (p < Packs) {
#pragma unroll 4
    for (long long row = first + threadIdx.y; row < last; row += 8)
      addRow(row, p, sum0, sum1);
  }
#pragma unroll
  for (int k = 0; k < Width; ++k) {
    partial[0][threadIdx.y][threadIdx.x * Width + k] = sum0[k];
    if (Sums == 2)
      partial[Sums - 1][threadIdx.y][threadIdx.x * Width + k] = sum1[k];
  }
  __syncthreads();
  for (int c = threadIdx.y * 32 + threadIdx.x; c < kColumns; c += 256) {
    const long long column = static_cast<long long>(blockIdx.x) * kColumns + c;
    if (column < L)
      for (int s = 0; s < Sums; ++s) {
        float total = 0.0f;
        for (int y = 0; y < 8; ++y)
          total += partial[s][y][c];
        columnPartials[(static_cast<long long>(s) * gridDim.y + blockIdx.y) * L + column] = total;
      }
  }
}

/// Stage 2: one thread a column (grid-stride) adds the Chunks partials of each sum in chunk
/// order (unrolled so that many of the independent loads are in flight) and passes the totals
/// to `store(column, total0, total1)`. Memory: the partials read once.
template <int Sums, long long Chunks, typename Store>
__device__ __forceinline__ void columnSumTotals(const float *columnPartials, long long L,
                                                Store store) {
  for (long long column = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; column < L;
       column += static_cast<long long>(gridDim.x) * blockDim.x) {
    float total0 = 0.0f, total1 = 0.0f;
#pragma unroll 16
    for (long long c = 0; c < Chunks; ++c) {
      total0 += columnPartials[c * L + column];
      if (Sums == 2)
        total1 += columnPartials[(Chunks + c) * L + column];
    }
    store(column, total0, total1);
  }
}

} // namespace device
} // namespace ampc

#endif // AMPC_RUNTIME_CUDA_DEVICE_COLUMNSUM_CUH
