//===- Nccl.h - NCCL, opened at run time ----------------------------------===//
//
// Data parallel runs on GPUs move gradients with NCCL. Like the driver and
// cuBLASLt, libnccl.so.2 is opened with dlopen the first time a data
// parallel run on a GPU needs it (runtime/support/DynamicLibrary.h), so a
// training executable starts (and trains on one GPU) on machines without
// NCCL. The entry points live in a table (NcclApi, from the X-macro list
// AMPC_NCCL_ENTRY_POINTS) that tests replace with a recording stand-in, as
// the dry run replaces the driver.
//
// NcclWorld is one rank's communicator: created from the unique id rank 0
// draws (exchanged by the caller over MPI or TCP), on the GPU current on
// the calling thread.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CUDA_NCCL_H
#define AMPC_RUNTIME_CUDA_NCCL_H

#include "runtime/support/DynamicLibrary.h"

#include <cuda.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace ampc::cuda {

/// The part of NCCL's C ABI (nccl.h, stable since NCCL 2) the runtime uses,
/// declared here so that building needs no NCCL headers (the CUDA toolkit's
/// installers do not always ship them): enums are C ints, the unique id is
/// 128 bytes passed by value, cudaStream_t is CUstream.
namespace nccl {
struct Comm;
using CommHandle = Comm *;
enum Result : int {
  Success = 0,
  UnhandledCudaError = 1,
  SystemError = 2,
  InternalError = 3,
  InvalidArgument = 4,
  InvalidUsage = 5,
  RemoteError = 6,
  InProgress = 7
};
enum DataType : int { Float32 = 7 };
enum ReduceOp : int { Sum = 0, Max = 2 };
inline constexpr size_t kUniqueIdBytes = 128;
struct UniqueId {
  char internal[kUniqueIdBytes];
};
} // namespace nccl

/// NCCL missing, or an NCCL call that failed; what() is one line.
class NcclError : public std::runtime_error {
public:
  using runtime_error::runtime_error;
};

// Every NCCL entry point the runtime uses: X(name, result type, parameter list), the name as in
// nccl.h. The member, its type and the symbol looked up all come from this list.
#define AMPC_NCCL_ENTRY_POINTS(X)                                                                  \
  X(ncclGetVersion, nccl::Result, (int *version))                                                  \
  X(ncclGetUniqueId, nccl::Result, (nccl::UniqueId *))                                             \
  X(ncclCommInitRank, nccl::Result, (nccl::CommHandle *, int ranks, nccl::UniqueId, int rank))     \
  X(ncclCommDestroy, nccl::Result, (nccl::CommHandle comm))                                        \
  X(ncclCommAbort, nccl::Result, (nccl::CommHandle comm))                                          \
  X(ncclCommGetAsyncError, nccl::Result, (nccl::CommHandle, nccl::Result *))                       \
  X(ncclGetErrorString, const char *, (nccl::Result result))                                       \
  X(ncclAllReduce, nccl::Result,                                                                   \
    (const void *send, void *receive, size_t count, nccl::DataType type, nccl::ReduceOp op,        \
     nccl::CommHandle comm, CUstream stream))                                                      \
  X(ncclGroupStart, nccl::Result, ())                                                              \
  X(ncclGroupEnd, nccl::Result, ())

/// NCCL's entry points (named as in nccl.h, resolved with dlsym).
struct NcclApi {
#define AMPC_NCCL_MEMBER(name, result, parameters) result(*name) parameters = nullptr;
  AMPC_NCCL_ENTRY_POINTS(AMPC_NCCL_MEMBER)
#undef AMPC_NCCL_MEMBER
  /// The library that opened ("libnccl.so.2"), or the stand-in's name.
  std::string library;
  int version = 0; ///< ncclGetVersion: 22703 for 2.27.3
};

/// The process-wide table: libnccl.so.2 (or $AMPC_NCCL_LIBRARY) opened on
/// first use. Throws NcclError with the fix when it cannot be opened.
const NcclApi &ncclApi();

/// Where ncclApi() looks for NCCL: the file $AMPC_NCCL_LIBRARY names when it
/// is set, else libnccl.so.2 and libnccl.so.
LibrarySearch ncclLibrarySearch();

/// Opens NCCL as \p search says and resolves every entry point; a new table
/// each call, whose library stays loaded. Throws NcclError when no name opens
/// ("no NCCL found (tried ...)") or the library lacks an entry point ("<file>
/// has no <symbol>: NCCL 2.12 or newer is needed").
NcclApi loadNcclApi(const LibrarySearch &search);

/// The 128 bytes of an ncclUniqueId.
using NcclId = std::array<char, nccl::kUniqueIdBytes>;

/// One rank's NCCL communicator. Not copyable.
class NcclWorld {
public:
  /// Draws the id rank 0 hands to every rank.
  static NcclId newId(const NcclApi &api);
  /// Joins the communicator of \p ranks ranks as \p rank (blocks until every
  /// rank has joined). The GPU whose context is current is this rank's.
  NcclWorld(const NcclApi &api, const NcclId &id, int rank, int ranks);
  ~NcclWorld();
  NcclWorld(const NcclWorld &) = delete;
  NcclWorld &operator=(const NcclWorld &) = delete;

  int rank() const { return me; }
  int size() const { return count; }
  const NcclApi &api() const { return *api_; }

  /// Sums \p count f32 values at \p buffer over the ranks, in place, on
  /// \p stream. Several calls between groupStart() and groupEnd() are
  /// issued together.
  void allReduceSum(CUdeviceptr buffer, size_t count, CUstream stream);
  /// The maximum over the ranks of \p count f32 values, in place.
  void allReduceMax(CUdeviceptr buffer, size_t count, CUstream stream);
  void groupStart();
  void groupEnd();
  /// Throws NcclError when NCCL reports an asynchronous failure (a peer
  /// that died, a network error).
  void checkAsyncError();
  /// Abandons the communicator after a failure (ncclCommAbort) instead of
  /// waiting for the peers in the destructor.
  void abort();

private:
  void check(nccl::Result result, const char *call);

  const NcclApi *api_;
  nccl::CommHandle comm = nullptr;
  int me = 0, count = 1;
};

} // namespace ampc::cuda

#endif // AMPC_RUNTIME_CUDA_NCCL_H
