//===- CheckpointTest.cpp - Checkpoint format, files and resumed runs -----===//
//
// The checkpoint encoding (round trip, checksum, truncation at every prefix,
// version), atomic writes and their failures, directory listing and pruning,
// and in-process runs resumed from every step's checkpoint, whose metrics
// logs must equal the uninterrupted run's bit for bit.
//
//===----------------------------------------------------------------------===//

#include "TrainTestUtils.h"

#include "runtime/plan/FileIO.h"
#include "runtime/train/Checkpoint.h"
#include "runtime/train/Runner.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

using namespace ampc;
using namespace ampc::test;
using train::Checkpoint;
using train::CheckpointError;
using train::CheckpointSection;
using train::SectionType;

namespace {

Checkpoint sampleCheckpoint() {
  Checkpoint checkpoint;
  checkpoint.meta["step"] = "12";
  checkpoint.meta["plan_hash"] = "0123456789abcdef";
  checkpoint.meta["first_loss"] = "0x1.62e42fefa39efp+1";
  CheckpointSection weights;
  weights.name = "parameter/w";
  weights.type = SectionType::F32;
  weights.shape = {2, 3};
  for (int i = 0; i < 6; ++i) {
    const float value = 0.25f * static_cast<float>(i) - 1.0f;
    weights.bytes.append(reinterpret_cast<const char *>(&value), 4);
  }
  CheckpointSection counter;
  counter.name = "state/count";
  counter.type = SectionType::I64;
  const int64_t count = -7;
  counter.bytes.append(reinterpret_cast<const char *>(&count), 8);
  CheckpointSection empty;
  empty.name = "state/empty";
  empty.type = SectionType::F32;
  empty.shape = {0};
  checkpoint.sections = {weights, counter, empty};
  return checkpoint;
}

/// The message of the CheckpointError that decoding \p bytes throws ("" if
/// none).
std::string decodeError(const std::string &bytes) {
  try {
    train::decodeCheckpoint(bytes, "f.ckpt");
  } catch (const CheckpointError &error) {
    return error.what();
  }
  return "";
}

TEST(Checkpoint, RoundTrip) {
  const Checkpoint original = sampleCheckpoint();
  const std::string bytes = train::encodeCheckpoint(original);
  EXPECT_EQ(bytes.substr(0, 8), "AMPCCKPT");
  EXPECT_EQ(bytes.substr(bytes.size() - 4), "DONE");
  const Checkpoint decoded = train::decodeCheckpoint(bytes, "f.ckpt");
  EXPECT_EQ(decoded.meta, original.meta);
  ASSERT_EQ(decoded.sections.size(), original.sections.size());
  for (size_t i = 0; i < decoded.sections.size(); ++i) {
    EXPECT_EQ(decoded.sections[i].name, original.sections[i].name);
    EXPECT_EQ(decoded.sections[i].type, original.sections[i].type);
    EXPECT_EQ(decoded.sections[i].shape, original.sections[i].shape);
    EXPECT_EQ(decoded.sections[i].bytes, original.sections[i].bytes);
  }
  ASSERT_NE(decoded.find("state/count"), nullptr);
  EXPECT_EQ(decoded.find("missing"), nullptr);
  EXPECT_EQ(decoded.value("step", "f.ckpt"), "12");
  try {
    decoded.value("seed", "f.ckpt");
    ADD_FAILURE() << "no error for a missing key";
  } catch (const CheckpointError &error) {
    EXPECT_STREQ(error.what(), "checkpoint f.ckpt: its metadata has no 'seed'");
  }
  // Encoding is deterministic.
  EXPECT_EQ(train::encodeCheckpoint(decoded), bytes);
}

TEST(Checkpoint, EveryFlippedByteIsDetected) {
  const std::string bytes = train::encodeCheckpoint(sampleCheckpoint());
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string corrupt = bytes;
    corrupt[i] = static_cast<char>(corrupt[i] ^ 0x20);
    EXPECT_NE(decodeError(corrupt), "") << "byte " << i;
  }
  std::string corrupt = bytes;
  corrupt[40] = static_cast<char>(corrupt[40] ^ 1);
  EXPECT_NE(decodeError(corrupt).find("checkpoint f.ckpt: checksum mismatch (stored CRC-32 "),
            std::string::npos)
      << decodeError(corrupt);
  EXPECT_NE(decodeError(corrupt).find("): the file is corrupt"), std::string::npos);
}

