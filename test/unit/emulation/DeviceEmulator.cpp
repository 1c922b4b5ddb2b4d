//===- DeviceEmulator.cpp - CUDA threads as fibers, warp collectives --------===//
//
// One block at a time: each of its threads is a fiber with its own stack, resumed in turn by a
// scheduler on the calling thread. A fiber's stack is set up by makecontext and entered once
// with swapcontext; every later switch is _setjmp/_longjmp, which (unlike swapcontext) saves no
// signal mask and so makes no system call: a block of 1024 threads passing a few hundred
// barriers is that many million switches. A fiber runs until it waits at a barrier (block
// or warp) or returns. Barriers count live threads, so threads that returned early count as
// arrived (as on the GPU). If a full round of resumptions makes no progress (no arrival, no
// thread finishing) every live thread waits for a barrier that cannot complete: the launch
// throws instead of hanging.
//
//===----------------------------------------------------------------------===//

// _longjmp between fibers jumps to another stack, which glibc's fortified longjmp refuses.
#undef _FORTIFY_SOURCE
#include "DeviceEmulator.h"

#include <setjmp.h>
#include <ucontext.h>

#include <array>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace ampc::emu {
namespace {

constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kExchangeBytes = 64;

struct Barrier {
  unsigned live = 0;
  unsigned arrived = 0;
  uint64_t generation = 0;
};

struct Fiber {
  ucontext_t context; ///< the first entry only
  jmp_buf resume;     ///< where the fiber continues
  bool started = false;
  std::unique_ptr<char[]> stack;
  Dim3 thread;
  unsigned linear = 0;
  bool done = false;
  unsigned votes = 0; ///< __syncthreads_or calls made
};

struct BlockRun {
  Dim3 grid, block, blockIndex;
  const std::function<void()> *kernel = nullptr;
  ucontext_t scheduler;  ///< only for the swapcontext that first enters a fiber
  jmp_buf schedulerJump; ///< where a fiber that yields or ends returns to
  std::vector<Fiber> fibers;
  Fiber *current = nullptr;
  Barrier blockBarrier;
  std::vector<Barrier> warpBarriers;
  std::vector<std::array<unsigned char, kExchangeBytes>> exchange;
  /// __syncthreads_or's block-wide results, alternating between consecutive calls.
  bool vote[2] = {false, false};
  uint64_t progress = 0;
};

BlockRun *active = nullptr;

BlockRun &run() {
  if (!active)
    throw std::logic_error("device code called outside ampc::emu::launch");
  return *active;
}

void yieldToScheduler() {
  BlockRun &block = run();
  if (_setjmp(block.current->resume) == 0)
    _longjmp(block.schedulerJump, 1);
}

void arrive(Barrier &barrier) {
  BlockRun &block = run();
  ++block.progress;
  const uint64_t generation = barrier.generation;
  if (++barrier.arrived == barrier.live) {
    barrier.arrived = 0;
    ++barrier.generation;
    return;
  }
  while (barrier.generation == generation)
    yieldToScheduler();
}

/// A thread left: the barriers it would have joined need one arrival less.
void leave(Barrier &barrier) {
  --barrier.live;
  if (barrier.arrived > 0 && barrier.arrived == barrier.live) {
    barrier.arrived = 0;
    ++barrier.generation;
  }
}

Barrier &warpBarrier() {
  BlockRun &block = run();
  return block.warpBarriers[block.current->linear / 32];
}

/// A fiber runs the kernel once per block of the launch: after each run it parks here until
/// the scheduler starts the next block (so stacks and contexts are made once per launch).
void fiberEntry() {
  for (;;) {
    BlockRun &block = run();
    (*block.kernel)();
    Fiber &self = *block.current;
    self.done = true;
    ++block.progress;
    leave(block.blockBarrier);
    leave(block.warpBarriers[self.linear / 32]);
    if (_setjmp(self.resume) == 0)
      _longjmp(block.schedulerJump, 2);
  }
}

std::string describe(const Dim3 &index) {
  return "(" + std::to_string(index.x) + ", " + std::to_string(index.y) + ", " +
         std::to_string(index.z) + ")";
}

} // namespace

