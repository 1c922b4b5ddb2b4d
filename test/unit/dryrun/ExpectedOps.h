//===- ExpectedOps.h - What a plan says each device step runs --------------===//
//
// The dry run's expectations, read from the plan alone: for every device step of a function,
// the operations the CUDA backend must issue (a kernel launch with its arguments bound as the
// executor binds them, a cuBLASLt matmul, a memset; an attention step's forward, delta, dq and
// dk/dv kernels with their grids), in order. DryRunChecker replays a recorded trace against
// them.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_TEST_UNIT_DRYRUN_EXPECTEDOPS_H
#define AMPC_TEST_UNIT_DRYRUN_EXPECTEDOPS_H

#include "RecordingTrace.h"

#include "runtime/plan/Plan.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ampc::dryrun {

enum class OpKind { Launch, Matmul, Memset };

/// One kernel argument as the plan (or, for flash attention, the runtime)
/// binds it.
struct BoundArg {
  enum Kind { Pointer, Value, RunScalars, Bytes } kind = Pointer;
  std::string name;
  uint32_t size = 8;  ///< bytes passed
  uint32_t align = 0; ///< the parameter's alignment (0: its size)
  /// Pointer: the bytes the kernel may touch from the pointer, the buffer
  /// (if any), the pointer's byte offset into it, and how to name it.
  uint64_t extent = 0;
  uint32_t buffer = plan::kNoBuffer;
  uint64_t offset = 0;
  std::string what;
  /// Value: the expected bits (zero-extended).
  uint64_t value = 0;
  /// Bytes: a struct passed by value, as the recorded 8-byte words
  /// (Event::wideArgs), and how to read them for a message.
  std::vector<uint64_t> words;
  std::string (*describeWords)(const std::vector<uint64_t> &) = nullptr;
};

/// One operation the device must run for a step.
struct ExpectedOp {
  bool optimizer = false;
  uint32_t group = 0, step = 0;
  /// -1: the step itself; 0..3: an attention step's forward, delta, dq or
  /// dk/dv kernel.
  int part = -1;
  OpKind kind = OpKind::Launch;
  std::string kernel; ///< a launch's entry point
  std::vector<BoundArg> args;
  const plan::LaunchStep *launch = nullptr;
  /// An attention kernel's grid and block, as Executor::Impl::runAttention must launch it.
  uint32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  const plan::MatmulStep *matmul = nullptr;
  uint32_t memsetBuffer = plan::kNoBuffer;
  /// Where it is, for messages (see DryRunViolation::where).
  std::string where;
};

/// The bytes of buffer \p id.
uint64_t bufferBytes(const plan::Plan &plan, uint32_t id);

/// "buffer 12 'x' (bf16 [64, 128], 16384 bytes)".
std::string describeBuffer(const plan::Plan &plan, uint32_t id);

/// Every operation of one function, in order.
std::vector<ExpectedOp> expectedOps(const plan::Plan &plan, bool optimizer);

/// "8@0, 8@8, 4@16".
std::string describeParams(const std::vector<KernelParam> &params);

/// The parameter layout of \p args, each at its natural alignment.
std::vector<KernelParam> layoutOf(const std::vector<BoundArg> &args);

} // namespace ampc::dryrun

#endif // AMPC_TEST_UNIT_DRYRUN_EXPECTEDOPS_H
