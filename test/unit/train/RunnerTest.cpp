//===- RunnerTest.cpp - Progress, logs and training runs -------------------===//

#include "TrainTestUtils.h"

#include "runtime/train/Backend.h"
#include "runtime/train/Bundle.h"
#include "runtime/train/Data.h"
#include "runtime/train/Runner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>

using namespace ampc;
using namespace ampc::test;
using train::RunnerOptions;

namespace {

const std::string kRunner = AMPC_TRAIN_RUNNER_PATH;

TEST(TrainRunner, FormatsDurationsRatesAndNumbers) {
  EXPECT_EQ(train::formatDuration(0), "0:00");
  EXPECT_EQ(train::formatDuration(5.9), "0:05");
  EXPECT_EQ(train::formatDuration(62), "1:02");
  EXPECT_EQ(train::formatDuration(3725), "1:02:05");
  EXPECT_EQ(train::formatRate(850), "850.0");
  EXPECT_EQ(train::formatRate(12345), "12.3k");
  EXPECT_EQ(train::formatRate(4.56e6), "4.56M");
  EXPECT_EQ(train::formatRate(1.234e9), "1.23G");
  EXPECT_EQ(train::jsonNumber(0.5), "0.5");
  EXPECT_EQ(train::jsonNumber(3e-4), "0.0003");
  EXPECT_EQ(train::jsonNumber(std::nan("")), "null");
  EXPECT_EQ(train::jsonNumber(std::numeric_limits<double>::infinity()), "null");
}

TEST(TrainRunner, ProgressLineAndJsonRecord) {
  train::StepRecord record;
  record.step = 37;
  record.steps = 200;
  record.loss = 3.21449;
  record.gradNorm = 0.8123;
  record.learningRate = 3e-4;
  record.units = 61500;
  record.tokens = true;
  record.elapsed = 5;
  record.stepMilliseconds = 42.5;
  EXPECT_EQ(train::progressLine(record),
            "step 37/200 | loss 3.2145 | grad norm 0.812 | lr 3.00e-04 | "
            "12.3k tok/s | 0:05 elapsed, ETA 0:22");
  EXPECT_EQ(train::jsonRecord(record),
            "{\"step\": 37, \"loss\": 3.21449, \"grad_norm\": 0.8123, "
            "\"lr\": 0.0003, \"tokens\": 61500, \"tokens_per_s\": 12300, "
            "\"elapsed_s\": 5, \"step_ms\": 42.5}");
  record.gradNorm = 1;
  EXPECT_NE(train::progressLine(record).find("| grad norm 1.000 |"), std::string::npos);
  record.gradNorm = 3e-5;
  EXPECT_NE(train::progressLine(record).find("| grad norm 3.00e-05 |"), std::string::npos);
  record.gradNorm = 0.8123;
  record.tokens = false;
  record.loss = std::nan("");
  EXPECT_NE(train::progressLine(record).find("12.3k samples/s"), std::string::npos);
  EXPECT_EQ(train::jsonRecord(record),
            "{\"step\": 37, \"loss\": null, \"grad_norm\": 0.8123, "
            "\"lr\": 0.0003, \"samples\": 61500, \"samples_per_s\": 12300, "
            "\"elapsed_s\": 5, \"step_ms\": 42.5}");
}

/// Output captured from a runTraining call.
struct Captured {
  int status = -1;
  std::string out, err;
};

std::string drain(std::FILE *file) {
  std::rewind(file);
  std::string text;
  char chunk[4096];
  size_t count;
  while ((count = std::fread(chunk, 1, sizeof(chunk), file)) > 0)
    text.append(chunk, count);
  std::fclose(file);
  return text;
}

Captured runInProcess(const plan::Plan &p, const RunnerOptions &options, bool interactive = false) {
  train::RunnerStreams streams;
  streams.out = std::tmpfile();
  streams.err = std::tmpfile();
  streams.interactive = interactive;
  Captured captured;
  captured.status = train::runTraining(p, options, "train_test", streams);
  captured.out = drain(streams.out);
  captured.err = drain(streams.err);
  return captured;
}

TEST(TrainRunner, InfoDescribesTheModel) {
  RunnerOptions options;
  options.info = true;
  Captured info = runInProcess(bigramTrainingPlan(16, 4, 8, 2, 0.05), options);
  EXPECT_EQ(info.status, 0);
  EXPECT_EQ(info.out, "model @bigram\n"
                      "parameters: 256 in 1 tensor\n"
                      "inputs:\n"
                      "  tokens: i32 [4, 8], use indices, ids in [0, 16)\n"
                      "  targets: i64 [4, 8], use labels, ids in [0, 16)\n"
                      "accumulation steps: 2\n"
                      "training: adamw lr=0.050000 clip=1\n"
                      "task: language model: batches of 4 x 8 tokens ('tokens', targets "
                      "'targets'), vocabulary 16\n");
}

TEST(TrainRunner, RefusesForwardOnlyPlansAndCuda) {
  Captured forward = runInProcess(forwardOnlyPlan(), RunnerOptions{});
  EXPECT_EQ(forward.status, 1);
  EXPECT_EQ(forward.err, "train_test: error: this executable's plan has no optimizer step "
                         "(it was compiled for evaluation only); rebuild it with `ampc "
                         "compile model.mlir -o NAME`\n");
  // A plan without a device program: --device cuda is an error, auto says
  // why it trains on the CPU, cpu says nothing.
  RunnerOptions cuda;
  cuda.device = "cuda";
  cuda.steps = 2;
  Captured gpu = runInProcess(bigramTrainingPlan(16, 4, 8, 1, 0.05), cuda);
  EXPECT_EQ(gpu.status, 1);
  EXPECT_EQ(gpu.err, "train_test: error: this plan has no GPU code: it was "
                     "compiled without the CUDA toolkit; use --device cpu\n");
  EXPECT_EQ(gpu.out, "");
  RunnerOptions automatic;
  automatic.steps = 2;
  Captured fallback = runInProcess(bigramTrainingPlan(16, 4, 8, 1, 0.05), automatic);
  EXPECT_EQ(fallback.status, 0) << fallback.err;
  EXPECT_NE(fallback.out.find("\ndevice: cpu (the GPU cannot be used: this "
                              "plan has no GPU code: it was compiled without "
                              "the CUDA toolkit)\n"),
            std::string::npos)
      << fallback.out;
  RunnerOptions cpuOnly = automatic;
  cpuOnly.device = "cpu";
  Captured plain = runInProcess(bigramTrainingPlan(16, 4, 8, 1, 0.05), cpuOnly);
  EXPECT_EQ(plain.status, 0) << plain.err;
  EXPECT_EQ(plain.out.find("device:"), std::string::npos) << plain.out;
}

TEST(TrainRunner, ProgressAndLogNameTheGpu) {
  train::StepRecord record;
  record.step = 1;
  record.steps = 2;
  record.tokens = true;
  record.device = "cuda";
  EXPECT_NE(train::progressLine(record).find(" | cuda | "), std::string::npos)
      << train::progressLine(record);
  const std::string json = train::jsonRecord(record);
  EXPECT_EQ(json.substr(json.size() - 19), ", \"device\": \"cuda\"}") << json;
}

TEST(TrainRunner, CudaWithoutAGpuFailsClearly) {
  if (!train::cudaBackendBuiltIn())
    GTEST_SKIP() << "this runner was built without the CUDA toolkit";
  // A device program is enough to make the runner open the GPU (the plan is
  // validated only once a GPU is there).
  plan::Plan withProgram = bigramTrainingPlan(16, 4, 8, 1, 0.05);
  withProgram.device.modules.push_back({"m", {}, {}, "// ptx"});
  train::GpuProbe probe;
  if (train::tryMakeCudaBackend(withProgram, probe) || probe.whyNot.empty() ||
      probe.whyNot.find("has no GPU code") != std::string::npos)
    GTEST_SKIP() << "a GPU opened here: " << probe.whyNot;
  const std::string whyNot = probe.whyNot;
  // No driver or no device: nothing to use, so auto falls back quietly.
  EXPECT_TRUE(probe.absent) << whyNot;
  RunnerOptions cuda;
  cuda.device = "cuda";
  Captured gpu = runInProcess(withProgram, cuda);
  EXPECT_EQ(gpu.status, 1);
  EXPECT_EQ(gpu.err, "train_test: error: " + whyNot + "\n");
  EXPECT_NE(gpu.err.find("use --device cpu"), std::string::npos) << gpu.err;
}

/// The JSONL records of \p text, parsed loosely: one map of key -> raw value
/// text per line. Fails the test on a line that is not a flat JSON object.
std::vector<std::map<std::string, std::string>> parseJsonl(const std::string &text) {
  std::vector<std::map<std::string, std::string>> records;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    EXPECT_EQ(line.front(), '{') << line;
    EXPECT_EQ(line.back(), '}') << line;
    std::map<std::string, std::string> record;
    std::istringstream fields(line.substr(1, line.size() - 2));
    std::string field;
    while (std::getline(fields, field, ',')) {
      const size_t colon = field.find(':');
      EXPECT_NE(colon, std::string::npos) << field;
      std::string key = field.substr(0, colon);
      key = key.substr(key.find('"') + 1);
      key = key.substr(0, key.find('"'));
      std::string value = field.substr(colon + 1);
      value = value.substr(value.find_first_not_of(' '));
      record[key] = value;
    }
    records.push_back(record);
  }
  return records;
}