TEST(Checkpoint, TruncationAtEveryPrefixIsAnError) {
  const std::string bytes = train::encodeCheckpoint(sampleCheckpoint());
  for (size_t length = 0; length < bytes.size(); ++length) {
    const std::string message = decodeError(bytes.substr(0, length));
    EXPECT_EQ(message.rfind("checkpoint f.ckpt: ", 0), 0u) << length << ": " << message;
    if (length >= 16) {
      EXPECT_NE(message.find("truncated"), std::string::npos) << length << ": " << message;
    }
  }
  EXPECT_EQ(decodeError(bytes.substr(0, 10)),
            "checkpoint f.ckpt: truncated (10 bytes, shorter than the 16-byte header)");
  EXPECT_EQ(decodeError(bytes.substr(0, 100)),
            "checkpoint f.ckpt: truncated (100 bytes and no end marker): the write did not "
            "complete");
}

TEST(Checkpoint, SectionsMayNotHoldMoreThanTheFile) {
  // Eight sections naming the same 64 KiB of a 64 KiB file would copy 512 KiB out of it (and
  // thousands, gigabytes): their bytes together may not exceed the file's.
  auto fixed = [](uint64_t value, int size) {
    std::string out;
    for (int i = 0; i < size; ++i)
      out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
    return out;
  };
  const std::string meta = "step 1\n";
  const uint32_t sections = 8;
  const uint64_t size = 64 << 10;
  const uint64_t metaAt = 16 + (4 + 4 + 1 + 4 + 16) + sections * (4 + 1 + 1 + 4 + 8 + 16);
  std::string bytes = "AMPCCKPT" + fixed(1, 4) + fixed(sections + 1, 4);
  bytes += fixed(4, 4) + "meta" + std::string(1, '\0') + fixed(0, 4) + fixed(metaAt, 8) +
           fixed(meta.size(), 8);
  for (uint32_t i = 0; i < sections; ++i)
    bytes += fixed(1, 4) + "w" + std::string(1, '\1') + fixed(1, 4) + fixed(size / 4, 8) +
             fixed(metaAt + meta.size(), 8) + fixed(size, 8);
  ASSERT_EQ(bytes.size(), metaAt);
  bytes += meta + std::string(size, '\0');
  bytes += fixed(train::crc32Of(bytes), 4) + "DONE";
  EXPECT_NE(decodeError(bytes).find("its sections hold more bytes than the file"),
            std::string::npos)
      << decodeError(bytes);
}

TEST(Checkpoint, VersionAndMagicMismatch) {
  std::string bytes = train::encodeCheckpoint(sampleCheckpoint());
  std::string newer = bytes;
  newer[8] = 2;
  EXPECT_EQ(decodeError(newer), "checkpoint f.ckpt: format version 2; this runner reads version 1");
  std::string other = bytes;
  other[0] = 'X';
  EXPECT_EQ(decodeError(other),
            "checkpoint f.ckpt: not an ampc checkpoint (it does not start with AMPCCKPT)");
}

