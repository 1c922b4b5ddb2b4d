//===- BundleTest.cpp - Training executables: writing, reading, finding ---===//

#include "TrainTestUtils.h"

#include "runtime/train/Bundle.h"

#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <sstream>

using namespace ampc;
using namespace ampc::test;
using plan::PlanError;

namespace {

const std::string kRunner = AMPC_TRAIN_RUNNER_PATH;

/// The binary encoding of \p p.
std::string encode(const plan::Plan &p) {
  std::ostringstream out;
  plan::writePlan(p, out);
  return out.str();
}

/// Expects \p body to throw PlanError mentioning each of \p fragments.
template <typename F> void expectPlanError(F body, const std::vector<std::string> &fragments) {
  try {
    body();
    ADD_FAILURE() << "expected a PlanError";
  } catch (const PlanError &error) {
    const std::string message = error.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    for (const std::string &fragment : fragments)
      EXPECT_NE(message.find(fragment), std::string::npos)
          << "'" << fragment << "' not in: " << message;
  }
}

bool exists(const std::string &path) { return ::access(path.c_str(), F_OK) == 0; }

TEST(TrainBundle, RoundTripKeepsRunnerBytesPlanAndTrailer) {
  TempDir dir;
  const plan::Plan original = forwardOnlyPlan();
  const std::string out = dir.path("train_model");
  train::writeTrainingExecutable(kRunner, original, out);

  const std::string runner = readFile(kRunner);
  const std::string planBytes = encode(original);
  const std::string bundled = readFile(out);
  ASSERT_EQ(bundled.size(), runner.size() + planBytes.size() + 16);
  EXPECT_EQ(bundled.compare(0, runner.size(), runner), 0);
  EXPECT_EQ(bundled.compare(runner.size(), planBytes.size(), planBytes), 0);
  // u64 little-endian length, then the magic.
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i)
    length |= uint64_t(uint8_t(bundled[bundled.size() - 16 + i])) << (8 * i);
  EXPECT_EQ(length, planBytes.size());
  EXPECT_EQ(bundled.substr(bundled.size() - 8), "AMPCPLAN");

