//===- ThreadPool.cpp - A small fork-join pool for the CPU backend --------===//

#include "runtime/cpu/ThreadPool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace ampc::cpu {
namespace {

/// True on a thread that is executing a parallelFor chunk; nested calls then
/// run inline instead of waiting on the pool they are part of.
thread_local bool insideParallelRegion = false;

class ThreadPool {
public:
  explicit ThreadPool(int threads) {
    for (int i = 1; i < threads; ++i)
      workers.emplace_back([this] { workerLoop(); });
  }

  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    for (std::thread &worker : workers)
      worker.join();
  }

  int size() const { return static_cast<int>(workers.size()) + 1; }

  /// Runs one job on all threads. Returns false (without running anything)
  /// if another thread is using the pool.
  bool tryRun(int64_t count, int64_t chunk, const std::function<void(int64_t, int64_t)> &body) {
    std::unique_lock<std::mutex> job(jobMutex, std::try_to_lock);
    if (!job.owns_lock())
      return false;
    {
      std::lock_guard<std::mutex> lock(mutex);
      jobBody = &body;
      jobCount = count;
      jobChunk = chunk;
      nextItem.store(0);
      error = nullptr;
      pendingWorkers = static_cast<int>(workers.size());
      ++generation;
    }
    wake.notify_all();
    runChunks();
    std::unique_lock<std::mutex> lock(mutex);
    finished.wait(lock, [this] { return pendingWorkers == 0; });
    jobBody = nullptr;
    if (error)
      std::rethrow_exception(error);
    return true;
  }

private:
  /// Takes chunks until none are left; records the first exception.
  void runChunks() {
    insideParallelRegion = true;
    for (;;) {
      int64_t begin = nextItem.fetch_add(jobChunk);
      if (begin >= jobCount)
        break;
      try {
        (*jobBody)(begin, std::min(begin + jobChunk, jobCount));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error)
          error = std::current_exception();
      }
    }
    insideParallelRegion = false;
  }

  void workerLoop() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex);
        wake.wait(lock, [&] { return stopping || generation != seen; });
        if (stopping)
          return;
        seen = generation;
      }
      runChunks();
      std::lock_guard<std::mutex> lock(mutex);
      if (--pendingWorkers == 0)
        finished.notify_one();
    }
  }

  std::vector<std::thread> workers;
  std::mutex jobMutex; // one job at a time
  std::mutex mutex;    // guards the fields below
  std::condition_variable wake, finished;
  bool stopping = false;
  uint64_t generation = 0;
  int pendingWorkers = 0;
  const std::function<void(int64_t, int64_t)> *jobBody = nullptr;
  int64_t jobCount = 0, jobChunk = 1;
  std::atomic<int64_t> nextItem{0};
  std::exception_ptr error;
};

ThreadPool &pool() {
  static ThreadPool instance(threadCount());
  return instance;
}

} // namespace

int threadCount() {
  static const int count = [] {
    if (const char *text = std::getenv("AMPC_CPU_THREADS")) {
      int requested = std::atoi(text);
      if (requested > 0)
        return requested;
    }
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }();
  return count;
}

void parallelFor(int64_t count, int64_t grain, const std::function<void(int64_t, int64_t)> &body) {
  if (count <= 0)
    return;
  grain = std::max<int64_t>(grain, 1);
  const int threads = threadCount();
  if (threads == 1 || count <= grain || insideParallelRegion) {
    body(0, count);
    return;
  }
  // About four chunks per thread balances uneven work without making the
  // shared counter a bottleneck.
  const int64_t chunk = std::max(grain, (count + 4 * threads - 1) / (4 * threads));
  if (!pool().tryRun(count, chunk, body))
    body(0, count);
}

} // namespace ampc::cpu
