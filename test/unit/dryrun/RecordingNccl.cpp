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

#include <nccl.h>

#include <cstring>

#define AMPC_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

int recordingComm;

} // namespace

AMPC_EXPORT ncclResult_t ncclGetVersion(int *version) {
  *version = 29900; // "2.99.0": not a real NCCL
  return ncclSuccess;
}

AMPC_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  std::memset(id->internal, 0x5a, sizeof(id->internal));
  return ncclSuccess;
}

AMPC_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int ranks, ncclUniqueId, int rank) {
  if (ranks != 1 || rank != 0)
    return ncclInvalidUsage; // no peers in a dry run
  *comm = reinterpret_cast<ncclComm_t>(&recordingComm);
  return ncclSuccess;
}

AMPC_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t) { return ncclSuccess; }
AMPC_EXPORT ncclResult_t ncclCommAbort(ncclComm_t) { return ncclSuccess; }

AMPC_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t *state) {
  *state = ncclSuccess;
  return ncclSuccess;
}

AMPC_EXPORT const char *ncclGetErrorString(ncclResult_t result) {
  return result == ncclInvalidUsage ? "invalid usage (the recording NCCL runs one rank)"
                                    : "recording NCCL error";
}

AMPC_EXPORT ncclResult_t ncclAllReduce(const void *send, void *receive, size_t count,
                                       ncclDataType_t type, ncclRedOp_t, ncclComm_t comm,
                                       cudaStream_t) {
  if (comm != reinterpret_cast<ncclComm_t>(&recordingComm) || type != ncclFloat32)
    return ncclInvalidArgument;
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
  return inside == CUDA_SUCCESS ? ncclSuccess : ncclInvalidArgument;
}

AMPC_EXPORT ncclResult_t ncclGroupStart() { return ncclSuccess; }
AMPC_EXPORT ncclResult_t ncclGroupEnd() { return ncclSuccess; }