double mean(const std::vector<double> &values, size_t begin, size_t end) {
  double sum = 0;
  for (size_t i = begin; i < end; ++i)
    sum += values[i];
  return sum / double(end - begin);
}

/// Reads the first and last losses of the summary line's ": loss FIRST ->
/// LAST"; false if \p out has no such line.
bool summaryLosses(const std::string &out, double &first, double &last) {
  const size_t arrow = out.find(": loss ");
  return arrow != std::string::npos &&
         std::sscanf(out.c_str() + arrow, ": loss %lf -> %lf", &first, &last) == 2;
}

TEST(TrainRunner, BigramLearnsTheSyntheticTaskDownToItsEntropy) {
  TempDir dir;
  const int64_t vocab = 16, batch = 8, sequence = 16, accumulation = 2;
  RunnerOptions options;
  options.steps = 150;
  options.seed = 3;
  options.logPath = dir.path("metrics.jsonl");
  Captured run =
      runInProcess(bigramTrainingPlan(vocab, batch, sequence, accumulation, 0.1), options);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.err, "");

  const auto records = parseJsonl(readFile(options.logPath));
  ASSERT_EQ(records.size(), 150u);
  std::vector<double> losses;
  for (size_t i = 0; i < records.size(); ++i) {
    const auto &r = records[i];
    EXPECT_EQ(r.at("step"), std::to_string(i + 1));
    EXPECT_EQ(r.at("tokens"), std::to_string((i + 1) * batch * sequence * accumulation));
    EXPECT_EQ(r.count("samples"), 0u);
    EXPECT_GE(std::stod(r.at("tokens_per_s")), 0);
    EXPECT_GE(std::stod(r.at("elapsed_s")), 0);
    EXPECT_FLOAT_EQ(std::stod(r.at("lr")), 0.1f); // an f32 buffer
    EXPECT_GT(std::stod(r.at("grad_norm")), 0);
    losses.push_back(std::stod(r.at("loss")));
  }
  // Starts at ln V (near-uniform logits), ends near the entropy floor.
  EXPECT_NEAR(losses.front(), std::log(double(vocab)), 0.05);
  const double floor = train::syntheticLanguageEntropy(vocab);
  const double late = mean(losses, 130, 150);
  EXPECT_LT(late, floor + 0.15);
  EXPECT_GT(late, floor - 0.15);

  // Start line, a progress line every 150 / 20 = 7 steps and at step 150,
  // end line.
  EXPECT_EQ(run.out.rfind("training @bigram (256 parameters) for 150 steps on "
                          "the synthetic permutation task (V = 16, 10% noise; "
                          "no model can beat a loss of 0.565); metrics -> " +
                              options.logPath + "\n",
                          0),
            0u)
      << run.out;
  EXPECT_NE(run.out.find("\nstep 7/150 | loss "), std::string::npos);
  EXPECT_NE(run.out.find("\nstep 147/150 | "), std::string::npos);
  EXPECT_NE(run.out.find("\nstep 150/150 | "), std::string::npos);
  EXPECT_EQ(run.out.find("\nstep 8/150 | "), std::string::npos);
  EXPECT_NE(run.out.find(" tok/s | "), std::string::npos);
  char summary[128];
  std::snprintf(summary, sizeof(summary), ": loss %.4f -> %.4f; metrics in ", losses.front(),
                losses.back());
  EXPECT_NE(run.out.find(summary + options.logPath + "\n"), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("\r"), std::string::npos);
}

