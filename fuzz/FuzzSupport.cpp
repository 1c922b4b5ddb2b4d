//===- FuzzSupport.cpp - What the fuzz targets share ----------------------===//

#include "fuzz/FuzzSupport.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>

namespace ampc::fuzz {

namespace {

std::string makeScratchDirectory() {
  const char *tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/ampc-fuzz-XXXXXX";
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  if (!::mkdtemp(name.data())) {
    std::perror("ampc fuzz: cannot create the scratch directory");
    std::abort();
  }
  // libFuzzer leaves through exit() when its time or run count is spent.
  std::atexit([] {
    std::error_code ignored;
    std::filesystem::remove_all(scratchDirectory(), ignored);
  });
  return name.data();
}

} // namespace

const std::string &scratchDirectory() {
  // Never destroyed: the exit handler that removes the directory reads it after static
  // destructors have run.
  static const std::string *directory = new std::string(makeScratchDirectory());
  return *directory;
}

std::string writeScratchFile(const std::string &name, const uint8_t *data, size_t size) {
  const std::string path = scratchDirectory() + "/" + name;
  std::FILE *file = std::fopen(path.c_str(), "wb");
  if (!file || (size > 0 && std::fwrite(data, 1, size, file) != size) || std::fclose(file) != 0) {
    std::perror(("ampc fuzz: cannot write " + path).c_str());
    std::abort();
  }
  return path;
}

} // namespace ampc::fuzz
