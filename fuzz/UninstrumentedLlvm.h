//===- UninstrumentedLlvm.h - LLVM's headers as Debian's libraries see them -===//
//
// Included before every C++ source of the fuzz build (cmake/AmpcFuzz.cmake). Under ASan, LLVM's
// headers poison the unused part of each BumpPtrAllocator slab and unpoison what Allocate hands
// out, inline. Debian's LLVM and MLIR libraries are not built with ASan: their copies of the
// same inline functions allocate from slabs without unpoisoning, so memory the library
// allocated correctly reads as use-after-poison in our code. Compiling LLVM's headers as a
// non-ASan build does (no poisoning, no red zones in the allocators) keeps both sides in
// agreement; our own code is still fully instrumented.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_FUZZ_UNINSTRUMENTEDLLVM_H
#define AMPC_FUZZ_UNINSTRUMENTEDLLVM_H

#if defined(__cplusplus) && __has_include("llvm/Support/Compiler.h")
#include "llvm/Support/Compiler.h"
#undef LLVM_ADDRESS_SANITIZER_BUILD
#define LLVM_ADDRESS_SANITIZER_BUILD 0
#define __asan_poison_memory_region(p, size) ((void)(p), (void)(size))
#define __asan_unpoison_memory_region(p, size) ((void)(p), (void)(size))
#endif

#endif // AMPC_FUZZ_UNINSTRUMENTEDLLVM_H
