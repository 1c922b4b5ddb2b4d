//===- Bundle.cpp - Training executables: runner + embedded plan ----------===//

#include "runtime/train/Bundle.h"

#include "runtime/plan/FileIO.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

namespace ampc::train {

using plan::PlanError;

namespace {

/// The bytes of the file at \p path; PlanError naming \p what and the cause.
std::string readWholeFile(const std::string &path, const std::string &what) {
  try {
    return files::readWholeFile(path, what);
  } catch (const files::FileError &error) {
    throw PlanError(error.what());
  }
}

/// The 16-byte trailer for a plan of \p planBytes bytes.
std::string makeTrailer(uint64_t planBytes) {
  std::string trailer(kTrailerBytes, '\0');
  for (int i = 0; i < 8; ++i)
    trailer[i] = static_cast<char>((planBytes >> (8 * i)) & 0xff);
  std::memcpy(&trailer[8], kTrailerMagic, 8);
  return trailer;
}

/// Decodes a trailer: true and the plan length if \p trailer (16 bytes) ends
/// with the magic.
bool parseTrailer(const char *trailer, uint64_t &planBytes) {
  if (std::memcmp(trailer + 8, kTrailerMagic, 8) != 0)
    return false;
  planBytes = 0;
  for (int i = 0; i < 8; ++i)
    planBytes |= static_cast<uint64_t>(static_cast<unsigned char>(trailer[i])) << (8 * i);
  return true;
}

/// True if \p path is a regular file this process may execute.
bool isExecutableFile(const std::string &path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
         ::access(path.c_str(), X_OK) == 0;
}

/// The directory part of \p path ("." for a bare name, "/" for "/x").
std::string directoryOf(const std::string &path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

/// The absolute path of this process's executable, or "" if unknown.
std::string selfExecutable() {
  char buffer[PATH_MAX];
  const ssize_t length = ::readlink("/proc/self/exe", buffer, sizeof(buffer));
  if (length <= 0 || static_cast<size_t>(length) >= sizeof(buffer))
    return "";
  return std::string(buffer, static_cast<size_t>(length));
}

} // namespace

void writeTrainingExecutable(const std::string &runnerPath, const plan::Plan &plan,
                             const std::string &outPath) {
  const std::string prefix = "cannot write training executable '" + outPath + "': ";
  std::string runner;
  try {
    runner = readWholeFile(runnerPath, "the training runner");
  } catch (const PlanError &error) {
    throw PlanError(prefix + error.what());
  }
  // A runner that already carries a plan (a training executable given as the
  // runner) contributes only its executable part.
  uint64_t embedded = 0;
  if (runner.size() >= kTrailerBytes &&
      parseTrailer(runner.data() + runner.size() - kTrailerBytes, embedded) &&
      embedded <= runner.size() - kTrailerBytes)
    runner.resize(runner.size() - kTrailerBytes - embedded);

  std::ostringstream encoded;
  try {
    plan::writePlan(plan, encoded);
  } catch (const PlanError &error) {
    throw PlanError(prefix + error.what());
  }
  const std::string planBytes = encoded.str();
  const std::string trailer = makeTrailer(planBytes.size());

  const std::string temporary = outPath + ".tmp";
  std::FILE *file = std::fopen(temporary.c_str(), "wb");
  if (!file)
    throw PlanError(prefix + "cannot create '" + temporary + "': " + std::strerror(errno));
  int error = 0;
  const std::string *parts[] = {&runner, &planBytes, &trailer};
  for (const std::string *part : parts) {
    if (std::fwrite(part->data(), 1, part->size(), file) != part->size()) {
      error = errno ? errno : EIO;
      break;
    }
  }
  // Buffered bytes reach the disk here: a full disk or a quota shows up at
  // the flush or the close, not at the write call.
  if (!error && std::fflush(file) != 0)
    error = errno ? errno : EIO;
  if (std::fclose(file) != 0 && !error)
    error = errno ? errno : EIO;
  if (!error && ::chmod(temporary.c_str(), 0755) != 0)
    error = errno;
  if (error) {
    std::remove(temporary.c_str());
    throw PlanError(prefix + "writing '" + temporary + "' failed: " + std::strerror(error) +
                    "; the existing file, if any, is unchanged");
  }
  if (std::rename(temporary.c_str(), outPath.c_str()) != 0) {
    error = errno;
    std::remove(temporary.c_str());
    throw PlanError(prefix + "cannot rename '" + temporary + "' over it: " + std::strerror(error));
  }
}

/// Opens \p path and reads its trailer. Returns false if there is none;
/// throws PlanError if the file cannot be read.
static bool readTrailer(const std::string &path, std::FILE *&file, uint64_t &fileBytes,
                        uint64_t &planBytes) {
  file = std::fopen(path.c_str(), "rb");
  if (!file)
    throw PlanError("cannot read '" + path + "': " + std::strerror(errno));
  char trailer[kTrailerBytes];
  if (::fseeko(file, 0, SEEK_END) != 0)
    return false;
  const off_t size = ::ftello(file);
  if (size < static_cast<off_t>(kTrailerBytes))
    return false;
  fileBytes = static_cast<uint64_t>(size);
  if (::fseeko(file, size - static_cast<off_t>(kTrailerBytes), SEEK_SET) != 0 ||
      std::fread(trailer, 1, kTrailerBytes, file) != kTrailerBytes)
    return false;
  return parseTrailer(trailer, planBytes);
}

bool hasEmbeddedPlan(const std::string &executablePath) {
  std::FILE *file = nullptr;
  uint64_t fileBytes = 0, planBytes = 0;
  bool found = false;
  try {
    found = readTrailer(executablePath, file, fileBytes, planBytes);
  } catch (const PlanError &) {
    return false;
  }
  std::fclose(file);
  return found && planBytes <= fileBytes - kTrailerBytes;
}

plan::Plan readEmbeddedPlan(const std::string &executablePath) {
  std::FILE *file = nullptr;
  uint64_t fileBytes = 0, planBytes = 0;
  const bool found = readTrailer(executablePath, file, fileBytes, planBytes);
  if (!found) {
    std::fclose(file);
    throw PlanError("'" + executablePath +
                    "': this executable carries no training plan; build one "
                    "with `ampc compile model.mlir -o NAME`");
  }
  const std::string corrupt = "'" + executablePath + "': the embedded training plan is damaged (";
  if (planBytes > fileBytes - kTrailerBytes) {
    std::fclose(file);
    throw PlanError(corrupt + "its trailer claims " + std::to_string(planBytes) +
                    " bytes, the file has " + std::to_string(fileBytes) +
                    "); rebuild it with `ampc compile`");
  }
  std::string bytes(planBytes, '\0');
  const off_t start = static_cast<off_t>(fileBytes - kTrailerBytes - planBytes);
  const bool read = ::fseeko(file, start, SEEK_SET) == 0 &&
                    std::fread(bytes.data(), 1, bytes.size(), file) == bytes.size();
  const int error = errno;
  std::fclose(file);
  if (!read)
    throw PlanError("cannot read '" + executablePath + "': " + std::strerror(error));
  std::istringstream in(bytes);
  try {
    return plan::readPlan(in);
  } catch (const PlanError &problem) {
    throw PlanError(corrupt + problem.what() + "); rebuild it with `ampc compile`");
  }
}

std::string findRunner(const std::string &ampcExecutable, const std::string &buildTreeRunner) {
  static const char *kName = "ampc-train-runner";
  if (const char *fromEnvironment = std::getenv("AMPC_RUNNER")) {
    if (isExecutableFile(fromEnvironment))
      return fromEnvironment;
    throw PlanError(std::string("AMPC_RUNNER is set to '") + fromEnvironment +
                    "', which is not an executable file; point it at "
                    "ampc-train-runner or unset it");
  }
  std::vector<std::string> candidates;
  std::vector<std::string> directories;
  if (ampcExecutable.find('/') != std::string::npos)
    directories.push_back(directoryOf(ampcExecutable));
  // Through a symlink (an installed `ampc` pointing into a build tree) the
  // real location counts too; a bare name is found via /proc/self/exe.
  std::string real = selfExecutable();
  if (ampcExecutable.find('/') != std::string::npos) {
    char resolved[PATH_MAX];
    real = ::realpath(ampcExecutable.c_str(), resolved) ? resolved : "";
  }
  if (!real.empty() && (directories.empty() || directoryOf(real) != directories.front()))
    directories.push_back(directoryOf(real));
  for (const std::string &directory : directories) {
    candidates.push_back(directory + "/" + kName);
    candidates.push_back(directory + "/../runtime/train/" + kName);
  }
  if (!buildTreeRunner.empty())
    candidates.push_back(buildTreeRunner);
  std::string looked;
  for (const std::string &candidate : candidates) {
    if (isExecutableFile(candidate))
      return candidate;
    looked += (looked.empty() ? "" : ", ") + candidate;
  }
  throw PlanError(std::string("cannot find the training runner ") + kName + " (looked at " +
                  looked +
                  "); build it (target ampc-train-runner) or set AMPC_RUNNER "
                  "to its path");
}

} // namespace ampc::train
