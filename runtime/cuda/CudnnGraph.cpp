//===- CudnnGraph.cpp - cuDNN's backend graph API, opened at run time -----===//

#include "runtime/cuda/CudnnGraph.h"

#if AMPC_HAVE_CUDNN_HEADERS

#include "runtime/cuda/CudnnAttention.h"
#include "runtime/support/DynamicLibrary.h"

#include <cstdlib>
#include <mutex>

#define AMPC_CUDNN_STRINGIFY_EXPANDED(x) #x
#define AMPC_CUDNN_STRINGIFY(x) AMPC_CUDNN_STRINGIFY_EXPANDED(x)

#ifndef AMPC_CUDA_LIBRARY_DIR
#define AMPC_CUDA_LIBRARY_DIR ""
#endif

namespace ampc::cuda::cudnn {

//===----------------------------------------------------------------------===//
// Loading
//===----------------------------------------------------------------------===//

namespace {

/// $AMPC_CUDNN_LIBRARY when set, then the usual names: unlike the other libraries, a file the
/// variable names that does not open falls back to them (cuDNN is optional: without it the
/// attention runs our kernels).
LibrarySearch cudnnLibrarySearch() {
  LibrarySearch search;
  search.what = "cuDNN";
  search.variable = "AMPC_CUDNN_LIBRARY";
  search.advice = "install cuDNN 9 or add its directory to LD_LIBRARY_PATH";
  if (const char *library = std::getenv(search.variable.c_str()))
    if (*library)
      search.names.push_back(library);
  search.names.push_back("libcudnn.so.9");
  search.names.push_back("libcudnn.so");
  // The toolkit's lib64 (where a CUDA install may put cuDNN) is not on the loader's default
  // path; a PyTorch wheel's copy is reached through AMPC_CUDNN_LIBRARY or LD_LIBRARY_PATH.
  const std::string toolkitDir = AMPC_CUDA_LIBRARY_DIR;
  if (!toolkitDir.empty())
    search.names.push_back(toolkitDir + "/libcudnn.so.9");
  return search;
}

/// Opens cuDNN into \p api; throws CudaError(Cudnn) and leaves nothing open on failure.
void loadInto(CudnnApi &api) {
  const LibrarySearch search = cudnnLibrarySearch();
  DynamicLibrary library = DynamicLibrary::openFirst(search.names, search.scope);
  if (!library)
    throw CudaError(CudaErrorKind::Cudnn, search.notFoundMessage());
  api.library = library.name();
  SymbolResolver resolve(library);
#define AMPC_CUDNN_RESOLVE(name) resolve(api.name, AMPC_CUDNN_STRINGIFY(name));
  AMPC_CUDNN_ENTRY_POINTS(AMPC_CUDNN_RESOLVE)
#undef AMPC_CUDNN_RESOLVE
  if (!resolve.missing().empty())
    throw CudaError(CudaErrorKind::Cudnn, resolve.missingMessage("cuDNN 9 is needed"));
  // Optional: without it a failure names only the status.
  library.resolve(api.cudnnGetLastErrorString, "cudnnGetLastErrorString");
  api.version = api.cudnnGetVersion();
  if (api.version / 10000 != 9)
    throw CudaError(CudaErrorKind::Cudnn, api.library + " is cuDNN " +
                                              formatCudnnVersion(api.version) +
                                              ", but ampc's cuDNN graphs need cuDNN 9.x");
  library.release();
}

} // namespace

const CudnnApi &cudnnApi() {
  static std::once_flag once;
  static CudnnApi api;
  static bool loaded = false;
  static std::string failure;
  std::call_once(once, [] {
    try {
      loadInto(api);
      loaded = true;
    } catch (const CudaError &error) {
      failure = error.what();
    }
  });
  if (!loaded)
    throw CudaError(CudaErrorKind::Cudnn, failure);
  return api;
}

//===----------------------------------------------------------------------===//
// Descriptors, graphs and plans
//===----------------------------------------------------------------------===//

void setAttribute(const CudnnApi &api, cudnnBackendDescriptor_t descriptor,
                  cudnnBackendAttributeName_t name, const char *nameText,
                  cudnnBackendAttributeType_t type, int64_t count, const void *values,
                  const char *doing) {
  const cudnnStatus_t status = api.cudnnBackendSetAttribute(descriptor, name, type, count, values);
  if (status != CUDNN_STATUS_SUCCESS)
    throw CudaError(CudaErrorKind::Cudnn,
                    api.failure(status,
                                ("cudnnBackendSetAttribute(" + std::string(nameText) + ")").c_str(),
                                doing),
                    status);
}

void GraphBuilder::finish(cudnnHandle_t handle, cudnnBackendDescriptor_t deviceProp) {
  cudnnBackendDescriptor_t opGraph = create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  set(opGraph, AMPC_CUDNN_ATTR(CUDNN_ATTR_OPERATIONGRAPH_OPS), CUDNN_TYPE_BACKEND_DESCRIPTOR,
      static_cast<int64_t>(operations.size()), operations.data());
  if (handle)
    set(opGraph, AMPC_CUDNN_ATTR(CUDNN_ATTR_OPERATIONGRAPH_HANDLE), CUDNN_TYPE_HANDLE, 1, &handle);
  finalize(opGraph, "the operation graph");

  // Why the last candidate failed, for the message when none succeeds.
  std::string lastFailure = "the heuristics offered no engine configuration";
  int lastStatus = 0;
  int64_t tried = 0;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    Descriptor heuristics(api, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, doing);
    set(heuristics.get(), AMPC_CUDNN_ATTR(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH),
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &opGraph);
    set(heuristics.get(), AMPC_CUDNN_ATTR(CUDNN_ATTR_ENGINEHEUR_MODE), CUDNN_TYPE_HEUR_MODE, 1,
        &mode);
    if (deviceProp)
      set(heuristics.get(), AMPC_CUDNN_ATTR(CUDNN_ATTR_ENGINEHEUR_DEVICEPROP),
          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &deviceProp);
    cudnnStatus_t status = api.cudnnBackendFinalize(heuristics.get());
    if (status != CUDNN_STATUS_SUCCESS) {
      lastFailure = api.failure(status, "cudnnBackendFinalize(engine heuristics)", doing);
      lastStatus = status;
      continue;
    }
    int64_t count = 0;
    api.check(api.cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                           CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
              "cudnnBackendGetAttribute(CUDNN_ATTR_ENGINEHEUR_RESULTS)", doing);
    // The heuristics fill descriptors we create.
    std::vector<Descriptor> configs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; ++i) {
      configs.emplace_back(api, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, doing);
      raw.push_back(configs.back().get());
    }
    if (count > 0)
      api.check(api.cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                             CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count,
                                             raw.data()),
                "cudnnBackendGetAttribute(CUDNN_ATTR_ENGINEHEUR_RESULTS)", doing);
    for (int64_t i = 0; i < count && i < static_cast<int64_t>(configs.size()); ++i) {
      ++tried;
      Descriptor plan(api, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, doing);
      if (handle)
        set(plan.get(), AMPC_CUDNN_ATTR(CUDNN_ATTR_EXECUTION_PLAN_HANDLE), CUDNN_TYPE_HANDLE, 1,
            &handle);
      else
        set(plan.get(), AMPC_CUDNN_ATTR(CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP),
            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &deviceProp);
      set(plan.get(), AMPC_CUDNN_ATTR(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG),
          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw[i]);
      // Finalizing compiles the engine's kernels; an engine that cannot run this graph on
      // this GPU says so here, and the next candidate is tried.
      status = api.cudnnBackendFinalize(plan.get());
      if (status != CUDNN_STATUS_SUCCESS) {
        lastFailure = api.failure(status, "cudnnBackendFinalize(execution plan)", doing);
        lastStatus = status;
        continue;
      }
      int64_t returned = 0;
      api.check(api.cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                             CUDNN_TYPE_INT64, 1, &returned, &graph.workspaceBytes),
                "cudnnBackendGetAttribute(CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE)", doing);
      // The engine's index only labels description(); a failure to read it is not an error.
      Descriptor engine(api, CUDNN_BACKEND_ENGINE_DESCRIPTOR, doing);
      cudnnBackendDescriptor_t engineRaw = engine.get();
      int64_t index = -1;
      if (api.cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_ENGINECFG_ENGINE,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &returned,
                                       &engineRaw) == CUDNN_STATUS_SUCCESS &&
          api.cudnnBackendGetAttribute(engineRaw, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64,
                                       1, &returned, &index) == CUDNN_STATUS_SUCCESS)
        graph.engineIndex = index;
      // The plan refers to its configuration and the configuration to the graph: keep them
      // all (the heuristics too) until the graph is cleared.
      graph.descriptors.push_back(std::move(heuristics));
      for (Descriptor &config : configs)
        graph.descriptors.push_back(std::move(config));
      graph.descriptors.push_back(std::move(engine));
      graph.descriptors.push_back(std::move(plan));
      graph.plan = graph.descriptors.back().get();
      return;
    }
  }
  throw CudaError(CudaErrorKind::Cudnn,
                  std::string("no cuDNN engine found while ") + doing + " (" +
                      std::to_string(tried) + " engine configurations tried); last: " +
                      lastFailure,
                  lastStatus);
}

