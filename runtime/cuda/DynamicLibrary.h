//===- DynamicLibrary.h - A shared library opened with dlopen -------------===//
//
// The driver, cuBLASLt, cuDNN and NCCL are opened at run time rather than
// linked (so a training binary starts on machines without them): try a list
// of candidate names in order, keep the first that loads, resolve entry
// points into typed function pointers. DynamicLibrary does that part; the
// callers keep their own checks and messages. It closes the library when destroyed
// unless release() hands the handle over to a table that lives for the rest
// of the process, so a load that fails halfway leaves nothing open.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CUDA_DYNAMICLIBRARY_H
#define AMPC_RUNTIME_CUDA_DYNAMICLIBRARY_H

#include <string>
#include <vector>

namespace ampc::cuda {

/// One library opened with dlopen(RTLD_NOW | RTLD_LOCAL), or none.
class DynamicLibrary {
public:
  DynamicLibrary() = default;
  ~DynamicLibrary();
  DynamicLibrary(DynamicLibrary &&other) noexcept;
  DynamicLibrary &operator=(DynamicLibrary &&other) noexcept;
  DynamicLibrary(const DynamicLibrary &) = delete;
  DynamicLibrary &operator=(const DynamicLibrary &) = delete;

  /// Opens the first of \p candidates that dlopen loads, each passed as
  /// given (the loader's search path applies to bare names); an empty
  /// DynamicLibrary when none does. RTLD_LOCAL keeps the library's symbols
  /// out of the global namespace.
  static DynamicLibrary openFirst(const std::vector<std::string> &candidates);

  explicit operator bool() const { return handle_ != nullptr; }
  /// The candidate that opened, as it was passed to dlopen.
  const std::string &name() const { return name_; }

  /// dlsym into a typed function pointer; false (and \p entry null) when the
  /// library has no such symbol.
  template <typename Function> bool resolve(Function &entry, const char *symbol) const {
    entry = reinterpret_cast<Function>(lookup(symbol));
    return entry != nullptr;
  }

  /// Keeps the library loaded for the life of the process: returns the
  /// dlopen handle and forgets it, so destruction no longer closes it.
  void *release();

private:
  void *lookup(const char *symbol) const;

  void *handle_ = nullptr;
  std::string name_;
};

} // namespace ampc::cuda

#endif // AMPC_RUNTIME_CUDA_DYNAMICLIBRARY_H
