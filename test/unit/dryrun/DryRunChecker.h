//===- DryRunChecker.h - A recorded CUDA run against its plan -------------===//
//
// The recording driver checks what any GPU would check; it does not know the
// plan. DryRunChecker replays a trace (RecordingTrace.h) against the plan
// that produced it and the training loop that ran it (so many optimizer
// steps, each of accumulationSteps micro steps): the device work of every
// run of micro_step and optimizer_step must be the plan's device steps in
// order (a kernel launch per launch step, one cuBLASLt matmul per matmul
// step, the flash-attention kernels of an attention step, a memset per
// memset step), executed eagerly or replayed from a CUDA graph. Each is
// matched to its step, and then:
//
//   signature   the kernel's parameters in the loaded cubin (count, sizes,
//               offsets) are what the plan binds: one 8-byte value per
//               launch argument; for flash attention, the pointers and
//               32-bit scalars the runtime passes and the 128-byte layout
//               struct passed by value;
//   pointer, freed-memory, extent
//               every pointer argument lies in a live allocation together
//               with the bytes the plan says the kernel may touch: its
//               buffer (each dtype x element; an attention operand from its
//               layout's byte offset to the last element its strides
//               reach), scratch bytes, table entries, the 32-byte error
//               record; each matmul operand,
//               bias and aux with its buffer's bytes;
//   cublaslt-layout
//               each cuBLASLt layout (rows x cols x ld x element size over
//               the batch) fits in the plan's buffer, not just in the
//               allocation, and D is the plan's n x m;
//   matmul-scale  a cuBLASLt matmul ran with the plan's alpha and beta; one
//               that accumulates (C == D, beta 1: a weight gradient added
//               into its accumulator) passes C at D's address with D's
//               layout, as cuBLASLt's in-place form requires;
//   matmul-timing
//               the runs of cuBLASLt's candidates that the executor times
//               (matmuls on a stream other than the device's) happen while
//               it is built, before the first step, run eagerly (never
//               captured) and stay inside live allocations; they are not
//               steps of the plan and are not matched to any;
//   binding     a buffer is at one address wherever it is used (an
//               attention operand's pointer is that address plus its
//               layout's byte offset); literals are the plan's; the run
//               scalars are one 24-byte block wherever they are bound, and
//               when a launch runs (eagerly or replayed) the block holds
//               the run's seed, step and step count, as the recorded
//               host-to-device copies into it left it; an attention
//               kernel's layout struct holds the step's head count and
//               strides;
//   launch-shape  grid and block are the plan's;
//   sequence    the device ran the plan's steps, all of them, in order;
//   capture     every graph capture succeeded (none invalidated).
//
// Violations the recording driver found (launch limits, registers, shared
// memory, capture rules, cuBLASLt layouts and alignment, frees) are reported
// too. Every violation names where it happened: the function, its run, the
// group, the step and the plan instructions the group computes, with their
// source locations.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_TEST_UNIT_DRYRUN_DRYRUNCHECKER_H
#define AMPC_TEST_UNIT_DRYRUN_DRYRUNCHECKER_H

#include "RecordingTrace.h"
#include "runtime/plan/Plan.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ampc::dryrun {

/// How the training loop drove the backend.
struct DryRunSchedule {
  /// Optimizer steps; each is plan.accumulationSteps micro steps (global
  /// micro step s * accumulation + i) followed by one optimizer step.
  uint64_t steps = 0;
  uint64_t seed = 0;
  /// A validation loss (--val-data) after every evalEvery-th optimizer step
  /// and the last: evalBatches eager runs of the micro step's forward groups
  /// (plan::forwardGroupCount), batch i with RunOptions::step i. 0: none.
  uint64_t evalEvery = 0, evalBatches = 0;
};

struct DryRunViolation {
  std::string check;
  std::string message;
  /// "micro_step group 7 (elementwise), step 0 (launch of ampc_...),
  /// computing instruction 12 (add at tiny.mlir:33:10)".
  std::string where;
  /// The run it first happened in ("micro_step run 2 of 6, replayed") and
  /// how many times the same violation happened at the same step.
  std::string firstRun;
  uint64_t times = 1;

  /// "extent: ... at micro_step group 7 (...) [micro_step run 2 of 6,
  /// replayed; 4 times]".
  std::string text() const;
};

struct DryRunReport {
  std::vector<DryRunViolation> violations;
  uint64_t functionRuns = 0;        ///< complete runs matched
  uint64_t launches = 0;            ///< kernel launches checked
  uint64_t matmuls = 0;             ///< cuBLASLt matmuls checked
  uint64_t accumulatingMatmuls = 0; ///< of them, adding into D in place (C == D, beta 1)
  uint64_t timedMatmuls = 0;        ///< runs of cuBLASLt candidates timed while building
  uint64_t memsets = 0;             ///< memset steps checked
  uint64_t graphsCaptured = 0;      ///< captures that made a graph
  uint64_t graphReplays = 0;        ///< cuGraphLaunch calls
  uint64_t replayedSteps = 0;       ///< device steps run by graph replays
  uint64_t metricReads = 0;         ///< device-to-host copies

  /// "launches 581, matmuls 189, ..." and every violation, one a line.
  std::string summary() const;
  /// The violations of \p check.
  std::vector<DryRunViolation> of(const std::string &check) const;
};

/// Whether \p event is a run of a cuBLASLt candidate being timed while the executor is built
/// (Matmul::prepare): a matmul on a stream other than the first the program created (the
/// device's, where every step runs).
bool isTimedMatmul(const Event &event);

/// Checks \p trace against \p plan run as \p schedule says.
DryRunReport checkDryRun(const plan::Plan &plan, const std::vector<Event> &trace,
                         const DryRunSchedule &schedule);

} // namespace ampc::dryrun

#endif // AMPC_TEST_UNIT_DRYRUN_DRYRUNCHECKER_H