TEST(Checkpoint, FileNamesListingAndPruning) {
  EXPECT_EQ(train::checkpointFileName(200), "step-000200.ckpt");
  EXPECT_EQ(train::checkpointFileName(1234567), "step-1234567.ckpt");
  TempDir dir;
  EXPECT_TRUE(train::listCheckpoints(dir.path("missing")).empty());
  for (int step : {3, 10, 7, 1})
    writeFile(dir.path(train::checkpointFileName(step)), "x");
  writeFile(dir.path("notes.txt"), "x");
  writeFile(dir.path("step-abc.ckpt"), "x");
  writeFile(dir.path(".step-000011.ckpt.tmp-1"), "partial"); // a killed write
  const auto files = train::listCheckpoints(dir.dir());
  ASSERT_EQ(files.size(), 4u);
  EXPECT_EQ(files[0].first, 10u);
  EXPECT_EQ(files[0].second, dir.path("step-000010.ckpt"));
  EXPECT_EQ(files[3].first, 1u);
  train::pruneCheckpoints(dir.dir(), 2);
  const auto kept = train::listCheckpoints(dir.dir());
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].first, 10u);
  EXPECT_EQ(kept[1].first, 7u);
  EXPECT_EQ(readFile(dir.path("notes.txt")), "x");
  EXPECT_EQ(readFile(dir.path(".step-000011.ckpt.tmp-1")), "");

  // A run resumed at step 4 from this directory keeps its own two newest and leaves steps 7 and 10,
  // which it will overwrite when it gets there, alone.
  for (int step : {2, 3, 4})
    writeFile(dir.path(train::checkpointFileName(step)), "x");
  train::pruneCheckpoints(dir.dir(), 2, 4);
  std::vector<uint64_t> steps;
  for (const auto &file : train::listCheckpoints(dir.dir()))
    steps.push_back(file.first);
  EXPECT_EQ(steps, (std::vector<uint64_t>{10, 7, 4, 3}));
}

TEST(Checkpoint, AtomicWritesAndTheirFailures) {
  TempDir dir;
  train::writeFileAtomically(dir.dir(), "step-000001.ckpt", "first");
  train::writeFileAtomically(dir.dir(), "step-000001.ckpt", "second");
  EXPECT_EQ(readFile(dir.path("step-000001.ckpt")), "second");

  // A full disk half way through: the old file stays, no temporary is left.
  ::setenv(files::kInjectWriteErrorVariable, "ENOSPC", 1);
  try {
    train::writeFileAtomically(dir.dir(), "step-000001.ckpt", std::string(1000, 'y'));
    ADD_FAILURE() << "no error";
  } catch (const CheckpointError &error) {
    EXPECT_EQ(std::string(error.what()), "cannot write checkpoint " + dir.path("step-000001.ckpt") +
                                             ": write: No space left on device");
  }
  ::unsetenv(files::kInjectWriteErrorVariable);
  EXPECT_EQ(readFile(dir.path("step-000001.ckpt")), "second");
  EXPECT_EQ(train::listCheckpoints(dir.dir()).size(), 1u);

  // A directory that cannot hold files (below a regular file).
  writeFile(dir.path("file"), "x");
  try {
    train::writeFileAtomically(dir.path("file"), "step-000002.ckpt", "z");
    ADD_FAILURE() << "no error";
  } catch (const CheckpointError &error) {
    EXPECT_NE(std::string(error.what())
                  .find("cannot write checkpoint " + dir.path("file") +
                        "/step-000002.ckpt: cannot create "),
              std::string::npos)
        << error.what();
    EXPECT_NE(std::string(error.what()).find(": Not a directory"), std::string::npos);
  }
}

TEST(Checkpoint, PlanHashIdentifiesThePlan) {
  const plan::Plan a = bigramTrainingPlan(16, 4, 8, 1, 0.05);
  EXPECT_EQ(train::planHash(a), train::planHash(bigramTrainingPlan(16, 4, 8, 1, 0.05)));
  EXPECT_EQ(train::planHash(a).size(), 16u);
  EXPECT_NE(train::planHash(a), train::planHash(bigramTrainingPlan(16, 4, 8, 1, 0.1)));
  EXPECT_NE(train::planHash(a), train::planHash(bigramTrainingPlan(16, 4, 8, 2, 0.05)));
}

//===----------------------------------------------------------------------===//
// Resumed runs, in process
//===----------------------------------------------------------------------===//

struct RunResult {
  int status = -1;
  std::string out, err;
};

std::string drainFile(std::FILE *file) {
  std::rewind(file);
  std::string text;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0)
    text.append(buffer, n);
  std::fclose(file);
  return text;
}

RunResult runInProcess(const plan::Plan &plan, const train::RunnerOptions &options) {
  train::RunnerStreams streams;
  streams.out = std::tmpfile();
  streams.err = std::tmpfile();
  RunResult run;
  run.status = train::runTraining(plan, options, "train_test", streams);
  run.out = drainFile(streams.out);
  run.err = drainFile(streams.err);
  return run;
}

