//===- Nvrtc.cpp - Compile CUDA C++ to cubin or PTX with NVRTC ------------===//

#include "runtime/cuda/Nvrtc.h"

#include <nvrtc.h>

#include <sstream>

#ifndef AMPC_CUDA_INCLUDE_DIRS
#define AMPC_CUDA_INCLUDE_DIRS ""
#endif

namespace ampc::cuda {
namespace {

/// Destroys the NVRTC program on every exit path.
class Program {
public:
  Program(const std::string &source, const std::string &name) {
    nvrtcResult result =
        nvrtcCreateProgram(&handle, source.c_str(), name.c_str(), 0, nullptr, nullptr);
    if (result != NVRTC_SUCCESS)
      throw NvrtcError("NVRTC cannot create program '" + name + "': " + nvrtcGetErrorString(result),
                       "", source);
  }
  ~Program() { nvrtcDestroyProgram(&handle); }
  Program(const Program &) = delete;
  Program &operator=(const Program &) = delete;
  nvrtcProgram get() const { return handle; }

private:
  nvrtcProgram handle = nullptr;
};

/// \p source with line numbers, for error messages.
std::string numberedSource(const std::string &source) {
  std::istringstream lines(source);
  std::ostringstream out;
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number)
    out << number << ": " << line << '\n';
  return out.str();
}

/// Compiles \p program for \p arch; throws NvrtcError with the log on
/// failure.
void compile(const Program &program, const std::string &source, const std::string &name,
             const std::string &arch, const std::vector<std::string> &extraOptions) {
  std::vector<std::string> options = {"-arch=" + arch, "-std=c++17"};
  options.insert(options.end(), extraOptions.begin(), extraOptions.end());
  std::vector<const char *> pointers;
  for (const std::string &option : options)
    pointers.push_back(option.c_str());
  const nvrtcResult result =
      nvrtcCompileProgram(program.get(), static_cast<int>(pointers.size()), pointers.data());
  size_t logSize = 0;
  nvrtcGetProgramLogSize(program.get(), &logSize);
  std::string log(logSize, '\0');
  if (logSize > 0)
    nvrtcGetProgramLog(program.get(), log.data());
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n'))
    log.pop_back();
  if (result != NVRTC_SUCCESS)
    throw NvrtcError("NVRTC failed to compile '" + name + "' for " + arch + " (" +
                         nvrtcGetErrorString(result) + "):\n" + log + "\n--- source of '" + name +
                         "' ---\n" + numberedSource(source),
                     log, source);
}

} // namespace

std::vector<char> compileToCubin(const std::string &source, const std::string &name,
                                 const std::string &arch,
                                 const std::vector<std::string> &extraOptions) {
  Program program(source, name);
  compile(program, source, name, arch, extraOptions);
  size_t size = 0;
  if (nvrtcGetCUBINSize(program.get(), &size) != NVRTC_SUCCESS || size == 0)
    throw NvrtcError("NVRTC produced no cubin for '" + name + "' (is '" + arch +
                         "' a real architecture such as sm_90?)",
                     "", source);
  std::vector<char> cubin(size);
  nvrtcGetCUBIN(program.get(), cubin.data());
  return cubin;
}

std::string compileToPtx(const std::string &source, const std::string &name,
                         const std::string &arch, const std::vector<std::string> &extraOptions) {
  Program program(source, name);
  compile(program, source, name, arch, extraOptions);
  size_t size = 0;
  if (nvrtcGetPTXSize(program.get(), &size) != NVRTC_SUCCESS || size == 0)
    throw NvrtcError("NVRTC produced no PTX for '" + name + "'", "", source);
  std::string ptx(size, '\0');
  nvrtcGetPTX(program.get(), ptx.data());
  while (!ptx.empty() && ptx.back() == '\0')
    ptx.pop_back();
  return ptx;
}

std::string nvrtcVersion() {
  int major = 0, minor = 0;
  ::nvrtcVersion(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

std::vector<std::string> cudaIncludeOptions() {
  // AMPC_CUDA_INCLUDE_DIRS is CMake's list of dirs, joined with '|'.
  std::vector<std::string> options;
  std::istringstream dirs(AMPC_CUDA_INCLUDE_DIRS);
  std::string dir;
  while (std::getline(dirs, dir, '|'))
    if (!dir.empty())
      options.push_back("-I" + dir);
  return options;
}

} // namespace ampc::cuda
