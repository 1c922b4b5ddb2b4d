//===- DeviceCode.cpp - compile the device program's kernels into the plan ----===//
//
// A pool of std::threads takes (module, target) jobs, longest first (the flash-attention
// modules), so two cores stay busy until the end. Each job first looks in the kernel cache; a
// binary compiled now is written there through a temporary file and a rename, so concurrent
// ampc processes never see half a file.
//
//===--------------------------------------------------------------------------===//

#include "compiler/cuda/DeviceCode.h"
#include "compiler/cuda/CudaCodegen.h"
#include "compiler/support/Format.h"

#if AMPC_HAVE_CUDA
#include "runtime/cuda/Nvrtc.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/SHA256.h"
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>
#include <unistd.h>

namespace ampc {
#if AMPC_HAVE_CUDA
namespace {

namespace fs = std::filesystem;

/// The three binaries of every module.
enum class Target { Sm80, Sm90, Ptx };
/// NVRTC's name of a target: the two cubin architectures, and PTX that newer GPUs JIT-compile.
const char *targetName(Target target) {
  return target == Target::Sm80 ? "sm_80" : target == Target::Sm90 ? "sm_90" : "compute_90";
}

/// SHA-256 of \p parts, each prefixed with its length (so no two lists hash alike), in hex: the
/// kernel cache's keys, where a collision would load another kernel's binary.
std::string digest(std::initializer_list<llvm::StringRef> parts) {
  llvm::SHA256 hasher;
  for (llvm::StringRef part : parts) {
    hasher.update(std::to_string(part.size()) + ":");
    hasher.update(part);
  }
  return llvm::toHex(hasher.final(), /*LowerCase=*/true);
}

/// The bytes of \p path (empty when it cannot be read).
std::string readFile(const fs::path &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// The repository root the generated sources include runtime headers from.
std::string repositoryRoot() {
  for (const std::string &option : generatedKernelIncludeOptions())
    if (option.rfind("-I", 0) == 0)
      return option.substr(2);
  return ".";
}

/// A digest of every header a kernel may include (the device support code and the numerics), so
/// a cached binary is never reused after one of them changed.
std::string headersDigest() {
  std::vector<fs::path> files;
  for (const char *dir : {"runtime/cuda/device", "runtime/numerics"}) {
    std::error_code error;
    for (const auto &entry : fs::directory_iterator(fs::path(repositoryRoot()) / dir, error))
      if (entry.is_regular_file())
        files.push_back(entry.path());
  }
  // Sorted, so the digest does not depend on the directory's enumeration order.
  std::sort(files.begin(), files.end());
  std::string hash = digest({"ampc kernel headers"});
  for (const fs::path &file : files)
    hash = digest({hash, file.filename().string(), readFile(file)});
  return hash;
}

/// The cache directory, or empty when caching is off.
fs::path cacheDirectory() {
  // $AMPC_KERNEL_CACHE wins ("off" or "0" disables the cache), then the XDG cache directory,
  // then ~/.cache; without a home there is no cache.
  if (const char *setting = std::getenv("AMPC_KERNEL_CACHE")) {
    std::string value = setting;
    if (value == "off" || value == "0")
      return {};
    if (!value.empty())
      return value;
  }
  if (const char *xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return fs::path(xdg) / "ampc" / "kernels";
  if (const char *home = std::getenv("HOME"); home && *home)
    return fs::path(home) / ".cache" / "ampc" / "kernels";
  return {};
}

/// Writes \p bytes to \p path through a temporary file and a rename; failures are ignored (the
/// cache is only an optimisation).
void storeInCache(const fs::path &path, const std::string &bytes) {
  std::error_code error;
  fs::create_directories(path.parent_path(), error);
  // The temporary's name is unique per process and thread, so concurrent writers of the same
  // entry never share a file; rename is atomic and the last writer's (identical) binary wins.
  const fs::path temporary =
      path.string() + ".tmp" + std::to_string(::getpid()) + "." +
      std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()));
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out)
      return;
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      fs::remove(temporary, error);
      return;
    }
  }
  fs::rename(temporary, path, error);
  if (error)
    fs::remove(temporary, error);
}

} // namespace
#endif

