//===- ErrorRecord.cuh - How generated kernels report bad data ------------===//
//
// Where the CPU backend stops on bad data (a cross-entropy label or an embedding id out of
// range), a generated kernel reads nothing out of bounds, continues with NaN, and writes the
// first error of the step into the runtime's error record, which the runtime reads after the
// step (plan::describeDeviceError words it as the CPU backend does). The generator includes
// this header in a kernel that takes the record (KernelWriter::errorParam). NVRTC-compilable.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CUDA_DEVICE_ERRORRECORD_CUH
#define AMPC_RUNTIME_CUDA_DEVICE_ERRORRECORD_CUH

namespace ampc {
namespace device {

/// The runtime's error record, 32 bytes (plan::DeviceErrorRecord's layout), zeroed by the
/// runtime before a function runs.
struct ErrorRecord {
  unsigned int code;        ///< 1 cross-entropy label, 2 embedding id
  unsigned int instruction; ///< the plan instruction (site)
  long long index;          ///< the row or the id's position
  long long value;          ///< the bad label or id
  long long bound;          ///< valid values are [0, bound)
};

/// Records an error of \p code at plan instruction \p site unless one is recorded already: the
/// first error wins (atomicCAS on code), later ones leave the record alone. Memory: one atomic,
/// and the record's fields written once.
__device__ __forceinline__ void reportError(ErrorRecord *record, unsigned int code,
                                            long long site, long long index, long long value,
                                            long long bound) {
  if (atomicCAS(&record->code, 0u, code) == 0u) {
    record->instruction = static_cast<unsigned int>(site);
    record->index = index;
    record->value = value;
    record->bound = bound;
  }
}

} // namespace device
} // namespace ampc

#endif // AMPC_RUNTIME_CUDA_DEVICE_ERRORRECORD_CUH
