//===- DynamicLibrary.cpp - Libraries opened at run time ------------------===//

#include "runtime/support/DynamicLibrary.h"

#include <dlfcn.h>

#include <cstdlib>
#include <utility>

namespace ampc {

namespace {

/// \p items joined with ", ".
std::string joined(const std::vector<std::string> &items) {
  std::string text;
  for (const std::string &item : items)
    text += (text.empty() ? "" : ", ") + item;
  return text;
}

} // namespace

//===----------------------------------------------------------------------===//
// LibrarySearch
//===----------------------------------------------------------------------===//

void LibrarySearch::applyVariable() {
  const char *file = variable.empty() ? nullptr : std::getenv(variable.c_str());
  if (!file || !*file)
    return;
  names = {file};
  namedByVariable = true;
}

std::vector<std::string> LibrarySearch::candidates() const {
  std::vector<std::string> tried;
  for (const std::string &name : names)
    if (!name.empty())
      tried.push_back(name);
  return tried;
}

std::string LibrarySearch::notFoundMessage() const {
  const std::vector<std::string> tried = candidates();
  std::string message = "no " + what + " found (" +
                        (tried.empty() ? "no file names to try" : "tried " + joined(tried));
  if (namedByVariable)
    return message + ", named by " + variable + "): correct " + variable + " or unset it";
  if (!variable.empty())
    message += "; set " + variable + " to the file to use";
  message += ")";
  return advice.empty() ? message : message + ": " + advice;
}

//===----------------------------------------------------------------------===//
// DynamicLibrary
//===----------------------------------------------------------------------===//

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

DynamicLibrary DynamicLibrary::openFirst(const std::vector<std::string> &candidates,
                                         SymbolScope scope) {
  const int flags = RTLD_NOW | (scope == SymbolScope::Global ? RTLD_GLOBAL : RTLD_LOCAL);
  DynamicLibrary library;
  for (const std::string &name : candidates) {
    if (name.empty())
      continue;
    library.handle_ = dlopen(name.c_str(), flags);
    if (library.handle_) {
      library.name_ = name;
      break;
    }
  }
  return library;
}

DynamicLibrary DynamicLibrary::open(const LibrarySearch &search) {
  DynamicLibrary library = openFirst(search.names, search.scope);
  if (!library)
    throw LibraryError(search.notFoundMessage());
  return library;
}

void *DynamicLibrary::release() { return std::exchange(handle_, nullptr); }

void *DynamicLibrary::lookup(const char *symbol) const {
  return handle_ ? dlsym(handle_, symbol) : nullptr;
}

//===----------------------------------------------------------------------===//
// SymbolResolver
//===----------------------------------------------------------------------===//

std::string SymbolResolver::missingMessage(const std::string &needed) const {
  if (missing_.empty())
    return "";
  return library_.name() + " has no " + joined(missing_) + (needed.empty() ? "" : ": " + needed);
}

void SymbolResolver::check(const std::string &needed) const {
  if (!missing_.empty())
    throw LibraryError(missingMessage(needed));
}

} // namespace ampc