void launch(Dim3 grid, Dim3 block, const std::function<void()> &kernel) {
  if (active)
    throw std::logic_error("ampc::emu::launch called from device code");
  const unsigned threads = block.x * block.y * block.z;
  if (threads == 0 || threads > 1024)
    throw std::invalid_argument("a block has 1 to 1024 threads");
  // The fibers, made once; each block resets their state and the barriers.
  BlockRun state;
  state.grid = grid;
  state.block = block;
  state.kernel = &kernel;
  state.fibers.resize(threads);
  state.warpBarriers.resize((threads + 31) / 32);
  state.exchange.resize(threads);
  for (unsigned t = 0; t < threads; ++t) {
    Fiber &fiber = state.fibers[t];
    fiber.linear = t;
    fiber.thread = Dim3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
    fiber.stack = std::make_unique<char[]>(kStackBytes);
    getcontext(&fiber.context);
    fiber.context.uc_stack.ss_sp = fiber.stack.get();
    fiber.context.uc_stack.ss_size = kStackBytes;
    fiber.context.uc_link = nullptr; // fiberEntry never returns
    makecontext(&fiber.context, fiberEntry, 0);
  }
  active = &state;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        state.blockIndex = Dim3{bx, by, bz};
        state.blockBarrier = Barrier{threads, 0, 0};
        for (Barrier &warp : state.warpBarriers)
          warp = Barrier{};
        for (unsigned t = 0; t < threads; ++t)
          ++state.warpBarriers[t / 32].live;
        for (Fiber &fiber : state.fibers)
          fiber.done = false;
        unsigned remaining = threads;
        while (remaining > 0) {
          const uint64_t before = state.progress;
          for (Fiber &fiber : state.fibers) {
            if (fiber.done)
              continue;
            state.current = &fiber;
            if (_setjmp(state.schedulerJump) == 0) {
              if (!fiber.started) {
                fiber.started = true;
                swapcontext(&state.scheduler, &fiber.context);
              } else {
                _longjmp(fiber.resume, 1);
              }
            }
            if (fiber.done)
              --remaining;
          }
          if (remaining > 0 && state.progress == before) {
            active = nullptr;
            throw std::runtime_error("block " + describe(state.blockIndex) + ": " +
                                     std::to_string(remaining) +
                                     " threads wait at barriers that cannot complete");
          }
        }
      }
  active = nullptr;
}

const Dim3 &threadIndex() { return run().current->thread; }
const Dim3 &blockIndex() { return run().blockIndex; }
const Dim3 &blockDimension() { return run().block; }
const Dim3 &gridDimension() { return run().grid; }
unsigned laneId() { return run().current->linear % 32; }

void syncThreads() { arrive(run().blockBarrier); }

bool syncThreadsOr(bool predicate) {
  BlockRun &block = run();
  const unsigned slot = block.current->votes++ % 2;
  block.vote[slot] = block.vote[slot] || predicate;
  arrive(block.blockBarrier);
  // Every thread has voted in this call and finished reading the previous one's slot, which
  // the next call uses: clear it before anyone can vote there (after the barrier below).
  const bool result = block.vote[slot];
  block.vote[1 - slot] = false;
  arrive(block.blockBarrier);
  return result;
}
void syncWarp() { arrive(warpBarrier()); }

void publish(const void *data, size_t bytes) {
  if (bytes > kExchangeBytes)
    throw std::logic_error("a lane publishes at most 64 bytes");
  BlockRun &block = run();
  std::memcpy(block.exchange[block.current->linear].data(), data, bytes);
  arrive(warpBarrier());
}

const void *published(unsigned lane) {
  BlockRun &block = run();
  const unsigned index = block.current->linear / 32 * 32 + lane;
  if (index >= block.exchange.size())
    throw std::logic_error("lane " + std::to_string(lane) + " is outside the block");
  return block.exchange[index].data();
}

void exchangeDone() { arrive(warpBarrier()); }

