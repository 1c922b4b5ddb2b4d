//===- MatMulKernel.cpp - Cache-blocked, threaded matrix multiplication ---===//
//
// GotoBLAS-style blocking in portable C++: B is packed into panels of
// kPanelCols columns (kDepth rows deep), A into panels of kPanelRows rows,
// and a register-tiled micro-kernel multiplies one A panel by one B panel.
// The micro-kernel's innermost loop runs over a fixed number of contiguous
// columns, which the compiler turns into SIMD code for the baseline x86-64
// (SSE2) without any intrinsics or -march flags. On x86-64 CPUs with AVX2 or
// AVX-512F, wider tiles in GCC's vector extension, compiled for those
// instruction sets by target attributes, are chosen at run time (simdIsa()).
//
// Each C element is accumulated in a register starting from its current value
// (0 for the first depth block), adding a[i][k] * b[k][j] for increasing k, so
// the result is bit-identical to a naive triple loop in type T regardless of
// block sizes or threads. Threads split C into disjoint row blocks (or batch
// entries); no sum is split across threads.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/plan/Plan.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace ampc::cpu::kernels {
namespace {

/// Register tile and cache block sizes. The tile is sized so its
/// accumulators plus one B row fit in the SIMD registers of the instruction
/// set it is compiled for: 16 of x86-64's baseline SSE2 and of AVX2, 32 of
/// AVX-512. Every variant adds the same products in the same order, so they
/// give the same bits.
struct SseFloat {
  using T = float;
  static constexpr int kPanelRows = 4;       // MR
  static constexpr int kPanelCols = 8;       // NR: two 4-float SSE registers
  static constexpr int64_t kDepth = 256;     // KC: B panel of 8 KiB stays in L1
  static constexpr int64_t kRowBlock = 96;   // MC: A block of 96 KiB in L2
  static constexpr int64_t kColBlock = 2048; // NC: B block of 2 MiB in L2/L3
};
struct Avx2Float {
  using T = float;
  static constexpr int kPanelRows = 6;  // 12 accumulators of 8 floats
  static constexpr int kPanelCols = 16; // two AVX registers
  static constexpr int64_t kDepth = 256;
  static constexpr int64_t kRowBlock = 96;
  static constexpr int64_t kColBlock = 2048;
};
struct Avx512Float {
  using T = float;
  static constexpr int kPanelRows = 12; // 24 accumulators of 16 floats
  static constexpr int kPanelCols = 32; // two AVX-512 registers
  static constexpr int64_t kDepth = 256;
  static constexpr int64_t kRowBlock = 96;
  static constexpr int64_t kColBlock = 2048;
};
struct SseDouble {
  using T = double;
  static constexpr int kPanelRows = 4;
  static constexpr int kPanelCols = 4;
  static constexpr int64_t kDepth = 256;
  static constexpr int64_t kRowBlock = 48;
  static constexpr int64_t kColBlock = 1024;
};

/// C tile [kPanelRows x kPanelCols] (leading dim ldc) += packed A panel
/// [depth x kPanelRows] times packed B panel [depth x kPanelCols], starting
/// from zero when \p first. All bounds are compile-time constants so the
/// accumulators live in registers. Always inlined, so that it is compiled for
/// the instruction set of the function that calls it.
template <typename B>
[[gnu::always_inline]] inline void
microKernel(int64_t depth, const typename B::T *__restrict aPanel,
            const typename B::T *__restrict bPanel, typename B::T *__restrict c, int64_t ldc,
            bool first) {
  using T = typename B::T;
  constexpr int MR = B::kPanelRows, NR = B::kPanelCols;
  T acc[MR][NR];
  // Full unrolling of the tile loops is what lets the compiler keep `acc` in
  // registers and vectorise the j loop; without it GCC vectorises across i.
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 32
    for (int j = 0; j < NR; ++j)
      acc[i][j] = first ? T(0) : c[i * ldc + j];
  for (int64_t p = 0; p < depth; ++p) {
    const T *bRow = bPanel + p * NR;
    const T *aColumn = aPanel + p * MR;
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
      const T aValue = aColumn[i];
#pragma GCC unroll 32
      for (int j = 0; j < NR; ++j)
        acc[i][j] += aValue * bRow[j];
    }
  }
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 32
    for (int j = 0; j < NR; ++j)
      c[i * ldc + j] = acc[i][j];
}

