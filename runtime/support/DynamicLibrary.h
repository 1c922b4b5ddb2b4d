//===- DynamicLibrary.h - Libraries opened at run time -----------*- C++ -*-===//
//
// The runtime opens the libraries it can run without (the CUDA driver,
// cuBLASLt, cuDNN, NCCL, MPI) with dlopen instead of linking them, so a
// training executable starts on machines that lack them. Every loader works
// the same way: a LibrarySearch lists the file names to try (or the one file
// an environment variable names), DynamicLibrary keeps the first that opens,
// and a SymbolResolver fills a table of typed function pointers from an
// X-macro list of symbols, collecting the ones that are missing. A failure
// reads the same for every library:
//
//   no NCCL found (tried libnccl.so.2, libnccl.so; set AMPC_NCCL_LIBRARY to
//     the file to use): <what to do>
//   no NCCL found (tried /x/libnccl.so.2, named by AMPC_NCCL_LIBRARY):
//     correct AMPC_NCCL_LIBRARY or unset it
//   libnccl.so.2 has no ncclCommAbort: NCCL 2.12 or newer is needed
//
// Nothing here depends on CUDA: runtime/train opens MPI with it.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_SUPPORT_DYNAMICLIBRARY_H
#define AMPC_RUNTIME_SUPPORT_DYNAMICLIBRARY_H

#include <stdexcept>
#include <string>
#include <vector>

namespace ampc {

/// Who sees a library's symbols besides its own handle.
enum class SymbolScope {
  /// RTLD_LOCAL: nobody; the library's symbols stay out of the global namespace.
  Local,
  /// RTLD_GLOBAL: libraries loaded later resolve against them too (Open MPI's
  /// plugins, mca_*.so, need libmpi's symbols this way).
  Global,
};

/// A library that cannot be opened, or that lacks symbols a loader needs.
/// what() is one line; loaders turn it into their own error type.
class LibraryError : public std::runtime_error {
public:
  using runtime_error::runtime_error;
};

/// Where a library is looked for, and what to say when it is not found.
struct LibrarySearch {
  /// What the library is, as the message names it: "no <what> found".
  std::string what;
  /// File names tried in order with dlopen; bare names go through the
  /// loader's search path (LD_LIBRARY_PATH, ld.so.cache). Empty names are
  /// skipped: dlopen("") would return the program itself.
  std::vector<std::string> names;
  /// The environment variable that names the file to use instead.
  std::string variable;
  /// Whether names holds the file \c variable names (so the fix is to correct
  /// the variable) rather than the usual names.
  bool namedByVariable = false;
  /// What to do when none of the usual names opens ("use --device cpu").
  std::string advice;
  /// How the library is opened.
  SymbolScope scope = SymbolScope::Local;

  /// Replaces names by the file $variable names when the environment sets it
  /// to something other than "", and notes that it did.
  void applyVariable();

  /// The names that are tried (names without the empty ones).
  std::vector<std::string> candidates() const;

  /// "no <what> found (tried <names>; set <variable> to the file to use):
  /// <advice>", or, when the names came from the variable, "no <what> found
  /// (tried <file>, named by <variable>): correct <variable> or unset it".
  std::string notFoundMessage() const;
};

/// One library opened with dlopen(RTLD_NOW), or none. It is closed when
/// destroyed unless release() hands the handle over to a table that lives for
/// the rest of the process, so a load that fails halfway leaves nothing open.
class DynamicLibrary {
public:
  DynamicLibrary() = default;
  ~DynamicLibrary();
  DynamicLibrary(DynamicLibrary &&other) noexcept;
  DynamicLibrary &operator=(DynamicLibrary &&other) noexcept;
  DynamicLibrary(const DynamicLibrary &) = delete;
  DynamicLibrary &operator=(const DynamicLibrary &) = delete;

  /// Opens the first of \p candidates that dlopen loads, each passed as given
  /// (empty names are skipped); an empty DynamicLibrary when none does.
  static DynamicLibrary openFirst(const std::vector<std::string> &candidates,
                                  SymbolScope scope = SymbolScope::Local);

  /// Opens the first candidate of \p search; throws
  /// LibraryError(search.notFoundMessage()) when none opens.
  static DynamicLibrary open(const LibrarySearch &search);

  explicit operator bool() const { return handle_ != nullptr; }
  /// The candidate that opened, as it was passed to dlopen.
  const std::string &name() const { return name_; }

  /// dlsym into a typed pointer (a function, or void * for a data symbol);
  /// false (and \p entry null) when the library has no such symbol.
  template <typename Pointer> bool resolve(Pointer &entry, const char *symbol) const {
    entry = reinterpret_cast<Pointer>(lookup(symbol));
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

/// Resolves the entries of a table one by one, remembering the symbols the
/// library lacks, so that one message names all of them. With an X-macro list
/// of symbols:
///
///   SymbolResolver resolve(library);
///   #define RESOLVE(name) resolve(api.name, #name);
///   ENTRY_POINTS(RESOLVE)
///   resolve.check("NCCL 2.12 or newer is needed");
class SymbolResolver {
public:
  explicit SymbolResolver(const DynamicLibrary &library) : library_(library) {}

  /// Resolves \p symbol into \p entry; a missing symbol is remembered.
  template <typename Pointer> void operator()(Pointer &entry, const char *symbol) {
    if (!library_.resolve(entry, symbol))
      missing_.push_back(symbol);
  }

  /// The symbols not found so far, in the order they were asked for.
  const std::vector<std::string> &missing() const { return missing_; }

  /// "<library> has no <symbol>, <symbol>: <needed>", or "" when every
  /// symbol was found. \p needed says what the program needs instead ("NCCL
  /// 2.12 or newer is needed").
  std::string missingMessage(const std::string &needed) const;

  /// Throws LibraryError(missingMessage(needed)) when a symbol was missing.
  void check(const std::string &needed) const;

private:
  const DynamicLibrary &library_;
  std::vector<std::string> missing_;
};

} // namespace ampc

#endif // AMPC_RUNTIME_SUPPORT_DYNAMICLIBRARY_H
