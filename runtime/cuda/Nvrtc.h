//===- Nvrtc.h - Compile CUDA C++ to cubin or PTX with NVRTC --------------===//
//
// A thin wrapper over NVRTC for ahead-of-time kernel compilation: no GPU or
// driver is needed, only the toolkit's libnvrtc. Built only when the CUDA
// toolkit is found (AMPC_HAVE_CUDA).
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CUDA_NVRTC_H
#define AMPC_RUNTIME_CUDA_NVRTC_H

#include <stdexcept>
#include <string>
#include <vector>

namespace ampc::cuda {

/// A failed compilation. what() names the program and architecture and
/// carries the NVRTC log followed by the numbered source; log() and source()
/// give the two parts separately.
class NvrtcError : public std::runtime_error {
public:
  NvrtcError(const std::string &message, std::string log, std::string source)
      : std::runtime_error(message), compileLog(std::move(log)), programSource(std::move(source)) {}
  const std::string &log() const { return compileLog; }
  const std::string &source() const { return programSource; }

private:
  std::string compileLog;
  std::string programSource;
};

/// Compiles \p source (program name \p name, used in diagnostics) to a cubin
/// for the real architecture \p arch ("sm_80", "sm_90", ...), with -std=c++17
/// and \p extraOptions (e.g. "-I<dir>", "-DNAME=1"). Returns the cubin
/// bytes; throws NvrtcError on failure.
std::vector<char> compileToCubin(const std::string &source, const std::string &name,
                                 const std::string &arch = "sm_90",
                                 const std::vector<std::string> &extraOptions = {});

/// Compiles \p source to PTX for the virtual architecture \p arch
/// ("compute_90"), which newer GPUs JIT-compile at load time.
std::string compileToPtx(const std::string &source, const std::string &name,
                         const std::string &arch = "compute_90",
                         const std::vector<std::string> &extraOptions = {});

/// The NVRTC version as "major.minor".
std::string nvrtcVersion();

/// "-I<dir>" options for the CUDA toolkit headers this library was built
/// against (cuda_bf16.h, cuda_fp16.h and what they include).
std::vector<std::string> cudaIncludeOptions();

} // namespace ampc::cuda

#endif // AMPC_RUNTIME_CUDA_NVRTC_H
