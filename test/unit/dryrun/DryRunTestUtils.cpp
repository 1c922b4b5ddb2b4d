//===- DryRunTestUtils.cpp - Models run over the recording driver ---------===//

#include "DryRunTestUtils.h"
#include "DryRunChecker.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <stdexcept>

namespace ampc::dryrun {

namespace {

std::string quoted(const std::string &text) { return "'" + text + "'"; }

} // namespace

std::string configName(const ModelConfig &config) {
  const std::string model = config.model.substr(config.model.find('/') + 1);
  return model + "_" + config.precision + (config.budget ? "_budget" : "");
}

void PrintTo(const ModelConfig &config, std::ostream *out) { *out << configName(config); }

const char *recordingLibrary() { return AMPC_RECORDING_LIBRARY; }

test::CommandResult compileModel(const ModelConfig &config, const std::string &path,
                                 std::string &budget) {
  const std::string command =
      "AMPC_KERNEL_CACHE=" + quoted(AMPC_DRYRUN_KERNEL_CACHE) + " " + quoted(AMPC_COMPILER_PATH) +
      " compile " + quoted(std::string(AMPC_SOURCE_DIR) + "/examples/" + config.model + ".mlir") +
      " -o " + quoted(path) + " --precision " + config.precision + " --accum-steps " +
      std::to_string(kAccumulationSteps);
  budget = config.budget ? "50%" : "";
  test::CommandResult result;
  // At most: 50%; the peak without recomputation is too close to the
  // persistent floor, so 99%; the smallest budget ampc reports it can meet.
  for (int attempt = 0; attempt < 3; ++attempt) {
    result = test::runCommand(command + (budget.empty() ? "" : " --memory-budget " + budget));
    if (result.status == 0 || budget.empty())
      return result;
    std::smatch smallest;
    if (std::regex_search(result.output, smallest,
                          std::regex("smallest budget that can be met is "
                                     "([0-9]+) bytes")))
      budget = smallest[1];
    else if (result.output.find("which no recomputation reduces") != std::string::npos)
      budget = "99%";
    else
      return result;
  }
  return result;
}

test::CommandResult runOverRecordingDriver(const std::string &path, const std::string &tracePath,
                                           const std::string &logPath,
                                           const std::string &extraArguments) {
  const std::string library = quoted(recordingLibrary());
  return test::runCommand(
      "AMPC_CUDA_DRIVER_LIBRARY=" + library + " AMPC_CUBLASLT_LIBRARY=" + library +
      " AMPC_RECORDING_TRACE=" + quoted(tracePath) + " " + quoted(path) + " --steps " +
      std::to_string(kOptimizerSteps) + " --device cuda --seed 0 --quiet --log " + quoted(logPath) +
      (extraArguments.empty() ? "" : " " + extraArguments));
}

std::vector<Event> readTraceFile(const std::string &path) {
  std::ifstream in(path);
  if (!in) {
    ADD_FAILURE() << "no trace at " << path;
    return {};
  }
  try {
    return parseTrace(in);
  } catch (const std::exception &error) {
    ADD_FAILURE() << error.what();
  }
  return {};
}

LoopTraffic loopTraffic(const std::vector<Event> &trace) {
  size_t firstLaunch = trace.size();
  for (size_t i = 0; i < trace.size(); ++i)
    if ((trace[i].kind == EventKind::Launch || trace[i].kind == EventKind::Matmul) &&
        trace[i].origin == Origin::Eager && !isTimedMatmul(trace[i])) {
      firstLaunch = i;
      break;
    }
  size_t begin = 0;
  for (size_t i = firstLaunch; i-- > 0;)
    if (trace[i].kind == EventKind::Sync) {
      begin = i + 1;
      break;
    }
  LoopTraffic traffic;
  std::map<uint64_t, uint64_t> pinned; // live pinned buffers: address -> bytes
  for (size_t i = 0; i < trace.size(); ++i) {
    const Event &event = trace[i];
    if (event.kind == EventKind::HostAlloc)
      pinned[event.address] = event.bytes;
    if (event.kind == EventKind::HostFree)
      pinned.erase(event.address);
    if (i < begin)
      continue;
    if (event.kind == EventKind::Sync) {
      ++(event.what == "event"     ? traffic.eventSyncs
         : event.what == "context" ? traffic.contextSyncs
                                   : traffic.streamSyncs);
    } else if (event.kind == EventKind::Memcpy && event.what == "htod" &&
               event.origin == Origin::Eager) {
      auto holder = pinned.upper_bound(event.source);
      const bool fromPinned =
          holder != pinned.begin() &&
          event.source + event.bytes <= std::prev(holder)->first + std::prev(holder)->second;
      if (fromPinned) {
        ++traffic.pinnedUploads;
        ++traffic.pinnedUploadsOfBytes[event.bytes];
      } else {
        ++traffic.pageableUploads;
      }
    }
  }
  return traffic;
}

const RecordingLibrary &recordingLibraryInProcess() {
  static RecordingLibrary library = [] {
    RecordingLibrary opened;
    // cuBLASLt is opened on first use, process-wide: point it here first.
    ::setenv("AMPC_CUBLASLT_LIBRARY", recordingLibrary(), 1);
    cuda::DriverLoadOptions options;
    options.libraryNames = {recordingLibrary()};
    opened.api = &cuda::loadDriverApi(options);
    // The loader keeps the library open; this only finds it.
    void *handle = dlopen(recordingLibrary(), RTLD_NOW | RTLD_NOLOAD);
    if (!handle)
      throw std::runtime_error(dlerror());
    opened.reset = reinterpret_cast<void (*)(const AmpcRecordingDevice *)>(
        dlsym(handle, "ampcRecordingReset"));
    opened.trace = reinterpret_cast<const char *(*)()>(dlsym(handle, "ampcRecordingTrace"));
    opened.h100 = reinterpret_cast<AmpcRecordingDevice (*)()>(dlsym(handle, "ampcRecordingH100"));
    opened.plant =
        reinterpret_cast<void (*)(const AmpcRecordingPlant *)>(dlsym(handle, "ampcRecordingPlant"));
    if (!opened.reset || !opened.trace || !opened.h100 || !opened.plant)
      throw std::runtime_error("the recording library lacks its entry points");
    return opened;
  }();
  return library;
}

} // namespace ampc::dryrun