/// The micro-kernel in explicit SIMD vectors of V (GCC's vector extension)
/// for AVX2 and AVX-512, where GCC's own vectorisation of the scalar loops
/// shuffles instead of broadcasting. The same products are added in the
/// same order as microKernel's, lane by lane.
template <typename B, typename V>
[[gnu::always_inline]] inline void vectorKernel(int64_t depth, const float *__restrict aPanel,
                                                const float *__restrict bPanel, float *__restrict c,
                                                int64_t ldc, bool first) {
  constexpr int MR = B::kPanelRows, W = sizeof(V) / sizeof(float);
  constexpr int NV = B::kPanelCols / W;
  static_assert(NV * W == B::kPanelCols, "a tile row is whole vectors");
  V acc[MR][NV];
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      if (first)
        acc[i][v] = V{};
      else
        std::memcpy(&acc[i][v], c + i * ldc + v * W, sizeof(V));
    }
  for (int64_t p = 0; p < depth; ++p) {
    V bRow[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      std::memcpy(&bRow[v], bPanel + p * B::kPanelCols + v * W, sizeof(V));
    const float *aColumn = aPanel + p * MR;
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
      // A broadcast: x - 0 is x for every x, -0 included, and folds away
      // (x + 0 would not: -0 + 0 is +0).
      const V aValue = aColumn[i] - V{};
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v)
        acc[i][v] += aValue * bRow[v];
    }
  }
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      std::memcpy(c + i * ldc + v * W, &acc[i][v], sizeof(V));
}

typedef float Floats8 __attribute__((vector_size(32)));
typedef float Floats16 __attribute__((vector_size(64)));

/// The micro-kernel per instruction set: a function of its own, so that the
/// target attribute compiles the inlined tile loops for it.
template <typename B> struct Tile {
  static void run(int64_t depth, const typename B::T *aPanel, const typename B::T *bPanel,
                  typename B::T *c, int64_t ldc, bool first) {
    microKernel<B>(depth, aPanel, bPanel, c, ldc, first);
  }
};
#if AMPC_CPU_X86
template <> struct Tile<Avx2Float> {
  [[gnu::target("avx2")]] static void run(int64_t depth, const float *aPanel, const float *bPanel,
                                          float *c, int64_t ldc, bool first) {
    vectorKernel<Avx2Float, Floats8>(depth, aPanel, bPanel, c, ldc, first);
  }
};
template <> struct Tile<Avx512Float> {
  [[gnu::target("avx512f")]] static void
  run(int64_t depth, const float *aPanel, const float *bPanel, float *c, int64_t ldc, bool first) {
    vectorKernel<Avx512Float, Floats16>(depth, aPanel, bPanel, c, ldc, first);
  }
};
#endif

/// The micro-kernel on a tile cut off by the edge of C: the valid
/// [rows x cols] part goes through a full-size scratch tile.
template <typename B>
void edgeKernel(int64_t depth, const typename B::T *aPanel, const typename B::T *bPanel,
                typename B::T *c, int64_t ldc, bool first, int64_t rows, int64_t cols) {
  using T = typename B::T;
  constexpr int MR = B::kPanelRows, NR = B::kPanelCols;
  T tile[MR * NR] = {};
  if (!first)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        tile[i * NR + j] = c[i * ldc + j];
  Tile<B>::run(depth, aPanel, bPanel, tile, NR, first);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      c[i * ldc + j] = tile[i * NR + j];
}

/// Packs B[k0 : k0+depth, j0 : j0+cols] into column panels, zero-padding the
/// last panel: panel q holds rows p as kPanelCols consecutive values.
template <typename B, typename T = typename B::T>
void packB(MatrixView<T> b, int64_t k0, int64_t depth, int64_t j0, int64_t cols, T *packed) {
  constexpr int NR = B::kPanelCols;
  const int64_t panels = (cols + NR - 1) / NR;
  parallelFor(panels, 16, [&](int64_t begin, int64_t end) {
    for (int64_t q = begin; q < end; ++q) {
      T *out = packed + q * depth * NR;
      const int64_t width = std::min<int64_t>(NR, cols - q * NR);
      for (int64_t p = 0; p < depth; ++p) {
        const T *row = b.data + (k0 + p) * b.rowStride + (j0 + q * NR) * b.colStride;
        if (b.colStride == 1 && width == NR) {
          std::memcpy(out + p * NR, row, NR * sizeof(T));
        } else {
          for (int64_t j = 0; j < width; ++j)
            out[p * NR + j] = row[j * b.colStride];
          for (int64_t j = width; j < NR; ++j)
            out[p * NR + j] = T(0);
        }
      }
    }
  });
}

/// Packs A[i0 : i0+rows, k0 : k0+depth] into row panels, zero-padding the
/// last panel: panel q holds columns p as kPanelRows consecutive values.
template <typename B, typename T = typename B::T>
void packA(MatrixView<T> a, int64_t i0, int64_t rows, int64_t k0, int64_t depth, T *packed) {
  constexpr int MR = B::kPanelRows;
  for (int64_t q = 0; q * MR < rows; ++q) {
    T *out = packed + q * depth * MR;
    const int64_t height = std::min<int64_t>(MR, rows - q * MR);
    for (int64_t i = 0; i < height; ++i) {
      const T *row = a.data + (i0 + q * MR + i) * a.rowStride + k0 * a.colStride;
      for (int64_t p = 0; p < depth; ++p)
        out[p * MR + i] = row[p * a.colStride];
    }
    for (int64_t i = height; i < MR; ++i)
      for (int64_t p = 0; p < depth; ++p)
        out[p * MR + i] = T(0);
  }
}