TEST(TrainRunner, SameSeedSameRunDifferentSeedDifferentRun) {
  TempDir dir;
  auto losses = [&](uint64_t seed, const std::string &name) {
    RunnerOptions options;
    options.steps = 5;
    options.seed = seed;
    options.quiet = true;
    options.logPath = dir.path(name);
    Captured run = runInProcess(bigramTrainingPlan(16, 4, 8, 1, 0.05), options);
    EXPECT_EQ(run.status, 0) << run.err;
    std::vector<std::string> values;
    for (const auto &record : parseJsonl(readFile(options.logPath)))
      values.push_back(record.at("loss") + "/" + record.at("grad_norm"));
    return values;
  };
  const auto a = losses(1, "a"), b = losses(1, "b"), c = losses(2, "c");
  ASSERT_EQ(a.size(), 5u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(TrainRunner, BigramLearnsATextFile) {
  TempDir dir;
  // A repeating sentence: every byte is followed by a fixed byte most of the
  // time, so a bigram model gets far below ln 256.
  std::string text;
  for (int i = 0; i < 200; ++i)
    text += "the quick brown fox jumps over the lazy dog. ";
  writeFile(dir.path("fox.txt"), text);
  RunnerOptions options;
  options.steps = 60;
  options.dataPath = dir.path("fox.txt");
  options.quiet = true;
  Captured run = runInProcess(bigramTrainingPlan(256, 8, 32, 1, 0.1), options);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("on " + dir.path("fox.txt") +
                         " (text, 9,000 tokens); "
                         "no metrics log"),
            std::string::npos)
      << run.out;
  EXPECT_EQ(run.out.find("| loss "), std::string::npos); // --quiet
  double first, last;
  ASSERT_TRUE(summaryLosses(run.out, first, last)) << run.out;
  EXPECT_NEAR(first, std::log(256.0), 0.05);
  EXPECT_LT(last, 1.5);
}

TEST(TrainRunner, ClassifierCountsSamples) {
  TempDir dir;
  RunnerOptions options;
  options.steps = 40;
  options.logPath = dir.path("m.jsonl");
  options.quiet = true;
  Captured run = runInProcess(classifierTrainingPlan(32, 8, 4, 0.1), options);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("on the synthetic classification task (4 noisy "
                         "prototypes of 8 features)"),
            std::string::npos)
      << run.out;
  const auto records = parseJsonl(readFile(options.logPath));
  ASSERT_EQ(records.size(), 40u);
  EXPECT_EQ(records.back().at("samples"), std::to_string(40 * 32));
  EXPECT_EQ(records.back().count("tokens"), 0u);
  EXPECT_NEAR(std::stod(records.front().at("loss")), std::log(4.0), 0.1);
  EXPECT_LT(std::stod(records.back().at("loss")), 0.3);
}

