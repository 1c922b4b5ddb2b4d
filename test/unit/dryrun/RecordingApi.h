//===- RecordingApi.h - The recording library's own entry points ----------===//
//
// Besides the driver and cuBLASLt entry points, the recording library
// (libampc_recording_cuda.so) exports these C functions. A test that loads it
// in-process (DriverLoadOptions::libraryNames, $AMPC_CUBLASLT_LIBRARY)
// resolves them with dlsym to choose the device it pretends to be and to read
// what it recorded; a training executable run over it instead sets
// $AMPC_RECORDING_TRACE to a file, which receives the same trace.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_TEST_UNIT_DRYRUN_RECORDINGAPI_H
#define AMPC_TEST_UNIT_DRYRUN_RECORDINGAPI_H

#include <cstddef>
#include <cstdint>

extern "C" {

/// The GPU the recording driver pretends to be, and its limits.
struct AmpcRecordingDevice {
  const char *name;
  int computeMajor, computeMinor;
  int multiprocessors;
  uint64_t totalBytes;
  /// What cuMemGetInfo reports free before this process allocates.
  uint64_t freeBytes;
  int sharedPerBlock;      ///< without opting in (48 KiB)
  int sharedPerBlockOptin; ///< the most a block may opt in to
  int registersPerBlock;
  int maxThreadsPerBlock;
  int maxBlock[3];
  int maxGrid[3];
};

/// An NVIDIA H100 (80 GB HBM3, compute capability 9.0) as the driver
/// describes it: the default.
AmpcRecordingDevice ampcRecordingH100();

/// Forgets every allocation, module, stream, graph and event and empties
/// the trace; from now on the driver is \p device (null: the H100). Objects
/// created before must not be used afterwards.
void ampcRecordingReset(const AmpcRecordingDevice *device);

/// The trace so far, one event per line (RecordingTrace.h). The pointer
/// stays valid until the next call into the library.
const char *ampcRecordingTrace();

/// How many violations have been recorded since the last reset.
size_t ampcRecordingViolationCount();

/// Planted defects: the recording library alters one call the runtime makes
/// as a defective runtime would have made it, then checks it as usual, so a
/// test can show each check firing in the middle of a real run.
enum AmpcRecordingPlantKind {
  AMPC_PLANT_NONE = 0,
  AMPC_PLANT_ARGUMENT_OFFSET,  ///< a launch's argument `argument` += amount
  AMPC_PLANT_FREE_ARGUMENT,    ///< free what argument `argument` points into
  AMPC_PLANT_SYNC_IN_CAPTURE,  ///< cuStreamSynchronize before a captured launch
  AMPC_PLANT_ALLOC_IN_CAPTURE, ///< cuMemAlloc before a captured launch
  AMPC_PLANT_DYNAMIC_SHARED,   ///< a launch's dynamic shared memory += amount
  AMPC_PLANT_GRID_Y,           ///< a launch's grid y = amount
  AMPC_PLANT_MATMUL_LD,        ///< a matmul's cuBLASLt A layout ld += amount
  AMPC_PLANT_MATMUL_OFFSET,    ///< a matmul's D pointer += amount bytes
  AMPC_PLANT_MATMUL_NO_BIAS,   ///< a matmul's bias pointer = 0
  AMPC_PLANT_WIDE_ARGUMENT,    ///< a launch's by-value struct word `argument` += amount
  /// A small host-to-device copy (at most kRecordedCopyBytes) that reaches word `argument`:
  /// that word of the bytes it writes += amount.
  AMPC_PLANT_COPY_WORD,
  /// A cuEventSynchronize (its occurrence among them) returns at once without waiting, as if
  /// the runtime had not called it.
  AMPC_PLANT_SKIP_EVENT_WAIT,
  /// A cuMemAllocHost (its occurrence among them) fails with CUDA_ERROR_OUT_OF_MEMORY.
  AMPC_PLANT_HOST_ALLOC_FAILS,
  AMPC_PLANT_MATMUL_NO_AUX, ///< a matmul's epilogue aux pointer = 0
};

struct AmpcRecordingPlant {
  int kind;
  /// Launches: a substring of the kernel's name ("" or null: any kernel).
  const char *kernel;
  /// Which of the matching launches or matmuls, from 0 (the capture plants
  /// count captured launches only).
  int occurrence;
  int argument;
  int64_t amount;
};

/// Plants \p plant (null: none); it is applied once.
void ampcRecordingPlant(const AmpcRecordingPlant *plant);

} // extern "C"

#endif // AMPC_TEST_UNIT_DRYRUN_RECORDINGAPI_H
