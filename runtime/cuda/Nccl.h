//===- Nccl.h - NCCL, opened at run time ----------------------------------===//
//
// Data parallel runs on GPUs move gradients with NCCL. Like the driver and
// cuBLASLt, libnccl.so.2 is opened with dlopen the first time a data
// parallel run on a GPU needs it, so a training executable starts (and
// trains on one GPU) on machines without NCCL. The entry points live in a
// table (NcclApi) that tests replace with a recording stand-in, as the dry
// run replaces the driver.
//
// NcclWorld is one rank's communicator: created from the unique id rank 0
// draws (exchanged by the caller over MPI or TCP), on the GPU current on
// the calling thread.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CUDA_NCCL_H
#define AMPC_RUNTIME_CUDA_NCCL_H

#include <cuda.h>
#include <nccl.h>

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace ampc::cuda {

/// NCCL missing, or an NCCL call that failed; what() is one line.
class NcclError : public std::runtime_error {
public:
  using runtime_error::runtime_error;
};

#define AMPC_NCCL_ENTRY_POINTS(X)                                                                  \
  X(ncclGetVersion)                                                                                \
  X(ncclGetUniqueId)                                                                               \
  X(ncclCommInitRank)                                                                              \
  X(ncclCommDestroy)                                                                               \
  X(ncclCommAbort)                                                                                 \
  X(ncclCommGetAsyncError)                                                                         \
  X(ncclGetErrorString)                                                                            \
  X(ncclAllReduce)                                                                                 \
  X(ncclGroupStart)                                                                                \
  X(ncclGroupEnd)

/// NCCL's entry points.
struct NcclApi {
#define AMPC_NCCL_MEMBER(name) decltype(&::name) name = nullptr;
  AMPC_NCCL_ENTRY_POINTS(AMPC_NCCL_MEMBER)
#undef AMPC_NCCL_MEMBER
  /// The library that opened ("libnccl.so.2"), or the stand-in's name.
  std::string library;
  int version = 0; ///< ncclGetVersion: 22703 for 2.27.3
};

/// The process-wide table: libnccl.so.2 (or $AMPC_NCCL_LIBRARY) opened on
/// first use. Throws NcclError with the fix when it cannot be opened.
const NcclApi &ncclApi();

/// The 128 bytes of an ncclUniqueId.
using NcclId = std::array<char, NCCL_UNIQUE_ID_BYTES>;

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
  const NcclApi &api() const { return *nccl; }

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
  void check(ncclResult_t result, const char *call);

  const NcclApi *nccl;
  ncclComm_t comm = nullptr;
  int me = 0, count = 1;
};

} // namespace ampc::cuda

#endif // AMPC_RUNTIME_CUDA_NCCL_H