/// Scratch space that lives as long as its thread, so packing buffers are
/// not reallocated per call.
template <typename T> T *threadScratch(size_t slot, size_t size) {
  thread_local std::vector<T> buffers[2];
  std::vector<T> &buffer = buffers[slot];
  if (buffer.size() < size)
    buffer.resize(size);
  return buffer.data();
}

template <typename B, typename T = typename B::T>
void blockedGemm(int64_t m, int64_t n, int64_t k, MatrixView<T> a, MatrixView<T> b, T *c) {
  constexpr int MR = B::kPanelRows, NR = B::kPanelCols;
  // packA fills whole row panels of a kRowBlock-row scratch.
  static_assert(B::kRowBlock % MR == 0 && B::kColBlock % NR == 0, "blocks are whole panels");
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    std::fill(c, c + m * n, T(0));
    return;
  }
  // The packed B block is shared by every thread working on row blocks.
  std::vector<T> packedB;
  for (int64_t j0 = 0; j0 < n; j0 += B::kColBlock) {
    const int64_t cols = std::min(B::kColBlock, n - j0);
    const int64_t colPanels = (cols + NR - 1) / NR;
    for (int64_t k0 = 0; k0 < k; k0 += B::kDepth) {
      const int64_t depth = std::min(B::kDepth, k - k0);
      const bool first = k0 == 0;
      packedB.resize(colPanels * NR * depth);
      packB<B>(b, k0, depth, j0, cols, packedB.data());
      const int64_t rowBlocks = (m + B::kRowBlock - 1) / B::kRowBlock;
      parallelFor(rowBlocks, 1, [&](int64_t begin, int64_t end) {
        T *packedA = threadScratch<T>(0, B::kRowBlock * depth);
        for (int64_t block = begin; block < end; ++block) {
          const int64_t i0 = block * B::kRowBlock;
          const int64_t rows = std::min(B::kRowBlock, m - i0);
          packA<B>(a, i0, rows, k0, depth, packedA);
          for (int64_t q = 0; q < colPanels; ++q) {
            const T *bPanel = packedB.data() + q * depth * NR;
            const int64_t jc = j0 + q * NR;
            const int64_t width = std::min<int64_t>(NR, n - jc);
            for (int64_t r = 0; r * MR < rows; ++r) {
              const T *aPanel = packedA + r * depth * MR;
              T *tile = c + (i0 + r * MR) * n + jc;
              const int64_t height = std::min<int64_t>(MR, rows - r * MR);
              if (height == MR && width == NR)
                Tile<B>::run(depth, aPanel, bPanel, tile, n, first);
              else
                edgeKernel<B>(depth, aPanel, bPanel, tile, n, first, height, width);
            }
          }
        }
      });
    }
  }
}

} // namespace

const char *simdIsaName(SimdIsa isa) {
  switch (isa) {
  case SimdIsa::Sse2:
    return "sse2";
  case SimdIsa::Avx2:
    return "avx2";
  case SimdIsa::Avx512:
    return "avx512f";
  }
  return "?";
}

bool simdIsaSupported(SimdIsa isa) {
#if AMPC_CPU_X86
  __builtin_cpu_init();
  switch (isa) {
  case SimdIsa::Sse2:
    return true;
  case SimdIsa::Avx2:
    return __builtin_cpu_supports("avx2");
  case SimdIsa::Avx512:
    return __builtin_cpu_supports("avx512f");
  }
  return false;
#else
  // Elsewhere the generic tile (named Sse2) is the one.
  return isa == SimdIsa::Sse2;
#endif
}

namespace {
/// The widest instruction set this CPU runs, or AMPC_CPU_ISA's if it is
/// one of those and runs here.
SimdIsa initialSimdIsa() {
  SimdIsa widest = simdIsaSupported(SimdIsa::Avx512) ? SimdIsa::Avx512
                   : simdIsaSupported(SimdIsa::Avx2) ? SimdIsa::Avx2
                                                     : SimdIsa::Sse2;
  const char *chosen = std::getenv("AMPC_CPU_ISA");
  if (!chosen || !*chosen)
    return widest;
  for (SimdIsa isa : {SimdIsa::Sse2, SimdIsa::Avx2, SimdIsa::Avx512})
    if (std::strcmp(chosen, simdIsaName(isa)) == 0 && simdIsaSupported(isa))
      return isa;
  std::fprintf(stderr,
               "warning: AMPC_CPU_ISA=%s is not sse2, avx2 or avx512f, or this CPU does not "
               "run it; using %s\n",
               chosen, simdIsaName(widest));
  return widest;
}
/// Initialised on first use, so no other file's static initialisation
/// can see it unset.
std::atomic<SimdIsa> &activeIsa() {
  static std::atomic<SimdIsa> isa{initialSimdIsa()};
  return isa;
}
} // namespace