/// \p log without the wall-clock fields: the figures a resumed run must
/// reproduce exactly.
std::string numericFields(const std::string &log) {
  std::istringstream lines(log);
  std::string line, kept;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string field;
    while (std::getline(fields, field, ','))
      if (field.find("_per_s\"") == std::string::npos &&
          field.find("\"elapsed_s\"") == std::string::npos &&
          field.find("\"step_ms\"") == std::string::npos)
        kept += field + ",";
    kept += "\n";
  }
  return kept;
}

TEST(Checkpoint, ResumingFromEveryStepReproducesTheRun) {
  // Loss scaling with injected overflows and two micro steps per optimizer
  // step: the scale, the skipped count and the data position all resume.
  const plan::Plan scaled =
      withLossScaling(bigramTrainingPlan(16, 4, 8, 2, 0.1), plan::LossScaleMode::Dynamic, 65536);
  TempDir dir;
  train::RunnerOptions options;
  options.steps = 8;
  options.seed = 5;
  options.quiet = true;
  options.injectOverflow = {3, 6};
  options.logPath = dir.path("full.jsonl");
  options.checkpointDir = dir.path("ckpt");
  options.checkpointEvery = 1;
  options.keep = 100;
  const RunResult full = runInProcess(scaled, options);
  ASSERT_EQ(full.status, 0) << full.err;
  EXPECT_NE(full.out.find("checkpoint: " + dir.path("ckpt") + "/step-000008.ckpt\n"),
            std::string::npos)
      << full.out;
  const std::string expected = numericFields(readFile(options.logPath));
  ASSERT_EQ(train::listCheckpoints(options.checkpointDir).size(), 8u);

  for (uint64_t step = 1; step < 8; ++step) {
    SCOPED_TRACE(step);
    // The log as a run killed somewhat after `step` left it.
    std::istringstream lines(readFile(options.logPath));
    std::string line, partial;
    for (uint64_t i = 0; i < std::min<uint64_t>(step + 1, 8) && std::getline(lines, line); ++i)
      partial += line + "\n";
    train::RunnerOptions resume = options;
    resume.logPath = dir.path("resumed.jsonl");
    writeFile(resume.logPath, partial + "{\"step\": 9");
    resume.checkpointDir = dir.path("resumed");
    resume.resume = options.checkpointDir + "/" + train::checkpointFileName(step);
    const RunResult resumed = runInProcess(scaled, resume);
    ASSERT_EQ(resumed.status, 0) << resumed.err;
    EXPECT_NE(resumed.out.find("resuming from " + resume.resume + " at step " +
                               std::to_string(step) + "/8\n"),
              std::string::npos)
        << resumed.out;
    EXPECT_EQ(numericFields(readFile(resume.logPath)), expected);
    // The final weights and state are bit-identical too.
    const std::string a = resume.checkpointDir + "/step-000008.ckpt",
                      b = options.checkpointDir + "/step-000008.ckpt";
    const Checkpoint mine = train::decodeCheckpoint(readFile(a), a),
                     theirs = train::decodeCheckpoint(readFile(b), b);
    ASSERT_EQ(mine.sections.size(), theirs.sections.size());
    for (size_t i = 0; i < mine.sections.size(); ++i)
      EXPECT_EQ(mine.sections[i].bytes, theirs.sections[i].bytes) << mine.sections[i].name;
    EXPECT_EQ(mine.meta.at("skipped_steps"), "2");
  }
}

