//===- Nccl.cpp - NCCL, opened at run time --------------------------------===//

#include "runtime/cuda/Nccl.h"

#include "runtime/cuda/DynamicLibrary.h"

#include <cstdlib>

namespace ampc::cuda {

namespace {

NcclApi loadNcclApi() {
  // $AMPC_NCCL_LIBRARY, when set, is the only candidate.
  const char *chosen = std::getenv("AMPC_NCCL_LIBRARY");
  if (chosen && *chosen) {
    DynamicLibrary library = DynamicLibrary::openFirst({chosen});
    if (!library)
      throw NcclError(std::string("AMPC_NCCL_LIBRARY names ") + chosen +
                      ", which cannot be opened as NCCL; unset it to use libnccl.so.2");
  }
  std::vector<std::string> candidates = {"libnccl.so.2", "libnccl.so"};
  if (chosen && *chosen)
    candidates = {chosen};
  DynamicLibrary library = DynamicLibrary::openFirst(candidates);
  if (!library)
    throw NcclError("data parallel training on GPUs needs NCCL, and libnccl.so.2 cannot be "
                    "opened: install NCCL (it ships with the CUDA toolkit and with PyTorch) and "
                    "put its directory on LD_LIBRARY_PATH, or set AMPC_NCCL_LIBRARY to the file");
  NcclApi api;
  api.library = library.name();
#define AMPC_NCCL_RESOLVE(entry)                                                                   \
  if (!library.resolve(api.entry, #entry))                                                         \
    throw NcclError(library.name() + " has no " #entry ": NCCL 2.12 or newer is needed");
  AMPC_NCCL_ENTRY_POINTS(AMPC_NCCL_RESOLVE)
#undef AMPC_NCCL_RESOLVE
  api.ncclGetVersion(&api.version);
  library.release(); // kept for the life of the process
  return api;
}

} // namespace

const NcclApi &ncclApi() {
  // Loaded once; a failure is remembered and thrown again on each call.
  static const std::pair<NcclApi, std::string> loaded = []() -> std::pair<NcclApi, std::string> {
    try {
      return {loadNcclApi(), ""};
    } catch (const NcclError &error) {
      return {NcclApi(), error.what()};
    }
  }();
  if (!loaded.second.empty())
    throw NcclError(loaded.second);
  return loaded.first;
}

NcclId NcclWorld::newId(const NcclApi &api) {
  ncclUniqueId id;
  const ncclResult_t result = api.ncclGetUniqueId(&id);
  if (result != ncclSuccess)
    throw NcclError(std::string("ncclGetUniqueId failed: ") + api.ncclGetErrorString(result));
  NcclId bytes;
  std::copy(id.internal, id.internal + NCCL_UNIQUE_ID_BYTES, bytes.begin());
  return bytes;
}

NcclWorld::NcclWorld(const NcclApi &api, const NcclId &id, int rank, int ranks)
    : nccl(&api), me(rank), count(ranks) {
  ncclUniqueId unique;
  std::copy(id.begin(), id.end(), unique.internal);
  check(nccl->ncclCommInitRank(&comm, ranks, unique, rank), "ncclCommInitRank");
}

NcclWorld::~NcclWorld() {
  if (comm)
    nccl->ncclCommDestroy(comm);
}

void NcclWorld::check(ncclResult_t result, const char *call) {
  if (result == ncclSuccess || result == ncclInProgress)
    return;
  throw NcclError(std::string(call) + " failed on rank " + std::to_string(me) + " of " +
                  std::to_string(count) + ": " + nccl->ncclGetErrorString(result));
}

void NcclWorld::allReduceSum(CUdeviceptr buffer, size_t elements, CUstream stream) {
  void *data = reinterpret_cast<void *>(buffer);
  check(nccl->ncclAllReduce(data, data, elements, ncclFloat32, ncclSum, comm,
                            reinterpret_cast<cudaStream_t>(stream)),
        "ncclAllReduce");
}

void NcclWorld::allReduceMax(CUdeviceptr buffer, size_t elements, CUstream stream) {
  void *data = reinterpret_cast<void *>(buffer);
  check(nccl->ncclAllReduce(data, data, elements, ncclFloat32, ncclMax, comm,
                            reinterpret_cast<cudaStream_t>(stream)),
        "ncclAllReduce");
}

void NcclWorld::groupStart() { check(nccl->ncclGroupStart(), "ncclGroupStart"); }
void NcclWorld::groupEnd() { check(nccl->ncclGroupEnd(), "ncclGroupEnd"); }

void NcclWorld::checkAsyncError() {
  ncclResult_t state = ncclSuccess;
  check(nccl->ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError");
  check(state, "an NCCL collective");
}

void NcclWorld::abort() {
  if (comm)
    nccl->ncclCommAbort(comm);
  comm = nullptr;
}

} // namespace ampc::cuda
