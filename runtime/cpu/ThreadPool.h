//===- ThreadPool.h - A small fork-join pool for the CPU backend ----------===//
//
// The CPU kernels parallelise over independent output rows or tiles only, so
// every result is bit-identical whatever the thread count: no reduction is
// ever split across threads.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CPU_THREADPOOL_H
#define AMPC_RUNTIME_CPU_THREADPOOL_H

#include <cstdint>
#include <functional>

namespace ampc::cpu {

/// Number of threads parallelFor uses: the AMPC_CPU_THREADS environment
/// variable if set to a positive number, else std::thread's
/// hardware_concurrency (at least 1).
int threadCount();

/// Calls \p body(begin, end) on disjoint chunks covering [0, \p count), in
/// parallel, and returns when all are done. A chunk holds at least \p grain
/// items, so small loops run inline. Chunks are handed out dynamically, which
/// balances uneven rows (causal attention). A call from inside a running
/// body, or while another thread owns the pool, runs inline. The first
/// exception thrown by a chunk is rethrown here after the others finish.
void parallelFor(int64_t count, int64_t grain, const std::function<void(int64_t, int64_t)> &body);

} // namespace ampc::cpu

#endif // AMPC_RUNTIME_CPU_THREADPOOL_H
