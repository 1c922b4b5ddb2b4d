//===- Errors.h - CudaError and the CUDA backend's user-facing messages ---===//
//
// Every failure of the CUDA device layer is a CudaError whose what() starts
// with one line a user can act on (a PTX JIT failure appends the driver's
// log on the lines after it). The messages for the failures a user causes or
// meets on a real machine (no driver, no GPU, a driver older than the
// kernels, a GPU without bf16, not enough memory, a kernel that cannot be
// loaded) are built by the pure functions below, so the tests check their
// exact wording without a GPU. Failures of individual driver or cuBLASLt
// calls name the call, the error's name and description, and what the
// runtime was doing.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CUDA_ERRORS_H
#define AMPC_RUNTIME_CUDA_ERRORS_H

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace ampc::cuda {

/// What went wrong, for callers that react differently (the training binary
/// falls back to nothing: it prints what() and exits; tests skip on
/// NoDriver / NoDevice).
enum class CudaErrorKind {
  NoDriver,        ///< libcuda could not be loaded, or it is the toolkit stub
  NoDevice,        ///< the driver is there but sees no (such) GPU
  DriverTooOld,    ///< the driver predates the CUDA version of our kernels
  Bf16Unsupported, ///< compute capability < 8.0 and the plan needs bf16
  OutOfMemory,     ///< an allocation did not fit in free device memory
  KernelLoad,      ///< no binary for this GPU, or the PTX JIT failed
  NoCublasLt,      ///< libcublasLt could not be loaded
  Cublas,          ///< a cuBLASLt call failed
  Cudnn,           ///< libcudnn could not be loaded, a cuDNN call failed, or no engine fits
  InvalidArgument, ///< the caller asked for something impossible
  DriverCall,      ///< any other failing driver call
};

/// A failure in the CUDA device layer. what() is one line, except that a
/// JIT failure (KernelLoad) appends the JIT's error log after it.
class CudaError : public std::runtime_error {
public:
  CudaError(CudaErrorKind kind, const std::string &message, int code = 0)
      : std::runtime_error(message), errorKind(kind), errorCode(code) {}
  CudaErrorKind kind() const { return errorKind; }
  /// The CUresult, cublasStatus_t or cudnnStatus_t that caused it (0 when none did).
  int code() const { return errorCode; }

private:
  CudaErrorKind errorKind;
  int errorCode;
};

/// A cuDriverGetVersion number as "major.minor": 13000 -> "13.0",
/// 12040 -> "12.4".
std::string formatCudaVersion(int version);

/// A byte count for people, in decimal units like `ampc report memory`:
/// "512 B", "131.1 kB", "12.1 GB".
std::string formatBytes(uint64_t bytes);

/// The oldest driver branch that supports CUDA \p version's major release
/// ("R580" for 13.x), or "" when we do not know it.
std::string minimumDriverBranch(int version);

// libcuda that cannot be opened is reported as every library the runtime
// opens at run time is: LibrarySearch::notFoundMessage
// (runtime/support/DynamicLibrary.h), "no NVIDIA driver found (tried ...)".

/// \p library loaded but is the toolkit's stub (every call returns
/// CUDA_ERROR_STUB_LIBRARY).
std::string stubDriverMessage(const std::string &library);

/// The driver reports no usable GPU; \p cause is e.g. "cuInit:
/// CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)".
std::string noDeviceMessage(const std::string &cause);

/// Device \p index was asked for but only \p count GPUs are visible.
std::string deviceIndexMessage(int index, int count);

/// The installed driver (\p installedVersion, as cuDriverGetVersion says)
/// is older than \p requiredVersion, which \p what needs (e.g. "this
/// program's kernels (compiled with CUDA 13.0)").
std::string driverTooOldMessage(int installedVersion, int requiredVersion, const std::string &what);

/// The GPU cannot run bf16 kernels (compute capability below 8.0).
std::string bf16UnsupportedMessage(int index, const std::string &deviceName, int major, int minor);

/// An allocation of \p requested bytes for \p what failed with \p freeBytes
/// of \p totalBytes free on GPU \p index (\p deviceName), while this
/// program already held \p heldBytes there. Suggests a --memory-budget for
/// the whole step that fits what is free plus what is held.
std::string outOfMemoryMessage(const std::string &what, uint64_t requested, uint64_t freeBytes,
                               uint64_t totalBytes, uint64_t heldBytes, int index,
                               const std::string &deviceName);

/// The whole-step memory budget suggested when \p usableBytes (free plus
/// already held) are available: 90% of them (the rest is headroom for
/// kernel modules, the CUDA context and fragmentation), rounded down to
/// 0.1 GB (or to 1 MB below 1 GB) so that formatBudget prints it exactly.
uint64_t suggestedMemoryBudget(uint64_t usableBytes);

/// A budget as --memory-budget takes it: "4.6GB", "750MB".
std::string formatBudget(uint64_t bytes);

/// A failed driver call: "<call> failed: <NAME> (<description>) while <doing>".
std::string driverCallMessage(const std::string &call, const std::string &name,
                              const std::string &description, const std::string &doing);

} // namespace ampc::cuda

#endif // AMPC_RUNTIME_CUDA_ERRORS_H