  struct stat info;
  ASSERT_EQ(::stat(out.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0755u);
  EXPECT_FALSE(exists(out + ".tmp"));

  EXPECT_TRUE(train::hasEmbeddedPlan(out));
  const plan::Plan loaded = train::readEmbeddedPlan(out);
  EXPECT_EQ(loaded.modelName, "forward_only");
  EXPECT_EQ(encode(loaded), planBytes);
}

TEST(TrainBundle, RebundlingReplacesThePlan) {
  TempDir dir;
  plan::Plan first = forwardOnlyPlan();
  train::writeTrainingExecutable(kRunner, first, dir.path("a"));
  plan::Plan second = forwardOnlyPlan();
  second.modelName = "a_much_longer_model_name";
  // A training executable given as the runner contributes only its runner.
  train::writeTrainingExecutable(dir.path("a"), second, dir.path("b"));
  const std::string bundled = readFile(dir.path("b"));
  EXPECT_EQ(bundled.size(), readFile(kRunner).size() + encode(second).size() + 16);
  EXPECT_EQ(train::readEmbeddedPlan(dir.path("b")).modelName, "a_much_longer_model_name");
}

TEST(TrainBundle, ExecutableWithoutPlanSaysHowToBuildOne) {
  EXPECT_FALSE(train::hasEmbeddedPlan(kRunner));
  expectPlanError(
      [] { train::readEmbeddedPlan(kRunner); },
      {kRunner, "this executable carries no training plan", "ampc compile model.mlir -o NAME"});
  TempDir dir;
  writeFile(dir.path("tiny"), "abc");
  expectPlanError([&] { train::readEmbeddedPlan(dir.path("tiny")); }, {"carries no training plan"});
  expectPlanError([&] { train::readEmbeddedPlan(dir.path("missing")); },
                  {"cannot read", dir.path("missing"), "No such file"});
}

TEST(TrainBundle, DamagedTrailerOrPlanIsReported) {
  TempDir dir;
  // A trailer claiming more bytes than the file has.
  std::string bytes = "runner";
  bytes += std::string("\xff\x00\x00\x00\x00\x00\x00\x00", 8) + "AMPCPLAN";
  writeFile(dir.path("long"), bytes);
  EXPECT_FALSE(train::hasEmbeddedPlan(dir.path("long")));
  expectPlanError([&] { train::readEmbeddedPlan(dir.path("long")); },
                  {"damaged", "claims 255 bytes", "ampc compile"});
  // A plausible length over bytes that are not a plan.
  bytes = "runner-garbage";
  bytes += std::string("\x07\x00\x00\x00\x00\x00\x00\x00", 8) + "AMPCPLAN";
  writeFile(dir.path("garbage"), bytes);
  expectPlanError([&] { train::readEmbeddedPlan(dir.path("garbage")); },
                  {"damaged", "not an ampc plan"});
}

TEST(TrainBundle, FailedWriteLeavesNothingBehind) {
  TempDir dir;
  expectPlanError(
      [&] {
        train::writeTrainingExecutable(kRunner, forwardOnlyPlan(), dir.path("no/such/dir/exe"));
      },
      {"cannot write training executable", dir.path("no/such/dir/exe"),
       "No such file or directory"});
  expectPlanError(
      [&] {
        train::writeTrainingExecutable(dir.path("no-runner"), forwardOnlyPlan(), dir.path("exe"));
      },
      {"cannot read the training runner", dir.path("no-runner")});
  EXPECT_FALSE(exists(dir.path("exe")));
  EXPECT_FALSE(exists(dir.path("exe.tmp")));
}

TEST(TrainBundle, FullDiskKeepsTheExistingFile) {
  TempDir dir;
  const std::string out = dir.path("exe");
  writeFile(out, "previous contents");
  // A file-size limit below the runner's size makes the write fail as a full
  // disk would (EFBIG instead of ENOSPC).
  struct rlimit saved;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto previousHandler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = saved;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string message;
  try {
    train::writeTrainingExecutable(kRunner, forwardOnlyPlan(), out);
  } catch (const PlanError &error) {
    message = error.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, previousHandler);
  EXPECT_NE(message.find("cannot write training executable '" + out + "'"), std::string::npos)
      << message;
  EXPECT_NE(message.find("File too large"), std::string::npos) << message;
  EXPECT_EQ(readFile(out), "previous contents");
  EXPECT_FALSE(exists(out + ".tmp"));
}

/// Sets or unsets AMPC_RUNNER for one scope.
class RunnerVariable {
public:
  explicit RunnerVariable(const char *value) {
    if (const char *old = std::getenv("AMPC_RUNNER"))
      saved = old;
    if (value)
      ::setenv("AMPC_RUNNER", value, 1);
    else
      ::unsetenv("AMPC_RUNNER");
  }
  ~RunnerVariable() {
    if (saved.empty())
      ::unsetenv("AMPC_RUNNER");
    else
      ::setenv("AMPC_RUNNER", saved.c_str(), 1);
  }

private:
  std::string saved;
};

/// Creates an executable file at \p path.
void makeExecutable(const std::string &path) {
  writeFile(path, "#!/bin/sh\n");
  ASSERT_EQ(::chmod(path.c_str(), 0755), 0);
}

TEST(TrainBundle, FindRunnerLooksNextToTheCompilerThenInTheBuildTree) {
  RunnerVariable unset(nullptr);
  TempDir dir;
  ASSERT_EQ(::mkdir(dir.path("bin").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(dir.path("runtime").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(dir.path("runtime/train").c_str(), 0755), 0);
  const std::string ampc = dir.path("bin/ampc");
  // Nothing next to it: the build tree's runner, when the caller names it.
  EXPECT_EQ(train::findRunner(ampc, kRunner), kRunner);
  expectPlanError([&] { train::findRunner(ampc); },
                  {"cannot find the training runner", dir.path("bin")});
  // The build-tree layout: build/compiler/ampc, build/runtime/train/.
  makeExecutable(dir.path("runtime/train/ampc-train-runner"));
  EXPECT_EQ(train::findRunner(ampc), dir.path("bin/../runtime/train/ampc-train-runner"));
  // An installation: the runner next to ampc wins.
  makeExecutable(dir.path("bin/ampc-train-runner"));
  EXPECT_EQ(train::findRunner(ampc), dir.path("bin/ampc-train-runner"));
  // A file that is not executable does not count.
  ASSERT_EQ(::chmod(dir.path("bin/ampc-train-runner").c_str(), 0644), 0);
  EXPECT_EQ(train::findRunner(ampc), dir.path("bin/../runtime/train/ampc-train-runner"));
}

TEST(TrainBundle, FindRunnerHonoursAmpcRunner) {
  TempDir dir;
  makeExecutable(dir.path("my-runner"));
  {
    RunnerVariable set(dir.path("my-runner").c_str());
    EXPECT_EQ(train::findRunner("/nowhere/ampc"), dir.path("my-runner"));
  }
  {
    RunnerVariable set(dir.path("missing").c_str());
    expectPlanError([] { train::findRunner("/nowhere/ampc"); },
                    {"AMPC_RUNNER", dir.path("missing"), "unset it"});
  }
}

} // namespace
