//===- HostDevice.h - Portability macros for host and CUDA device code ----===//
//
// The numerics headers are compiled three ways: by the host C++ compiler, by
// nvcc, and by NVRTC when the compiler's generated kernels include them. NVRTC
// provides no standard library headers, so this header also supplies the fixed
// width integer names the numerics code uses, inside namespace ampc, without
// including <cstdint> under NVRTC.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_NUMERICS_HOSTDEVICE_H
#define AMPC_RUNTIME_NUMERICS_HOSTDEVICE_H

/// Marks a function as callable from both host and CUDA device code.
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define AMPC_HOST_DEVICE __host__ __device__
#else
#define AMPC_HOST_DEVICE
#endif

/// True while compiling device code (nvcc's device pass or NVRTC).
#if defined(__CUDA_ARCH__)
#define AMPC_DEVICE_PASS 1
#else
#define AMPC_DEVICE_PASS 0
#endif

#if defined(__CUDACC_RTC__)
// NVRTC has no <cstdint>. The typedefs live in namespace ampc so they cannot
// clash with whatever a generated kernel defines at global scope.
namespace ampc {
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef int int32_t;
typedef long long int64_t;
typedef decltype(sizeof(0)) size_t;
} // namespace ampc
#else
#include <cstddef>
#include <cstdint>
#endif

#endif // AMPC_RUNTIME_NUMERICS_HOSTDEVICE_H
