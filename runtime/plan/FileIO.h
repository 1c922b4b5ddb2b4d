//===- FileIO.h - Whole-file reads and crash-safe writes ------------------===//
//
// The runtime's files that must never be left half written (checkpoints,
// exported weights) go through writeFileAtomically: a temporary file in the
// target's directory, fsync, rename over the target, fsync of the directory.
// A crash or a full disk at any instant leaves either the old file or the
// new one, never a mixture.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_PLAN_FILEIO_H
#define AMPC_RUNTIME_PLAN_FILEIO_H

#include <stdexcept>
#include <string>

namespace ampc::files {

/// A file that cannot be read or written; what() is one line:
/// "cannot read|write <what> <path>: <cause>".
class FileError : public std::runtime_error {
public:
  using runtime_error::runtime_error;
};

/// The bytes of \p path. FileError "cannot read <what> <path>: <strerror>".
std::string readWholeFile(const std::string &path, const std::string &what);

/// Writes \p bytes to \p path atomically (see above). On failure the
/// temporary file is removed, an earlier file at \p path is untouched, and
/// FileError says "cannot write <what> <path>: <step>: <strerror>".
void writeFileAtomically(const std::string &path, const std::string &bytes,
                         const std::string &what);

/// \p directory/\p name ("" and "dir/" handled).
std::string joinPath(const std::string &directory, const std::string &name);

/// The directory part of \p path ("." when there is none).
std::string directoryOf(const std::string &path);

/// Testing aid: when the environment variable AMPC_INJECT_WRITE_ERROR is set
/// to an errno name (ENOSPC, EIO, EDQUOT), writeFileAtomically fails with
/// that error half way through writing the temporary file, as a full disk
/// would.
inline constexpr const char *kInjectWriteErrorVariable = "AMPC_INJECT_WRITE_ERROR";

/// Testing aid: when the environment variable AMPC_INJECT_KILL_WRITING names a file (its last
/// path component, e.g. step-000006.ckpt), writeFileAtomically writing that file stops the
/// process with SIGKILL half way through its temporary file (written and synced up to there),
/// as a kill during a checkpoint write would, at a point a test can choose.
inline constexpr const char *kInjectKillWritingVariable = "AMPC_INJECT_KILL_WRITING";

} // namespace ampc::files

#endif // AMPC_RUNTIME_PLAN_FILEIO_H
