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
  auto resolve = [&](auto &entry, const char *symbol) {
    if (!library.resolve(entry, symbol))
      throw NcclError(library.name() + " has no " + symbol + ": NCCL 2.12 or newer is needed");
  };
  resolve(api.ncclGetVersion, "ncclGetVersion");
  resolve(api.ncclGetUniqueId, "ncclGetUniqueId");
  resolve(api.ncclCommInitRank, "ncclCommInitRank");
  resolve(api.ncclCommDestroy, "ncclCommDestroy");
  resolve(api.ncclCommAbort, "ncclCommAbort");
  resolve(api.ncclCommGetAsyncError, "ncclCommGetAsyncError");
  resolve(api.ncclGetErrorString, "ncclGetErrorString");
  resolve(api.ncclAllReduce, "ncclAllReduce");
  resolve(api.ncclGroupStart, "ncclGroupStart");
  resolve(api.ncclGroupEnd, "ncclGroupEnd");
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
  nccl::UniqueId id;
  const nccl::Result result = api.ncclGetUniqueId(&id);
  if (result != nccl::Success)
    throw NcclError(std::string("ncclGetUniqueId failed: ") + api.ncclGetErrorString(result));
  NcclId bytes;
  std::copy(id.internal, id.internal + nccl::kUniqueIdBytes, bytes.begin());
  return bytes;
}

NcclWorld::NcclWorld(const NcclApi &api, const NcclId &id, int rank, int ranks)
    : api_(&api), me(rank), count(ranks) {
  nccl::UniqueId unique;
  std::copy(id.begin(), id.end(), unique.internal);
  check(api_->ncclCommInitRank(&comm, ranks, unique, rank), "ncclCommInitRank");
}

NcclWorld::~NcclWorld() {
  if (comm)
    api_->ncclCommDestroy(comm);
}

void NcclWorld::check(nccl::Result result, const char *call) {
  if (result == nccl::Success || result == nccl::InProgress)
    return;
  throw NcclError(std::string(call) + " failed on rank " + std::to_string(me) + " of " +
                  std::to_string(count) + ": " + api_->ncclGetErrorString(result));
}

void NcclWorld::allReduceSum(CUdeviceptr buffer, size_t elements, CUstream stream) {
  void *data = reinterpret_cast<void *>(buffer);
  check(api_->ncclAllReduce(data, data, elements, nccl::Float32, nccl::Sum, comm, stream),
        "ncclAllReduce");
}

void NcclWorld::allReduceMax(CUdeviceptr buffer, size_t elements, CUstream stream) {
  void *data = reinterpret_cast<void *>(buffer);
  check(api_->ncclAllReduce(data, data, elements, nccl::Float32, nccl::Max, comm, stream),
        "ncclAllReduce");
}

void NcclWorld::groupStart() { check(api_->ncclGroupStart(), "ncclGroupStart"); }
void NcclWorld::groupEnd() { check(api_->ncclGroupEnd(), "ncclGroupEnd"); }

void NcclWorld::checkAsyncError() {
  nccl::Result state = nccl::Success;
  check(api_->ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError");
  check(state, "an NCCL collective");
}

void NcclWorld::abort() {
  if (comm)
    api_->ncclCommAbort(comm);
  comm = nullptr;
}

} // namespace ampc::cuda