TEST(TrainRunner, UnlearnableModelsGetRandomInputsAndAWarning) {
  RunnerOptions options;
  options.steps = 30;
  options.quiet = true;
  Captured run = runInProcess(regressionTrainingPlan(16, 4, 2, 0.05), options);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("for 30 steps on random inputs; "), std::string::npos) << run.out;
  EXPECT_EQ(run.err, "train_test: warning: this model's inputs are random each "
                     "step, so there is nothing to learn (no input feeds "
                     "cross_entropy's labels)\n");
  // W starts standard normal: loss ~ 1 + 4 = 5; SGD shrinks W towards 0,
  // where the loss is var(y) = 1.
  double first, last;
  ASSERT_TRUE(summaryLosses(run.out, first, last)) << run.out;
  EXPECT_GT(first, 2.0);
  EXPECT_LT(last, 1.6);
}

TEST(TrainRunner, DivergenceStopsAfterLoggingTheStep) {
  TempDir dir;
  RunnerOptions options;
  options.steps = 50;
  options.logPath = dir.path("m.jsonl");
  // A learning rate so large that SGD with momentum overflows.
  Captured run = runInProcess(regressionTrainingPlan(16, 4, 2, 1e6), options);
  EXPECT_EQ(run.status, 1);
  const auto records = parseJsonl(readFile(options.logPath));
  ASSERT_FALSE(records.empty());
  ASSERT_LT(records.size(), 50u);
  const auto &last = records.back();
  EXPECT_TRUE(last.at("loss") == "null" || last.at("grad_norm") == "null") << last.at("loss");
  EXPECT_NE(run.err.find("train_test: error: training diverged at step " + last.at("step") +
                         ": the loss is "),
            std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("try a lower learning rate"), std::string::npos);
}