Descriptor describeDevice(const CudnnApi &api, const std::string &deviceJson) {
  // A release without device descriptions rejects the descriptor type or its attribute.
  const char *doing = "describing a GPU to cuDNN";
  Descriptor device(api, CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, doing);
  setAttribute(api, device.get(), AMPC_CUDNN_ATTR(CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION),
               CUDNN_TYPE_CHAR, static_cast<int64_t>(deviceJson.size()), deviceJson.data(), doing);
  api.check(api.cudnnBackendFinalize(device.get()), "cudnnBackendFinalize(device)", doing);
  return device;
}

ProbeDevice openProbeDevice(const std::string &deviceJson) {
  ProbeDevice probe;
  try {
    probe.api = &cudnnApi();
    probe.device.emplace(describeDevice(*probe.api, deviceJson));
  } catch (const CudaError &error) {
    probe.unavailable = error.what();
    probe.device.reset();
  }
  return probe;
}

void execute(const CudnnApi &api, cudnnHandle_t handle, const BuiltGraph &graph,
             const int64_t *uids, void *const *pointers, int64_t count, void *workspace,
             const char *doing) {
  // A variant pack is cheap host-side state: made per call, so forward() and backward() may
  // take new pointers every time (and be captured into a CUDA graph).
  Descriptor pack(api, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, doing);
  setAttribute(api, pack.get(), AMPC_CUDNN_ATTR(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS),
               CUDNN_TYPE_INT64, count, uids, doing);
  setAttribute(api, pack.get(), AMPC_CUDNN_ATTR(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS),
               CUDNN_TYPE_VOID_PTR, count, pointers, doing);
  setAttribute(api, pack.get(), AMPC_CUDNN_ATTR(CUDNN_ATTR_VARIANT_PACK_WORKSPACE),
               CUDNN_TYPE_VOID_PTR, 1, &workspace, doing);
  api.check(api.cudnnBackendFinalize(pack.get()), "cudnnBackendFinalize(variant pack)", doing);
  api.check(api.cudnnBackendExecute(handle, graph.plan, pack.get()), "cudnnBackendExecute", doing);
}

} // namespace ampc::cuda::cudnn

#endif // AMPC_HAVE_CUDNN_HEADERS