SimdIsa simdIsa() { return activeIsa().load(std::memory_order_relaxed); }

void setSimdIsa(SimdIsa isa) {
  if (!simdIsaSupported(isa))
    throw std::invalid_argument(std::string("this CPU does not run ") + simdIsaName(isa));
  activeIsa().store(isa, std::memory_order_relaxed);
}

void gemmWith(SimdIsa isa, int64_t m, int64_t n, int64_t k, MatrixView<float> a,
              MatrixView<float> b, float *c) {
  switch (isa) {
  case SimdIsa::Avx512:
    return blockedGemm<Avx512Float>(m, n, k, a, b, c);
  case SimdIsa::Avx2:
    return blockedGemm<Avx2Float>(m, n, k, a, b, c);
  case SimdIsa::Sse2:
    return blockedGemm<SseFloat>(m, n, k, a, b, c);
  }
}

template <>
void gemm<float>(int64_t m, int64_t n, int64_t k, MatrixView<float> a, MatrixView<float> b,
                 float *c) {
  gemmWith(simdIsa(), m, n, k, a, b, c);
}

template <>
void gemm<double>(int64_t m, int64_t n, int64_t k, MatrixView<double> a, MatrixView<double> b,
                  double *c) {
  blockedGemm<SseDouble>(m, n, k, a, b, c);
}

template <typename T>
void matMul(const T *a, const Shape &aShape, bool transposeA, const T *b, const Shape &bShape,
            bool transposeB, T *out) {
  const plan::MatMulDims dims = *plan::matMulDims(aShape, bShape, transposeA, transposeB);
  const int64_t m = dims.m, n = dims.n, k = dims.k;
  // Element (i, p) of op(a) and (p, j) of op(b) within one batch entry.
  const int64_t aRows = aShape[aShape.size() - 2], aCols = aShape.back();
  const int64_t bCols = bShape.back();
  const MatrixView<T> aView{a, transposeA ? 1 : aCols, transposeA ? aCols : 1};
  const MatrixView<T> bView{b, transposeB ? 1 : bCols, transposeB ? bCols : 1};
  const int64_t aMatrix = aRows * aCols, bMatrix = k * n;

  const int64_t batchCount = plan::numElements(dims.batch);
  const bool bShared = plan::numElements(dims.batchB) == 1;
  // A stack of activations times one weight matrix: fold the batch into M
  // for one large, efficient multiplication (row-major A stacks cleanly).
  if (bShared && !transposeA) {
    gemm(batchCount * m, n, k, MatrixView<T>{a, aCols, 1}, bView, out);
    return;
  }
  // Offsets of each batch entry in a and b under broadcasting.
  const Shape aStrides = plan::broadcastStrides(dims.batchA, dims.batch);
  const Shape bStrides = plan::broadcastStrides(dims.batchB, dims.batch);
  const Shape outStrides = plan::rowMajorStrides(dims.batch);
  auto runEntry = [&](int64_t entry) {
    int64_t aOffset = 0, bOffset = 0, rest = entry;
    for (size_t d = 0; d < dims.batch.size(); ++d) {
      const int64_t index = rest / outStrides[d];
      rest %= outStrides[d];
      aOffset += index * aStrides[d];
      bOffset += index * bStrides[d];
    }
    MatrixView<T> aEntry = aView, bEntry = bView;
    aEntry.data += aOffset * aMatrix;
    bEntry.data += bOffset * bMatrix;
    gemm(m, n, k, aEntry, bEntry, out + entry * m * n);
  };
  // Many small products (attention heads): one per thread at a time. Few
  // large ones: one after another, each split across threads by gemm.
  if (batchCount >= 2 * threadCount() || m * n * k < (int64_t(1) << 18)) {
    parallelFor(batchCount, 1, [&](int64_t begin, int64_t end) {
      for (int64_t entry = begin; entry < end; ++entry)
        runEntry(entry);
    });
  } else {
    for (int64_t entry = 0; entry < batchCount; ++entry)
      runEntry(entry);
  }
}

template void matMul<float>(const float *, const Shape &, bool, const float *, const Shape &, bool,
                            float *);
template void matMul<double>(const double *, const Shape &, bool, const double *, const Shape &,
                             bool, double *);

} // namespace ampc::cpu::kernels