TEST(TrainRunner, DataAndLogErrorsStopBeforeTraining) {
  TempDir dir;
  const plan::Plan lm = bigramTrainingPlan(16, 4, 8, 1, 0.05);
  RunnerOptions missing;
  missing.dataPath = dir.path("none.bin");
  Captured a = runInProcess(lm, missing);
  EXPECT_EQ(a.status, 1);
  EXPECT_EQ(a.err, "train_test: error: cannot read data file " + dir.path("none.bin") +
                       ": No such file or directory\n");
  EXPECT_EQ(a.out, "");

  RunnerOptions badLog;
  badLog.logPath = dir.path("no/such/dir/m.jsonl");
  Captured b = runInProcess(lm, badLog);
  EXPECT_EQ(b.status, 1);
  EXPECT_EQ(b.err, "train_test: error: cannot open metrics log " + badLog.logPath +
                       ": No such file or directory\n");
  EXPECT_EQ(b.out, "");

  RunnerOptions classifierData;
  classifierData.dataPath = dir.path("x.bin");
  Captured c = runInProcess(classifierTrainingPlan(8, 4, 3, 0.1), classifierData);
  EXPECT_EQ(c.status, 1);
  EXPECT_NE(c.err.find("token files are for language models"), std::string::npos);
}

TEST(TrainRunner, FullDiskWhileLoggingIsAnError) {
  RunnerOptions options;
  options.steps = 3;
  options.logPath = "/dev/full";
  Captured run = runInProcess(bigramTrainingPlan(16, 4, 8, 1, 0.05), options);
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.err, "train_test: error: cannot write metrics log /dev/full: "
                     "No space left on device\n");
}

TEST(TrainRunner, InteractiveProgressRewritesOneLine) {
  RunnerOptions options;
  options.steps = 4;
  Captured run = runInProcess(bigramTrainingPlan(16, 4, 8, 1, 0.05), options, true);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("\rstep 1/4 | "), std::string::npos);
  EXPECT_NE(run.out.find("\rstep 4/4 | "), std::string::npos);
  // One newline ends the progress line before the summary (a line shorter
  // than the one it rewrites is padded with spaces to erase it).
  const size_t summary = run.out.find("\ntrained 4 steps in ");
  ASSERT_NE(summary, std::string::npos) << run.out;
  const size_t end = run.out.find_last_not_of(' ', summary - 1);
  ASSERT_NE(end, std::string::npos);
  EXPECT_EQ(run.out.substr(0, end + 1).substr(end + 1 - 8), "ETA 0:00") << run.out;
  EXPECT_EQ(run.out.find('\n', run.out.find("\rstep 1/4 | ")), summary) << run.out;
}

TEST(TrainRunner, BundledExecutableTrains) {
  TempDir dir;
  const std::string exe = dir.path("train_bigram");
  train::writeTrainingExecutable(kRunner, bigramTrainingPlan(16, 4, 8, 1, 0.1), exe);
  CommandResult help = runCommand("'" + exe + "' --help");
  EXPECT_EQ(help.status, 0);
  EXPECT_EQ(help.output.rfind("usage: train_bigram [--steps N] [options]\n", 0), 0u) << help.output;

  CommandResult info = runCommand("'" + exe + "' --info");
  EXPECT_EQ(info.status, 0);
  EXPECT_NE(info.output.find("model @bigram\n"), std::string::npos);

  CommandResult bad = runCommand("'" + exe + "' --steps nope");
  EXPECT_EQ(bad.status, 1);
  EXPECT_EQ(bad.output, "train_bigram: error: --steps expects a non-negative "
                        "integer, got 'nope' (see 'train_bigram --help')\n");

  CommandResult cuda = runCommand("'" + exe + "' --device cuda");
  EXPECT_EQ(cuda.status, 1);
  EXPECT_NE(cuda.output.find("this plan has no GPU code"), std::string::npos) << cuda.output;

  const std::string log = dir.path("m.jsonl");
  CommandResult trained =
      runCommand("'" + exe + "' --steps 40 --seed 1 --threads 1 --log '" + log + "'");
  ASSERT_EQ(trained.status, 0) << trained.output;
  EXPECT_NE(trained.output.find("\nstep 40/40 | "), std::string::npos);
  EXPECT_NE(trained.output.find("trained 40 steps in "), std::string::npos);
  const auto records = parseJsonl(readFile(log));
  ASSERT_EQ(records.size(), 40u);
  EXPECT_LT(std::stod(records.back().at("loss")), std::stod(records.front().at("loss")) - 1.0);

  // The same run with other thread counts gives identical numbers.
  CommandResult again = runCommand("AMPC_CPU_THREADS=2 '" + exe +
                                   "' --steps 40 --seed 1 --quiet --log '" + log + ".2'");
  ASSERT_EQ(again.status, 0) << again.output;
  const auto repeat = parseJsonl(readFile(log + ".2"));
  ASSERT_EQ(repeat.size(), 40u);
  for (size_t i = 0; i < 40; ++i)
    EXPECT_EQ(repeat[i].at("loss"), records[i].at("loss")) << i;
}

