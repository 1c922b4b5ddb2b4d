//===- Nccl.cpp - NCCL, opened at run time --------------------------------===//

#include "runtime/cuda/Nccl.h"

#include <algorithm>

namespace ampc::cuda {

LibrarySearch ncclLibrarySearch() {
  LibrarySearch search;
  search.what = "NCCL";
  search.names = {"libnccl.so.2", "libnccl.so"};
  search.variable = "AMPC_NCCL_LIBRARY";
  search.advice = "data parallel training on GPUs needs it; install NCCL (it ships with the CUDA "
                  "toolkit and with PyTorch) and put its directory on LD_LIBRARY_PATH";
  search.applyVariable();
  return search;
}

NcclApi loadNcclApi(const LibrarySearch &search) {
  try {
    DynamicLibrary library = DynamicLibrary::open(search);
    NcclApi api;
    api.library = library.name();
    SymbolResolver resolve(library);
#define AMPC_NCCL_RESOLVE(name, result, parameters) resolve(api.name, #name);
    AMPC_NCCL_ENTRY_POINTS(AMPC_NCCL_RESOLVE)
#undef AMPC_NCCL_RESOLVE
    resolve.check("NCCL 2.12 or newer is needed");
    api.ncclGetVersion(&api.version);
    library.release(); // kept for the life of the process
    return api;
  } catch (const LibraryError &error) {
    throw NcclError(error.what());
  }
}

const NcclApi &ncclApi() {
  // Loaded once; a failure is remembered and thrown again on each call.
  static const std::pair<NcclApi, std::string> loaded = []() -> std::pair<NcclApi, std::string> {
    try {
      return {loadNcclApi(ncclLibrarySearch()), ""};
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