bool deviceCompilerAvailable() { return AMPC_HAVE_CUDA != 0; }

namespace {

/// The first line of \p message and, for a compiler log, its first "error:" line.
std::string firstLines(const std::string &message) {
  std::string first = message.substr(0, message.find('\n'));
  const size_t error = message.find("error:", first.size());
  if (error != std::string::npos) {
    const size_t begin = message.rfind('\n', error) + 1;
    first += " " + message.substr(begin, message.find('\n', error) - begin);
  }
  return first;
}

} // namespace

/// Every module is compiled for the three targets; a job whose (environment, target, source)
/// digest is in the cache is read from there instead of compiled. The first failure is
/// reported once every thread has stopped.
DeviceCompileStats compileDeviceModules(DeviceProgramSources &sources, unsigned threads) {
#if !AMPC_HAVE_CUDA
  (void)sources;
  (void)threads;
  throw std::runtime_error("this ampc was built without the CUDA toolkit: it cannot compile "
                           "kernels");
#else
  const auto start = std::chrono::steady_clock::now();
  DeviceCompileStats stats;
  std::vector<plan::DeviceModule> &modules = sources.program.modules;
  stats.modules = modules.size();
  std::vector<std::string> options = cuda::cudaIncludeOptions();
  for (const std::string &option : generatedKernelIncludeOptions())
    options.push_back(option);
  const fs::path cache = cacheDirectory();
  // A cached binary is valid only for the same NVRTC, the same included headers and the same
  // options: all three go into the key with the source and the target.
  std::string environment = digest({cuda::nvrtcVersion(), headersDigest()});
  for (const std::string &option : options)
    environment = digest({environment, option});

  struct Job {
    size_t module;
    Target target;
  };
  std::vector<Job> jobs;
  for (size_t m = 0; m < modules.size(); ++m)
    for (Target target : {Target::Sm80, Target::Sm90, Target::Ptx})
      jobs.push_back({m, target});
  // Longest first: the flash-attention modules take seconds, generated kernels a fraction.
  std::stable_sort(jobs.begin(), jobs.end(), [&](const Job &a, const Job &b) {
    return sources.moduleSources[a.module].size() > sources.moduleSources[b.module].size();
  });

  // Work sharing by an atomic cursor over the sorted jobs: each thread takes the next job until
  // none is left. A failed job records the first error and the thread goes on, so the pool
  // always drains.
  std::atomic<size_t> next{0}, compiled{0}, cached{0};
  std::mutex failureMutex;
  std::string failure;
  auto work = [&] {
    for (size_t i; (i = next++) < jobs.size();) {
      const Job &job = jobs[i];
      const std::string &source = sources.moduleSources[job.module];
      plan::DeviceModule &module = modules[job.module];
      const std::string target = targetName(job.target);
      std::string binary;
      fs::path entry;
      if (!cache.empty()) {
        entry = cache / (digest({environment, target, source}) +
                         (job.target == Target::Ptx ? ".ptx" : ".cubin"));
        std::error_code error;
        if (fs::is_regular_file(entry, error)) {
          binary = readFile(entry);
          ++cached;
        }
      }
      if (binary.empty()) {
        try {
          if (job.target == Target::Ptx) {
            binary = cuda::compileToPtx(source, module.name + ".cu", target, options);
          } else {
            std::vector<char> cubin =
                cuda::compileToCubin(source, module.name + ".cu", target, options);
            binary.assign(cubin.begin(), cubin.end());
          }
        } catch (const std::exception &error) {
          std::lock_guard<std::mutex> lock(failureMutex);
          if (failure.empty())
            failure = error.what();
          continue;
        }
        ++compiled;
        if (!entry.empty())
          storeInCache(entry, binary);
      }
      // Each job fills its own field of its own module: no two threads write one object.
      if (job.target == Target::Ptx)
        module.ptx = std::move(binary);
      else
        (job.target == Target::Sm80 ? module.cubinSm80 : module.cubinSm90)
            .assign(binary.begin(), binary.end());
    }
  };
  // Default: one thread per core, at most 8, and never more threads than jobs.
  // The calling thread works too, so `threads - 1` are started.
  if (threads == 0)
    threads = std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
  threads = static_cast<unsigned>(std::min<size_t>(threads, std::max<size_t>(jobs.size(), 1)));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t)
    pool.emplace_back(work);
  work();
  for (std::thread &thread : pool)
    thread.join();
  if (!failure.empty())
    throw std::runtime_error("compiling the device program's kernels failed: " + failure);
  stats.compiled = compiled;
  stats.cached = cached;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
