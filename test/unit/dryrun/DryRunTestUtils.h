//===- DryRunTestUtils.h - Models run over the recording driver -----------===//
//
// The dry-run tests compile example models with the real `ampc compile`
// (kernels from the build's kernel cache, shared with the lit tests), run
// the training executables with the recording driver and cuBLASLt in place
// of the real ones ($AMPC_CUDA_DRIVER_LIBRARY, $AMPC_CUBLASLT_LIBRARY), and
// read back the trace the driver wrote ($AMPC_RECORDING_TRACE). In-process
// tests open the same library through the driver loader and read its trace
// with ampcRecordingTrace (RecordingApi.h).
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_TEST_UNIT_DRYRUN_DRYRUNTESTUTILS_H
#define AMPC_TEST_UNIT_DRYRUN_DRYRUNTESTUTILS_H

#include "RecordingApi.h"
#include "RecordingTrace.h"
#include "runtime/cuda/Driver.h"
#include "runtime/plan/Plan.h"
#include "test/unit/train/TrainTestUtils.h"

#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace ampc::dryrun {

/// The accumulation and optimizer steps every dry run uses: enough for the
/// warm-up, the capture and the replays of each function's graphs.
inline constexpr int kAccumulationSteps = 2;
inline constexpr int kOptimizerSteps = 3;

/// One example model compiled one way.
struct ModelConfig {
  std::string model;     ///< "gpt/tiny" (examples/<model>.mlir)
  std::string precision; ///< bf16, fp16, fp32
  bool budget = false;   ///< compiled with a memory budget
};

/// "tiny_bf16" or "tiny_bf16_budget".
std::string configName(const ModelConfig &config);
/// GoogleTest prints a configuration by its name.
void PrintTo(const ModelConfig &config, std::ostream *out);

/// The recording library.
const char *recordingLibrary();

/// Compiles \p config into \p path with --accum-steps kAccumulationSteps.
/// With a budget: 50% of the peak, or where that cannot be met (the small
/// models, whose 32 MiB matmul workspace is most of their peak) the
/// smallest budget ampc says it can meet. \p budget receives the budget
/// used; the output of ampc on failure.
test::CommandResult compileModel(const ModelConfig &config, const std::string &path,
                                 std::string &budget);

/// Runs the training executable \p path for kOptimizerSteps steps on
/// --device cuda over the recording driver, writing its trace to
/// \p tracePath and its metrics log to \p logPath; \p extraArguments are
/// appended to its command line.
test::CommandResult runOverRecordingDriver(const std::string &path, const std::string &tracePath,
                                           const std::string &logPath,
                                           const std::string &extraArguments = "");

/// The trace in \p path (empty and a test failure when unreadable or
/// malformed).
std::vector<Event> readTraceFile(const std::string &path);

/// The host's traffic in the training loop of a trace: everything after the
/// last synchronisation before the first eagerly launched kernel or matmul
/// (the setup's uploads end with one; the first micro step's inputs are
/// queued after it).
struct LoopTraffic {
  /// cuStreamSynchronize, cuEventSynchronize and cuCtxSynchronize calls.
  uint64_t streamSyncs = 0, eventSyncs = 0, contextSyncs = 0;
  /// Host-to-device copies queued eagerly, from pinned memory (a live
  /// cuMemAllocHost range) or from pageable memory.
  uint64_t pinnedUploads = 0, pageableUploads = 0;
  /// Of the pinned uploads: how many of each size.
  std::map<uint64_t, uint64_t> pinnedUploadsOfBytes;
};
LoopTraffic loopTraffic(const std::vector<Event> &trace);

/// The recording library opened in this process: the driver table, and its
/// own entry points. Opening it also points $AMPC_CUBLASLT_LIBRARY at it
/// (before anything loads cuBLASLt), so cuda::Matmul uses it too.
struct RecordingLibrary {
  const cuda::DriverApi *api = nullptr;
  void (*reset)(const AmpcRecordingDevice *) = nullptr;
  const char *(*trace)() = nullptr;
  AmpcRecordingDevice (*h100)() = nullptr;
  void (*plant)(const AmpcRecordingPlant *) = nullptr;

  /// The trace recorded since the last reset.
  std::vector<Event> events() const { return parseTraceText(trace()); }
};
/// Loads it once per process (a test failure if it cannot).
const RecordingLibrary &recordingLibraryInProcess();

} // namespace ampc::dryrun

#endif // AMPC_TEST_UNIT_DRYRUN_DRYRUNTESTUTILS_H
