//===- TrainMain.cpp - ampc-train-runner: the standalone training binary --===//
//
// The generic runner. `ampc compile` copies this executable and appends a
// training plan (runtime/train/Bundle.h); at start-up it reads the plan from
// its own file and trains it (runtime/train/Runner.h). Run without a plan, it
// says how to build one.
//
//===----------------------------------------------------------------------===//

#include "runtime/train/Bundle.h"
#include "runtime/train/Runner.h"

#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace ampc;

namespace {

/// The last component of \p path.
std::string baseName(const std::string &path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

/// This process's executable file, for reading the embedded plan.
std::string selfPath(const char *argv0) {
  char buffer[PATH_MAX];
  const ssize_t length = ::readlink("/proc/self/exe", buffer, sizeof(buffer));
  if (length > 0 && static_cast<size_t>(length) < sizeof(buffer))
    return std::string(buffer, static_cast<size_t>(length));
  return argv0;
}

} // namespace

int main(int argc, char **argv) {
  const std::string program = baseName(argc > 0 && argv[0] ? argv[0] : "ampc-train-runner");
  train::RunnerOptions options;
  try {
    options = train::parseRunnerArguments(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const train::UsageError &error) {
    std::fprintf(stderr, "%s: error: %s (see '%s --help')\n", program.c_str(), error.what(),
                 program.c_str());
    return 1; // A user error, as in ampc: exit status 1.
  }
  train::RunnerStreams streams;
  streams.interactive = ::isatty(::fileno(stdout)) == 1;
  if (options.help) {
    plan::Plan none;
    return train::runTraining(none, options, program, streams);
  }
  // The CPU backend reads AMPC_CPU_THREADS when it first runs in parallel.
  if (options.threads > 0)
    ::setenv("AMPC_CPU_THREADS", std::to_string(options.threads).c_str(), 1);
  plan::Plan plan;
  try {
    plan = train::readEmbeddedPlan(selfPath(argv[0]));
  } catch (const std::exception &error) {
    std::fprintf(stderr, "%s: error: %s\n", program.c_str(), error.what());
    return 1;
  }
  return train::runTraining(plan, options, program, streams);
}