TEST(TrainRunner, BundledForwardOnlyPlanIsRefused) {
  TempDir dir;
  const std::string exe = dir.path("eval_only");
  train::writeTrainingExecutable(kRunner, forwardOnlyPlan(), exe);
  CommandResult run = runCommand("'" + exe + "' --steps 3");
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.output.find("eval_only: error: this executable's plan has no "
                            "optimizer step"),
            std::string::npos)
      << run.output;
  CommandResult bare = runCommand("'" + kRunner + "'");
  EXPECT_EQ(bare.status, 1);
  EXPECT_NE(bare.output.find("this executable carries no training plan"), std::string::npos);
}

//===----------------------------------------------------------------------===//
// Loss scaling
//===----------------------------------------------------------------------===//

TEST(TrainRunner, ProgressLineAndJsonRecordWithLossScaling) {
  train::StepRecord record;
  record.step = 12;
  record.steps = 100;
  record.loss = 2.5;
  record.gradNorm = 0.5;
  record.learningRate = 1e-3;
  record.units = 1200;
  record.elapsed = 2;
  record.lossScaling = true;
  record.lossScale = 65536;
  EXPECT_EQ(train::progressLine(record),
            "step 12/100 | loss 2.5000 | grad norm 0.500 | lr 1.00e-03 | "
            "scale 65536 | 600.0 samples/s | 0:02 elapsed, ETA 0:14");
  EXPECT_EQ(train::jsonRecord(record),
            "{\"step\": 12, \"loss\": 2.5, \"grad_norm\": 0.5, \"lr\": 0.001, "
            "\"loss_scale\": 65536, \"skipped\": false, \"samples\": 1200, "
            "\"samples_per_s\": 600, \"elapsed_s\": 2, \"step_ms\": 0}");
  record.lossScale = 32768;
  record.skipped = true;
  record.skippedSteps = 3;
  EXPECT_NE(
      train::progressLine(record).find("| lr 1.00e-03 | scale 32768 | skipped 3 | 600.0 samples/s"),
      std::string::npos)
      << train::progressLine(record);
  EXPECT_NE(train::jsonRecord(record).find("\"loss_scale\": 32768, \"skipped\": true, "),
            std::string::npos);
  EXPECT_EQ(train::formatScale(0.25), "0.25");
  EXPECT_EQ(train::formatScale(0x1p126), "8.50706e+37");
}

TEST(TrainRunner, PowerOfTwoLossScalingTrainsExactlyLikeNone) {
  // Scaling by 2^16 and unscaling is exact while nothing overflows, so the
  // losses and gradient norms match the unscaled run bit for bit.
  TempDir dir;
  const plan::Plan plain = bigramTrainingPlan(16, 4, 8, 2, 0.1);
  const plan::Plan scaled = withLossScaling(plain, plan::LossScaleMode::Dynamic, 65536);
  auto run = [&](const plan::Plan &p, const std::string &name) {
    RunnerOptions options;
    options.steps = 12;
    options.seed = 4;
    options.quiet = true;
    options.logPath = dir.path(name);
    Captured captured = runInProcess(p, options);
    EXPECT_EQ(captured.status, 0) << captured.err;
    return parseJsonl(readFile(options.logPath));
  };
  const auto a = run(plain, "plain.jsonl"), b = run(scaled, "scaled.jsonl");
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), 12u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].at("loss"), b[i].at("loss")) << i;
    EXPECT_EQ(a[i].at("grad_norm"), b[i].at("grad_norm")) << i;
    EXPECT_EQ(a[i].count("loss_scale"), 0u);
    EXPECT_EQ(b[i].at("loss_scale"), "65536");
    EXPECT_EQ(b[i].at("skipped"), "false");
  }
}

