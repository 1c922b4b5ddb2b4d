//===- FileIO.cpp - Whole-file reads and crash-safe writes ----------------===//

#include "runtime/plan/FileIO.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ampc::files {

namespace {

/// The errno the testing aid injects, or 0.
int injectedWriteError() {
  const char *name = std::getenv(kInjectWriteErrorVariable);
  if (!name || !*name)
    return 0;
  if (std::strcmp(name, "EIO") == 0)
    return EIO;
  if (std::strcmp(name, "EDQUOT") == 0)
    return EDQUOT;
  return ENOSPC;
}

/// Whether the testing aid asks for a kill while \p name is written.
bool injectedKill(const std::string &name) {
  const char *chosen = std::getenv(kInjectKillWritingVariable);
  return chosen && *chosen && name == chosen;
}

} // namespace

std::string joinPath(const std::string &directory, const std::string &name) {
  if (directory.empty() || directory.back() == '/')
    return directory + name;
  return directory + "/" + name;
}

std::string directoryOf(const std::string &path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string readWholeFile(const std::string &path, const std::string &what) {
  std::FILE *file = std::fopen(path.c_str(), "rb");
  if (!file)
    throw FileError("cannot read " + what + " " + path + ": " + std::strerror(errno));
  std::string bytes;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0)
    bytes.append(buffer, n);
  const bool failed = std::ferror(file);
  const int error = errno;
  std::fclose(file);
  if (failed)
    throw FileError("cannot read " + what + " " + path + ": " + std::strerror(error));
  return bytes;
}

void writeFileAtomically(const std::string &path, const std::string &bytes,
                         const std::string &what) {
  const std::string directory = directoryOf(path);
  const size_t slash = path.find_last_of('/');
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const std::string temporary =
      joinPath(directory, "." + name + ".tmp-" + std::to_string(::getpid()));
  auto fail = [&](int error, const char *step) {
    ::unlink(temporary.c_str());
    throw FileError("cannot write " + what + " " + path + ": " + step + ": " +
                    std::strerror(error));
  };
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int error = errno;
    throw FileError("cannot write " + what + " " + path + ": cannot create " + temporary + ": " +
                    std::strerror(error));
  }
  const int injected = injectedWriteError();
  const bool kill = injectedKill(name);
  size_t written = 0;
  const size_t limit = injected || kill ? bytes.size() / 2 : bytes.size();
  while (written < limit) {
    const ssize_t n = ::write(fd, bytes.data() + written, limit - written);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : EIO;
      ::close(fd);
      fail(error, "write");
    }
    written += static_cast<size_t>(n);
  }
  if (injected) {
    ::close(fd);
    fail(injected, "write");
  }
  if (kill) {
    ::fsync(fd);
    ::raise(SIGKILL);
  }
  if (::fsync(fd) != 0) {
    const int error = errno;
    ::close(fd);
    fail(error, "fsync");
  }
  if (::close(fd) != 0)
    fail(errno, "close");
  if (::rename(temporary.c_str(), path.c_str()) != 0)
    fail(errno, "rename");
  // Make the rename durable; a directory that cannot be opened or synced
  // (some file systems) still holds a complete file.
  const int dirFd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirFd >= 0) {
    ::fsync(dirFd);
    ::close(dirFd);
  }
}

} // namespace ampc::files
