//===- RecordingNccl.cpp - A stand-in for libnccl for one-rank dry runs ---===//
//
// The NCCL entry points the CUDA backend resolves (runtime/cuda/Nccl.h), so
// a data parallel run of one rank (mpirun -np 1) goes through the GPU path
// over the recording driver: the communicator, the bucketed all-reduces on
// the exchange stream, the overflow flag's maximum. With one rank every
// reduction is the identity, so nothing is computed; what is checked here is
// that each call names memory the recording driver allocated (an f32 buffer
// of `count` elements inside one allocation) and a stream it created.
// A world of more than one rank is refused: there are no peers here.
//
//===----------------------------------------------------------------------===//

#include "RecordingState.h"

#include "runtime/cuda/Nccl.h"

#include <cstring>

#define AMPC_EXPORT extern "C" __attribute__((visibility("default")))

using namespace ampc::cuda::nccl;

namespace {

int recordingComm;

} // namespace

AMPC_EXPORT Result ncclGetVersion(int *version) {
  *version = 29900; // "2.99.0": not a real NCCL
  return Success;
}

AMPC_EXPORT Result ncclGetUniqueId(UniqueId *id) {
  std::memset(id->internal, 0x5a, sizeof(id->internal));
  return Success;
}

AMPC_EXPORT Result ncclCommInitRank(CommHandle *comm, int ranks, UniqueId, int rank) {
  if (ranks != 1 || rank != 0)
    return InvalidUsage; // no peers in a dry run
  *comm = reinterpret_cast<CommHandle>(&recordingComm);
  return Success;
}

AMPC_EXPORT Result ncclCommDestroy(CommHandle) { return Success; }
AMPC_EXPORT Result ncclCommAbort(CommHandle) { return Success; }

AMPC_EXPORT Result ncclCommGetAsyncError(CommHandle, Result *state) {
  *state = Success;
  return Success;
}

AMPC_EXPORT const char *ncclGetErrorString(Result result) {
  return result == InvalidUsage ? "invalid usage (the recording NCCL runs one rank)"
                                : "recording NCCL error";
}

AMPC_EXPORT Result ncclAllReduce(const void *send, void *receive, size_t count, DataType type,
                                 ReduceOp, CommHandle comm, CUstream) {
  if (comm != reinterpret_cast<CommHandle>(&recordingComm) || type != Float32)
    return InvalidArgument;
  // One rank: the result is the input. The buffer must be device memory the
  // driver handed out, with room for count floats.
  const CUresult inside = ampc::dryrun::recorded([&](ampc::dryrun::Recorder &recorder) {
    for (const void *buffer : {send, static_cast<const void *>(receive)}) {
      ampc::dryrun::Check check = "";
      if (!recorder.rangeProblem(reinterpret_cast<uint64_t>(buffer), count * 4, check).empty())
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
  });
  return inside == CUDA_SUCCESS ? Success : InvalidArgument;
}

AMPC_EXPORT Result ncclGroupStart() { return Success; }
AMPC_EXPORT Result ncclGroupEnd() { return Success; }