#endif
}

/// Builds, compiles and validates the device program and stores it in \p plan, or leaves the
/// plan without one (CPU only) and says why in the summary; never fails the compilation.
DeviceCodeResult attachDeviceProgram(graph::ModelOp model, plan::Plan &plan,
                                     const PlanProvenance &provenance) {
  DeviceCodeResult result;
  if (!deviceCompilerAvailable()) {
    result.summary = "gpu: none (this ampc was built without the CUDA toolkit; the plan runs on "
                     "the CPU only)";
    return result;
  }
  // Whatever keeps the plan from having GPU code leaves it with none and a warning: the plan
  // still trains on the CPU.
  auto without = [&](const std::string &reason) {
    plan.device = plan::DeviceProgram();
    result.unsupported = true;
    result.summary = "no GPU code in the plan: " + reason;
    return result;
  };
  DeviceProgramSources sources;
  DeviceCompileStats stats;
  try {
    sources = buildDeviceProgram(model, plan, provenance);
  } catch (const DeviceProgramUnsupported &error) {
    return without(error.what());
  } catch (const std::exception &error) {
    return without(std::string("internal error: ") + firstLines(error.what()));
  }
  try {
    stats = compileDeviceModules(sources);
  } catch (const std::exception &error) {
    return without(std::string("internal error: ") + firstLines(error.what()));
  }
  plan.device = std::move(sources.program);
  try {
    plan::validatePlan(plan);
  } catch (const plan::PlanError &error) {
    return without(std::string("internal error: the device program is invalid: ") + error.what());
  }
  // The summary's figures: binary size over all modules and targets, and the device step count.
  size_t bytes = 0;
  for (const plan::DeviceModule &module : plan.device.modules)
    bytes += module.cubinSm80.size() + module.cubinSm90.size() + module.ptx.size();
  size_t steps = 0;
  for (const plan::DeviceFunction *function : {&plan.device.microStep, &plan.device.optimizerStep})
    for (const plan::DeviceGroup &group : function->groups)
      steps += group.steps.size();
  char text[256];
  std::snprintf(text, sizeof text,
                "gpu: %zu device steps, %zu kernels in %zu modules (sm_80, sm_90, compute_90; "
                "%.1f MB), compiled in %.1f s (%zu of %zu binaries from the kernel cache)",
                steps, plan.device.kernels.size(), plan.device.modules.size(), bytes / 1e6,
                stats.seconds, stats.cached, stats.modules * 3);
  result.summary = text;
  // The arenas are graph-plan-memory's, as `ampc report memory` prints them.
  result.summary +=
      "\ngpu memory: micro_step arena " +
      formatBytes(static_cast<int64_t>(plan.device.microStep.arenaBytes)) +
      ", optimizer_step arena " +
      formatBytes(static_cast<int64_t>(plan.device.optimizerStep.arenaBytes)) + ", scratch " +
      formatBytes(static_cast<int64_t>(
          std::max(plan.device.microStep.scratchBytes, plan.device.optimizerStep.scratchBytes)));
  return result;
}

} // namespace ampc
