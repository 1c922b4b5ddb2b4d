# AmpcFuzz.cmake: the fuzz build (-DAMPC_FUZZ=ON, `make fuzz`): the project's libraries compiled
# with AddressSanitizer, UndefinedBehaviorSanitizer and libFuzzer's coverage instrumentation,
# for the fuzz targets in fuzz/. Only those targets and the libraries they link are meant to be
# built here; the product build is a separate build folder and is unaffected.
#
# Debian's clang-19 with libfuzzer-19-dev: configure with
#   -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19
# (the Makefile's fuzz targets do). MLIR, LLVM, protobuf and minizip stay the uninstrumented
# Debian libraries: the sanitizers check the project's code and what it hands them.

if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "AMPC_FUZZ needs clang (libFuzzer): configure with "
                      "-DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 "
                      "(apt-get install clang-19 libfuzzer-19-dev)")
endif()

# NVRTC would compile the kernels of every generated model: the fuzzed compiler builds the
# device program's sources (DeviceProgramBuilder) but compiles none.
if(AMPC_HAVE_CUDA)
  message(STATUS "AMPC_FUZZ: not building the CUDA parts (the fuzz targets generate kernels "
                 "but do not compile them)")
  set(AMPC_HAVE_CUDA OFF)
endif()

# Every UBSan finding aborts, so libFuzzer keeps it as a crash; frame pointers and line tables
# give readable stacks. -O1 is what the sanitizers' documentation recommends, and compiles
# faster than -O2 on the 2-core CI machine. NDEBUG matches Debian's LLVM and MLIR libraries.
set(AMPC_FUZZ_SANITIZERS address,undefined)
add_compile_options(-fsanitize=${AMPC_FUZZ_SANITIZERS},fuzzer-no-link
                    -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
add_link_options(-fsanitize=${AMPC_FUZZ_SANITIZERS})
# LLVM's inline allocator code must not poison memory that Debian's uninstrumented LLVM and
# MLIR libraries hand out (fuzz/UninstrumentedLlvm.h says why).
add_compile_options(
  "$<$<COMPILE_LANGUAGE:CXX>:SHELL:-include ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/UninstrumentedLlvm.h>")
set(CMAKE_BUILD_TYPE RelWithDebInfo)
set(CMAKE_C_FLAGS_RELWITHDEBINFO "-O1 -gline-tables-only -DNDEBUG")
set(CMAKE_CXX_FLAGS_RELWITHDEBINFO "-O1 -gline-tables-only -DNDEBUG")