namespace {

float element16(bool bf16, uint16_t bits) {
  if (bf16) {
    const uint32_t wide = static_cast<uint32_t>(bits) << 16;
    float value;
    std::memcpy(&value, &wide, 4);
    return value;
  }
  // IEEE binary16, subnormals included.
  const uint32_t sign = (bits >> 15) & 1, exponent = (bits >> 10) & 31, mantissa = bits & 1023;
  float magnitude;
  if (exponent == 0)
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  else if (exponent == 31)
    magnitude = mantissa ? NAN : INFINITY;
  else
    magnitude = std::ldexp(static_cast<float>(mantissa | 1024), static_cast<int>(exponent) - 25);
  return sign ? -magnitude : magnitude;
}

uint16_t half(uint32_t word, int which) {
  return static_cast<uint16_t>(which ? word >> 16 : word & 0xffff);
}

} // namespace

void mmaM16N8K16(bool bf16, float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  struct Fragments {
    uint32_t a[4], b[2];
  } mine;
  std::memcpy(mine.a, a, sizeof mine.a);
  std::memcpy(mine.b, b, sizeof mine.b);
  publish(&mine, sizeof mine);
  // The PTX ISA's m16n8k16 layouts (groupID = lane / 4, threadID_in_group = lane % 4):
  //   A 16x16 row-major: a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)
  //   B 16x8 "col":      b0 (k 2t..2t+1, n g), b1 (k 2t+8..2t+9, n g)
  //   C/D 16x8:          c0, c1 (g, 2t..2t+1), c2, c3 (g+8, 2t..2t+1)
  // with the lower 16 bits holding the lower column (A) or row (B) index.
  float matrixA[16][16], matrixB[16][8];
  for (unsigned lane = 0; lane < 32; ++lane) {
    Fragments theirs;
    std::memcpy(&theirs, published(lane), sizeof theirs);
    const unsigned g = lane / 4, t = lane % 4;
    for (int r = 0; r < 4; ++r)
      for (int h = 0; h < 2; ++h) {
        const unsigned row = g + (r & 1 ? 8 : 0), column = 2 * t + h + (r & 2 ? 8 : 0);
        matrixA[row][column] = element16(bf16, half(theirs.a[r], h));
      }
    for (int r = 0; r < 2; ++r)
      for (int h = 0; h < 2; ++h)
        matrixB[2 * t + h + 8 * r][g] = element16(bf16, half(theirs.b[r], h));
  }
  exchangeDone();
  const unsigned g = laneId() / 4, t = laneId() % 4;
  for (int e = 0; e < 4; ++e) {
    const unsigned row = g + (e >= 2 ? 8 : 0), column = 2 * t + (e & 1);
    // Products of 16-bit values are exact in f32; the tensor core's sum order is unspecified,
    // so the sum is formed in double and rounded once.
    double sum = d[e];
    for (int k = 0; k < 16; ++k)
      sum += static_cast<double>(matrixA[row][k]) * matrixB[k][column];
    d[e] = static_cast<float>(sum);
  }
}

void ldmatrix(int count, bool transpose, uint32_t *registers, const void *rowAddress) {
  if (count != 1 && count != 2 && count != 4)
    throw std::logic_error("ldmatrix loads 1, 2 or 4 matrices");
  publish(&rowAddress, sizeof rowAddress);
  const unsigned lane = laneId();
  for (int i = 0; i < count; ++i) {
    uint16_t pair[2];
    for (int h = 0; h < 2; ++h) {
      // Without .trans lane l gets row l/4, columns 2(l%4)..+1 of matrix i; with .trans the
      // transposed matrix's: rows 2(l%4)..+1 of column l/4.
      const unsigned row = transpose ? 2 * (lane % 4) + h : lane / 4;
      const unsigned column = transpose ? lane / 4 : 2 * (lane % 4) + h;
      const void *address;
      std::memcpy(&address, published(8 * i + row), sizeof address);
      std::memcpy(&pair[h], static_cast<const uint16_t *>(address) + column, 2);
    }
    registers[i] = static_cast<uint32_t>(pair[0]) | static_cast<uint32_t>(pair[1]) << 16;
  }
  exchangeDone();
}

} // namespace ampc::emu