TEST(TrainRunner, InjectedOverflowsAreSkippedAndLogged) {
  TempDir dir;
  RunnerOptions options;
  options.steps = 8;
  options.seed = 2;
  options.logPath = dir.path("m.jsonl");
  options.injectOverflow = {3, 5};
  const plan::Plan scaled =
      withLossScaling(bigramTrainingPlan(16, 4, 8, 2, 0.1), plan::LossScaleMode::Dynamic, 65536);
  Captured run = runInProcess(scaled, options);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.err, "");
  const auto records = parseJsonl(readFile(options.logPath));
  ASSERT_EQ(records.size(), 8u);
  const std::vector<std::string> scales = {"65536", "65536", "32768", "32768",
                                           "16384", "16384", "16384", "16384"};
  for (size_t i = 0; i < records.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(records[i].at("loss_scale"), scales[i]);
    EXPECT_EQ(records[i].at("skipped"), i == 2 || i == 4 ? "true" : "false");
    // Injected overflows leave the loss and the gradient norm finite.
    EXPECT_NE(records[i].at("loss"), "null");
  }
  EXPECT_NE(run.out.find("\nstep 3: gradients were not finite; the update was "
                         "skipped and the loss scale halved to 32768\n"),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("\nstep 5: gradients were not finite; the update was "
                         "skipped and the loss scale halved to 16384\n"),
            std::string::npos);
  EXPECT_EQ(run.out.find("step 4: gradients"), std::string::npos);
  // Progress lines (every step here) show the scale and, from step 3, the
  // skipped count.
  EXPECT_NE(run.out.find("\nstep 2/8 | loss "), std::string::npos);
  EXPECT_NE(run.out.find(" | scale 65536 | "), std::string::npos);
  // No progress line before step 3's shows a skipped count.
  EXPECT_EQ(run.out.substr(0, run.out.find("\nstep 3/8 | ")).find("| skipped"), std::string::npos);
  EXPECT_NE(run.out.find(" | scale 32768 | skipped 1 | "), std::string::npos);
  EXPECT_NE(run.out.find(" | scale 16384 | skipped 2 | "), std::string::npos);

  // The same injection without loss scaling warns and changes nothing.
  options.logPath = dir.path("plain.jsonl");
  Captured plain = runInProcess(bigramTrainingPlan(16, 4, 8, 2, 0.1), options);
  ASSERT_EQ(plain.status, 0) << plain.err;
  EXPECT_EQ(plain.err, "train_test: warning: --inject-overflow has no effect: "
                       "this plan has no loss scaling\n");
  EXPECT_EQ(plain.out.find("gradients were not finite"), std::string::npos);
}

TEST(TrainRunner, FloorWarningIsGivenOnce) {
  RunnerOptions options;
  options.steps = 6;
  options.injectOverflow = {1, 2, 3, 4, 5};
  const plan::Plan scaled = withLossScaling(bigramTrainingPlan(16, 4, 8, 1, 0.1),
                                            plan::LossScaleMode::Dynamic, 1024, 256);
  Captured run = runInProcess(scaled, options);
  ASSERT_EQ(run.status, 0) << run.err;
  // 1024 -> 512 -> 256 -> floor (warn) -> floor -> floor.
  EXPECT_EQ(run.err, "train_test: warning: the loss scale reached its floor 256; "
                     "gradients keep overflowing \u2014 consider bf16 or a lower "
                     "learning rate\n");
  EXPECT_NE(run.out.find("\nstep 2: gradients were not finite; the update was "
                         "skipped and the loss scale halved to 256\n"),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("\nstep 3: gradients were not finite; the update was "
                         "skipped and the loss scale stays at its floor 256\n"),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find(" | scale 256 | skipped 5 | "), std::string::npos);
}

TEST(TrainRunner, StaticScalingSkipsWithoutChangingTheScale) {
  RunnerOptions options;
  options.steps = 3;
  options.injectOverflow = {2};
  Captured run = runInProcess(
      withLossScaling(bigramTrainingPlan(16, 4, 8, 1, 0.1), plan::LossScaleMode::Static, 128),
      options);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("\nstep 2: gradients were not finite; the update was "
                         "skipped (the loss scale stays 128)\n"),
            std::string::npos)
      << run.out;
}

TEST(TrainRunner, NaturalOverflowNamesTheFirstNonFiniteInstruction) {
  // With one sample and one output the regression's loss gradient is
  // 2 * seed: a scale of 2^127 makes it 2^128, which overflows f32 in the
  // mul of instruction 3 (matmul, mse_loss, grad_seed, mul). The runner
  // halves the scale until the gradients fit and names where the inf first
  // appeared.
  TempDir dir;
  RunnerOptions options;
  options.steps = 12;
  options.logPath = dir.path("m.jsonl");
  Captured run = runInProcess(withLossScaling(regressionTrainingPlan(1, 4, 1, 0.05),
                                              plan::LossScaleMode::Dynamic, 0x1p127f, 0, true),
                              options);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("\nstep 1: gradients were not finite; the update was "
                         "skipped and the loss scale halved to 8.50706e+37; "
                         "the first non-finite value came from instruction 3 "
                         "(mul)\n"),
            std::string::npos)
      << run.out;
  const auto records = parseJsonl(readFile(options.logPath));
  ASSERT_EQ(records.size(), 12u);
  EXPECT_EQ(records[0].at("skipped"), "true");
  // The step whose gradients fit is applied and training goes on.
  EXPECT_EQ(records.back().at("skipped"), "false");
  for (const auto &record : records)
    EXPECT_NE(record.at("loss"), "null");
}

