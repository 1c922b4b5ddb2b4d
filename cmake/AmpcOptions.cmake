# AmpcOptions.cmake: toolchain discovery shared by every layer.
#
# MLIR/LLVM 19 come from Debian's packages; the CUDA toolkit is optional and only enables the
# NVRTC code-generation checks (AMPC_HAVE_CUDA).

set(AMPC_LLVM_ROOT "/usr/lib/llvm-19" CACHE PATH "Root of the LLVM/MLIR 19 installation")
list(APPEND CMAKE_PREFIX_PATH "${AMPC_LLVM_ROOT}")

find_package(MLIR REQUIRED CONFIG)
message(STATUS "Using MLIR ${LLVM_PACKAGE_VERSION} from ${MLIR_DIR}")
list(APPEND CMAKE_MODULE_PATH "${MLIR_CMAKE_DIR}" "${LLVM_CMAKE_DIR}")
include(TableGen)
include(AddLLVM)
include(AddMLIR)

# MLIR's headers are included only by the compiler side; the runtime never sees them.
set(AMPC_MLIR_INCLUDE_DIRS ${LLVM_INCLUDE_DIRS} ${MLIR_INCLUDE_DIRS})
# Debian builds LLVM without RTTI.
set(AMPC_MLIR_COMPILE_OPTIONS -fno-rtti)
separate_arguments(AMPC_LLVM_DEFINITIONS NATIVE_COMMAND "${LLVM_DEFINITIONS}")

# lit and FileCheck.
set(AMPC_LIT "${AMPC_LLVM_ROOT}/build/utils/lit/lit.py" CACHE FILEPATH "lit driver")
set(AMPC_LLVM_TOOLS_DIR "${AMPC_LLVM_ROOT}/bin" CACHE PATH "FileCheck, not, count, split-file")
if(NOT EXISTS "${AMPC_LLVM_TOOLS_DIR}/FileCheck")
  message(FATAL_ERROR "FileCheck not found in ${AMPC_LLVM_TOOLS_DIR}: install llvm-19-tools")
endif()

find_package(Boost REQUIRED)
find_package(Threads REQUIRED)

# CUDA toolkit: optional.
option(AMPC_ENABLE_CUDA "Build the CUDA parts when the toolkit is found" ON)
set(AMPC_HAVE_CUDA OFF)
if(AMPC_ENABLE_CUDA)
  if(NOT CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND AND TARGET CUDA::nvrtc)
    set(AMPC_HAVE_CUDA ON)
    message(STATUS "CUDA toolkit ${CUDAToolkit_VERSION} found: building the CUDA parts")
  endif()
endif()
if(NOT AMPC_HAVE_CUDA)
  if(AMPC_ENABLE_CUDA)
    set(_ampc_cuda_reason "CUDA toolkit not found")
  else()
    set(_ampc_cuda_reason "CUDA disabled (AMPC_ENABLE_CUDA=OFF)")
  endif()
  message(STATUS "${_ampc_cuda_reason}: skipping the CUDA parts (NVRTC kernel checks); "
                 "everything else builds and all non-GPU tests run")
endif()
