//===- MatMulBench.cpp - Throughput of the CPU backend's matmul -----------===//
//
// Usage: ampc_matmul_bench [M N K [repeats]]; defaults to the GPT-10M MLP
// shape 16384 x 384 @ 384 x 1536. Prints GFLOP/s for fp32 (with each SIMD
// tile this CPU runs) and fp64.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace ampc::cpu;

template <typename T, typename Gemm>
static void measure(const char *name, int64_t m, int64_t n, int64_t k, int repeats, Gemm gemm) {
  std::vector<T> a(m * k), b(k * n), c(m * n);
  for (size_t i = 0; i < a.size(); ++i)
    a[i] = static_cast<T>((i * 7 % 13) - 6) / 8;
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = static_cast<T>((i * 5 % 11) - 5) / 8;
  gemm(m, n, k, {a.data(), k, 1}, {b.data(), n, 1}, c.data());
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    auto start = std::chrono::steady_clock::now();
    gemm(m, n, k, {a.data(), k, 1}, {b.data(), n, 1}, c.data());
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::min(best, seconds);
  }
  std::printf("%s %lld x %lld @ %lld x %lld: %.3f s, %.1f GFLOP/s (%d threads)\n", name,
              (long long)m, (long long)k, (long long)k, (long long)n, best,
              2.0 * m * n * k / best * 1e-9, threadCount());
}

int main(int argc, char **argv) {
  int64_t m = 16384, n = 1536, k = 384;
  int repeats = 3;
  if (argc >= 4) {
    m = std::atoll(argv[1]);
    n = std::atoll(argv[2]);
    k = std::atoll(argv[3]);
  }
  if (argc >= 5)
    repeats = std::atoi(argv[4]);
  for (kernels::SimdIsa isa :
       {kernels::SimdIsa::Sse2, kernels::SimdIsa::Avx2, kernels::SimdIsa::Avx512}) {
    if (!kernels::simdIsaSupported(isa))
      continue;
    const std::string name = std::string("f32 ") + kernels::simdIsaName(isa) +
                             (isa == kernels::simdIsa() ? " (used)" : "");
    measure<float>(name.c_str(), m, n, k, repeats,
                   [isa](int64_t m, int64_t n, int64_t k, kernels::MatrixView<float> a,
                         kernels::MatrixView<float> b,
                         float *c) { kernels::gemmWith(isa, m, n, k, a, b, c); });
  }
  measure<double>("f64", m, n, k, repeats, kernels::gemm<double>);
  return 0;
}