TEST(TrainRunner, NonFiniteLossStopsAfterFiveStepsWithScaling) {
  // SGD with an absurd learning rate blows the weights up; afterwards the
  // loss itself is infinite or NaN. Loss scaling skips the overflowing
  // steps but cannot repair the loss, so training stops after more than
  // five non-finite losses in a row.
  TempDir dir;
  RunnerOptions options;
  options.steps = 60;
  options.logPath = dir.path("m.jsonl");
  Captured run = runInProcess(
      withLossScaling(regressionTrainingPlan(16, 4, 2, 1e30), plan::LossScaleMode::Dynamic, 65536),
      options);
  EXPECT_EQ(run.status, 1);
  const auto records = parseJsonl(readFile(options.logPath));
  ASSERT_GE(records.size(), 6u);
  ASSERT_LT(records.size(), 60u);
  for (size_t i = records.size() - 6; i < records.size(); ++i)
    EXPECT_EQ(records[i].at("loss"), "null") << i;
  EXPECT_NE(records[records.size() - 7].at("loss"), "null");
  EXPECT_NE(run.err.find("train_test: error: training diverged at step " +
                         records.back().at("step") +
                         ": the loss has not been finite for 6 consecutive "
                         "steps, which loss scaling cannot fix"),
            std::string::npos)
      << run.err;
}

TEST(TrainRunner, InfoShowsPrecisionAndLossScaling) {
  plan::Plan mixed =
      withParameterCopy(withLossScaling(bigramTrainingPlan(16, 4, 8, 2, 0.05),
                                        plan::LossScaleMode::Dynamic, 65536, 1, true),
                        "table", plan::DType::BF16);
  mixed.trainingSummary += " precision=bf16 loss_scaling=dynamic";
  RunnerOptions options;
  options.info = true;
  Captured info = runInProcess(mixed, options);
  EXPECT_EQ(info.status, 0);
  EXPECT_NE(info.out.find("training: adamw lr=0.050000 clip=1 precision=bf16 "
                          "loss_scaling=dynamic\n"
                          "loss scaling: dynamic, initial scale 65536, x2 "
                          "after 2000 finite steps, x0.5 and the step skipped "
                          "on overflow, floor 1\n"
                          "parameter copies: 1 (bf16), refreshed once per "
                          "optimizer step\n"
                          "non-finite check: on (names the first instruction "
                          "that produces an inf or NaN)\n"
                          "task: language model"),
            std::string::npos)
      << info.out;

  plan::Plan fixed =
      withLossScaling(bigramTrainingPlan(16, 4, 8, 2, 0.05), plan::LossScaleMode::Static, 1024);
  Captured staticInfo = runInProcess(fixed, options);
  EXPECT_NE(staticInfo.out.find("\nloss scaling: static, scale 1024\ntask: "), std::string::npos)
      << staticInfo.out;
}

TEST(TrainRunner, BundledExecutableInjectsOverflows) {
  TempDir dir;
  const std::string exe = dir.path("train_scaled");
  train::writeTrainingExecutable(
      kRunner,
      withParameterCopy(
          withLossScaling(bigramTrainingPlan(16, 4, 8, 1, 0.1), plan::LossScaleMode::Dynamic, 4096),
          "table", plan::DType::BF16),
      exe);
  const std::string log = dir.path("m.jsonl");
  CommandResult run = runCommand("'" + exe + "' --steps 4 --inject-overflow 2 --log '" + log + "'");
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("step 2: gradients were not finite; the update "
                            "was skipped and the loss scale halved to 2048"),
            std::string::npos)
      << run.output;
  const auto records = parseJsonl(readFile(log));
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records[1].at("skipped"), "true");
  EXPECT_EQ(records[3].at("loss_scale"), "2048");
  CommandResult bad = runCommand("'" + exe + "' --inject-overflow 0");
  EXPECT_EQ(bad.status, 1);
  EXPECT_EQ(bad.output, "train_scaled: error: --inject-overflow steps are "
                        "1-based, got 0 (see 'train_scaled --help')\n");
}

} // namespace
