//===- DynamicLibrary.cpp - A shared library opened with dlopen -----------===//

#include "runtime/cuda/DynamicLibrary.h"

#include <dlfcn.h>

#include <utility>

namespace ampc::cuda {

DynamicLibrary::~DynamicLibrary() {
  if (handle_)
    dlclose(handle_);
}

DynamicLibrary::DynamicLibrary(DynamicLibrary &&other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), name_(std::move(other.name_)) {}

DynamicLibrary &DynamicLibrary::operator=(DynamicLibrary &&other) noexcept {
  if (this != &other) {
    if (handle_)
      dlclose(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    name_ = std::move(other.name_);
  }
  return *this;
}

DynamicLibrary DynamicLibrary::openFirst(const std::vector<std::string> &candidates) {
  DynamicLibrary library;
  for (const std::string &name : candidates) {
    library.handle_ = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library.handle_) {
      library.name_ = name;
      break;
    }
  }
  return library;
}

void *DynamicLibrary::release() { return std::exchange(handle_, nullptr); }

void *DynamicLibrary::lookup(const char *symbol) const { return dlsym(handle_, symbol); }

} // namespace ampc::cuda