TEST(Checkpoint, ResumeErrorsNameWhatDiffers) {
  TempDir dir;
  train::RunnerOptions options;
  options.steps = 3;
  options.quiet = true;
  options.checkpointDir = dir.path("ckpt");
  ASSERT_EQ(runInProcess(bigramTrainingPlan(16, 4, 8, 1, 0.05), options).status, 0);
  const std::string file = dir.path("ckpt") + "/step-000003.ckpt";

  // Another plan.
  train::RunnerOptions resume = options;
  resume.resume = "latest";
  const plan::Plan other = bigramTrainingPlan(16, 4, 8, 1, 0.1);
  RunResult run = runInProcess(other, resume);
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.err, "train_test: error: cannot resume from " + file +
                         ": the checkpoint was written by a plan with hash " +
                         train::planHash(bigramTrainingPlan(16, 4, 8, 1, 0.05)) +
                         " (model @bigram), this executable's plan has hash " +
                         train::planHash(other) + " (another model or compile options)\n");
  // Another seed.
  resume.seed = 4;
  run = runInProcess(bigramTrainingPlan(16, 4, 8, 1, 0.05), resume);
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.err, "train_test: error: cannot resume from " + file +
                         ": the checkpoint was written with --seed 0, this run has 4; resume "
                         "with the options of the run that wrote it\n");
  // A fresh run into a directory that holds checkpoints.
  run = runInProcess(bigramTrainingPlan(16, 4, 8, 1, 0.05), options);
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.err.find("already holds checkpoints of a run (step-000003.ckpt); continue it "
                         "with --resume latest"),
            std::string::npos)
      << run.err;
  // A corrupt newest checkpoint is skipped with a warning when it is in a
  // directory, and an error when named.
  std::string bytes = readFile(file);
  bytes[bytes.size() / 2] ^= 1;
  writeFile(dir.path("ckpt") + "/step-000004.ckpt", bytes);
  resume.seed = 0;
  resume.steps = 3;
  run = runInProcess(bigramTrainingPlan(16, 4, 8, 1, 0.05), resume);
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.err.find("train_test: warning: skipping checkpoint " + dir.path("ckpt") +
                         "/step-000004.ckpt: checksum mismatch"),
            std::string::npos)
      << run.err;
  EXPECT_NE(run.out.find("nothing to train: the checkpoint is at the last step (3)"),
            std::string::npos)
      << run.out;
  resume.resume = dir.path("ckpt") + "/step-000004.ckpt";
  run = runInProcess(bigramTrainingPlan(16, 4, 8, 1, 0.05), resume);
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.err.find("error: checkpoint " + resume.resume + ": checksum mismatch"),
            std::string::npos)
      << run.err;
}

TEST(Checkpoint, WriteFailuresStopOrContinue) {
  TempDir dir;
  writeFile(dir.path("file"), "x");
  train::RunnerOptions options;
  options.steps = 4;
  options.quiet = true;
  options.checkpointDir = dir.path("file"); // cannot hold files
  options.checkpointEvery = 2;
  RunResult run = runInProcess(bigramTrainingPlan(16, 4, 8, 1, 0.05), options);
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.err.find("train_test: error: cannot write checkpoint " + dir.path("file") +
                         "/step-000002.ckpt: cannot create "),
            std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("; there is no earlier checkpoint (--on-checkpoint-error continue "
                         "trains on without it)\n"),
            std::string::npos)
      << run.err;
  options.continueOnCheckpointError = true;
  run = runInProcess(bigramTrainingPlan(16, 4, 8, 1, 0.05), options);
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.err.find("train_test: warning: cannot write checkpoint"), std::string::npos);
  EXPECT_NE(run.err.find("/step-000004.ckpt"), std::string::npos);

  // A full disk after a good checkpoint: the previous one stays intact.
  options.continueOnCheckpointError = false;
  options.checkpointDir = dir.path("ckpt");
  ASSERT_EQ(runInProcess(bigramTrainingPlan(16, 4, 8, 1, 0.05), options).status, 0);
  const std::string good = readFile(dir.path("ckpt/step-000002.ckpt"));
  ASSERT_EQ(std::remove(dir.path("ckpt/step-000004.ckpt").c_str()), 0);
  options.resume = "latest";
  ::setenv(files::kInjectWriteErrorVariable, "ENOSPC", 1);
  run = runInProcess(bigramTrainingPlan(16, 4, 8, 1, 0.05), options);
  ::unsetenv(files::kInjectWriteErrorVariable);
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.err, "train_test: error: cannot write checkpoint " + dir.path("ckpt") +
                         "/step-000004.ckpt: write: No space left on device; the previous "
                         "checkpoint " +
                         dir.path("ckpt") +
                         "/step-000002.ckpt is intact (--on-checkpoint-error continue trains "
                         "on without it)\n");
  EXPECT_EQ(readFile(dir.path("ckpt/step-000002.ckpt")), good);
  EXPECT_EQ(train::listCheckpoints(dir.path("ckpt")).size(), 1u);
}

} // namespace
