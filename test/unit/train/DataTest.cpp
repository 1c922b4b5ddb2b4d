//===- DataTest.cpp - Token files, synthetic tasks and batches ------------===//

#include "TrainTestUtils.h"

#include "runtime/train/Data.h"
#include "test/unit/runtime/PlanTestUtils.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

using namespace ampc;
using namespace ampc::test;
using plan::InputUse;
using train::DataError;
using train::DataFormat;
using train::TaskKind;

namespace {

/// Expects \p body to throw DataError whose message contains \p fragment.
template <typename F> void expectDataError(F body, const std::string &fragment) {
  try {
    body();
    ADD_FAILURE() << "expected a DataError mentioning: " << fragment;
  } catch (const DataError &error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(fragment), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

/// Decodes little-endian integers of \p width bytes.
std::vector<int64_t> decodeIntegers(const std::vector<uint8_t> &bytes, size_t width) {
  std::vector<int64_t> values(bytes.size() / width);
  for (size_t i = 0; i < values.size(); ++i) {
    uint64_t bits = 0;
    for (size_t b = 0; b < width; ++b)
      bits |= uint64_t(bytes[i * width + b]) << (8 * b);
    values[i] = width == 4 ? int64_t(int32_t(uint32_t(bits))) : int64_t(bits);
  }
  return values;
}

/// Decodes little-endian f32 values.
std::vector<double> decodeFloats(const std::vector<uint8_t> &bytes) {
  std::vector<double> values(bytes.size() / 4);
  for (size_t i = 0; i < values.size(); ++i) {
    float value;
    std::memcpy(&value, &bytes[4 * i], 4);
    values[i] = value;
  }
  return values;
}

/// The tokens 0, 1, ..., count - 1, each modulo \p vocab.
std::vector<int64_t> ramp(int64_t count, int64_t vocab) {
  std::vector<int64_t> tokens(count);
  for (int64_t i = 0; i < count; ++i)
    tokens[i] = i % vocab;
  return tokens;
}

TEST(TrainData, DefaultFormatFollowsTheExtension) {
  EXPECT_EQ(train::defaultDataFormat("data/train.bin"), DataFormat::Tokens);
  EXPECT_EQ(train::defaultDataFormat("shakespeare.txt"), DataFormat::Text);
  EXPECT_EQ(train::defaultDataFormat("bin"), DataFormat::Text);
  EXPECT_EQ(train::defaultDataFormat("x.bin.txt"), DataFormat::Text);
}

TEST(TrainData, Uint16TokenFileLoadsLittleEndian) {
  TempDir dir;
  const std::vector<int64_t> tokens = {0, 1, 255, 256, 50303, 65535 % 50304, 7};
  writeFile(dir.path("t.bin"), uint16Tokens(tokens));
  train::TokenFile file(dir.path("t.bin"), DataFormat::Tokens, 50304, 4, 0);
  ASSERT_EQ(file.size(), 7);
  for (int64_t i = 0; i < 7; ++i)
    EXPECT_EQ(file.token(i), tokens[i]) << i;
  EXPECT_EQ(file.describe(), dir.path("t.bin") + " (tokens, 7 tokens)");
}

TEST(TrainData, TextFileIsOneTokenPerByte) {
  TempDir dir;
  writeFile(dir.path("t.txt"), std::string("Hi \xff\n", 5));
  train::TokenFile file(dir.path("t.txt"), DataFormat::Text, 256, 2, 0);
  ASSERT_EQ(file.size(), 5);
  EXPECT_EQ(file.token(0), 'H');
  EXPECT_EQ(file.token(2), ' ');
  EXPECT_EQ(file.token(3), 255);
  EXPECT_EQ(file.token(4), '\n');
  // A smaller vocabulary works when every byte is below it.
  writeFile(dir.path("small.txt"), "abcabc");
  train::TokenFile small(dir.path("small.txt"), DataFormat::Text, 'd', 2, 0);
  EXPECT_EQ(small.token(5), 'c');
}

TEST(TrainData, TokenFileErrors) {
  TempDir dir;
  const std::string missing = dir.path("missing.bin");
  expectDataError([&] { train::TokenFile(missing, DataFormat::Tokens, 256, 4, 0); },
                  "cannot read data file " + missing + ": No such file or directory");
  expectDataError([&] { train::TokenFile(dir.dir(), DataFormat::Text, 256, 4, 0); },
                  "cannot read data file " + dir.dir() + ": Is a directory");

  writeFile(dir.path("odd.bin"), std::string(11, '\0'));
  expectDataError([&] { train::TokenFile(dir.path("odd.bin"), DataFormat::Tokens, 256, 4, 0); },
                  "data file " + dir.path("odd.bin") + " has an odd number of bytes (11)");

  writeFile(dir.path("short.bin"), uint16Tokens(ramp(8, 256)));
  expectDataError([&] { train::TokenFile(dir.path("short.bin"), DataFormat::Tokens, 256, 8, 0); },
                  "data file " + dir.path("short.bin") +
                      " has 8 tokens; one batch row needs T+1 = 9");
  // Exactly T+1 tokens is enough.
  EXPECT_EQ(train::TokenFile(dir.path("short.bin"), DataFormat::Tokens, 256, 7, 0).size(), 8);
  writeFile(dir.path("empty.txt"), "");
  expectDataError([&] { train::TokenFile(dir.path("empty.txt"), DataFormat::Text, 256, 4, 0); },
                  "has 0 tokens; one batch row needs T+1 = 5");

  std::vector<int64_t> tokens = ramp(2000, 50000);
  tokens[1234] = 60000;
  tokens[1500] = 65535;
  writeFile(dir.path("big.bin"), uint16Tokens(tokens));
  expectDataError([&] { train::TokenFile(dir.path("big.bin"), DataFormat::Tokens, 50000, 16, 0); },
                  "data file " + dir.path("big.bin") +
                      ": token 60000 at position 1234 is outside the model's vocabulary "
                      "(V = 50000)");

  writeFile(dir.path("high.txt"), "hello, world");
  expectDataError([&] { train::TokenFile(dir.path("high.txt"), DataFormat::Text, 100, 4, 0); },
                  "token 104 at position 0 is outside the model's vocabulary (V = 100); "
                  "text data has one token per byte");
}

/// A language plan: tokens i32 [B, T] (Indices), targets i64 [B, T]
/// (Labels), both bounded by \p vocab.
plan::Plan languagePlan(int64_t batch, int64_t sequence, int64_t vocab) {
  PlanBuilder b("lm");
  b.input("tokens", DType::I32, {batch, sequence}, vocab);
  b.plan.inputs.back().use = InputUse::Indices;
  b.input("targets", DType::I64, {batch, sequence}, vocab);
  b.plan.inputs.back().use = InputUse::Labels;
  return b.plan;
}

TEST(TrainData, RecognisesTasks) {
  train::Task lm = train::analyzeTask(languagePlan(4, 16, 300));
  ASSERT_EQ(lm.kind, TaskKind::Language) << lm.reason;
  EXPECT_EQ(lm.first.name, "tokens");
  EXPECT_EQ(lm.labels.name, "targets");
  EXPECT_EQ(lm.batch, 4);
  EXPECT_EQ(lm.sequence, 16);
  EXPECT_EQ(lm.classes, 300);
  EXPECT_EQ(lm.firstDType, DType::I32);
  EXPECT_EQ(lm.labelsDType, DType::I64);

  train::Task classifier = train::analyzeTask(classifierTrainingPlan(8, 5, 3, 0.1));
  ASSERT_EQ(classifier.kind, TaskKind::Classification) << classifier.reason;
  EXPECT_EQ(classifier.first.name, "x");
  EXPECT_EQ(classifier.labels.name, "labels");
  EXPECT_EQ(classifier.batch, 8);
  EXPECT_EQ(classifier.features, 5);
  EXPECT_EQ(classifier.classes, 3);

  train::Task regression = train::analyzeTask(regressionTrainingPlan(8, 4, 2, 0.1));
  EXPECT_EQ(regression.kind, TaskKind::Unlearnable);
  EXPECT_NE(regression.reason.find("no input feeds cross_entropy's labels"), std::string::npos)
      << regression.reason;

  // Tokens and targets of different shapes are not a language model.
  plan::Plan mismatched = languagePlan(4, 16, 300);
  mismatched.buffers[mismatched.inputs[1].buffer].shape = {4, 8};
  train::Task bad = train::analyzeTask(mismatched);
  EXPECT_EQ(bad.kind, TaskKind::Unlearnable);
  EXPECT_NE(bad.reason.find("one shape [B, T]"), std::string::npos) << bad.reason;
}

TEST(TrainData, WindowsAreConsecutiveTokensAndShiftedTargets) {
  TempDir dir;
  const int64_t count = 1000, batch = 6, sequence = 10, vocab = 1000;
  writeFile(dir.path("ramp.bin"), uint16Tokens(ramp(count, vocab)));
  const train::Task task = train::analyzeTask(languagePlan(batch, sequence, vocab));
  train::DataOptions options;
  options.path = dir.path("ramp.bin");
  options.seed = 7;
  auto source = train::makeBatchSource(task, options);
  ASSERT_TRUE(source);
  EXPECT_EQ(source->describe(), dir.path("ramp.bin") + " (tokens, 1,000 tokens)");
  std::set<int64_t> starts;
  for (uint64_t step = 0; step < 50; ++step) {
    const std::vector<train::InputData> inputs = source->batch(step);
    ASSERT_EQ(inputs.size(), 2u);
    EXPECT_EQ(inputs[0].name, "tokens");
    EXPECT_EQ(inputs[1].name, "targets");
    ASSERT_EQ(inputs[0].bytes.size(), size_t(batch * sequence * 4)); // i32
    ASSERT_EQ(inputs[1].bytes.size(), size_t(batch * sequence * 8)); // i64
    const std::vector<int64_t> tokens = decodeIntegers(inputs[0].bytes, 4);
    const std::vector<int64_t> targets = decodeIntegers(inputs[1].bytes, 8);
    for (int64_t r = 0; r < batch; ++r) {
      // The file is 0, 1, 2, ...: a window is a run of consecutive values.
      const int64_t start = tokens[r * sequence];
      ASSERT_GE(start, 0);
      ASSERT_LE(start + sequence, count - 1);
      starts.insert(start);
      for (int64_t t = 0; t < sequence; ++t) {
        EXPECT_EQ(tokens[r * sequence + t], start + t);
        EXPECT_EQ(targets[r * sequence + t], start + t + 1);
      }
    }
  }
  // 300 rows over 990 possible starts: widely spread.
  EXPECT_GT(starts.size(), 200u);
  EXPECT_LT(*starts.begin(), 50);
  EXPECT_GT(*starts.rbegin(), 940);
}

TEST(TrainData, BatchesAreDeterministicPerSeedAndMicroStep) {
  TempDir dir;
  writeFile(dir.path("ramp.bin"), uint16Tokens(ramp(5000, 1000)));
  const train::Task task = train::analyzeTask(languagePlan(4, 8, 1000));
  auto make = [&](uint64_t seed, bool file) {
    train::DataOptions options;
    options.seed = seed;
    if (file)
      options.path = dir.path("ramp.bin");
    return train::makeBatchSource(task, options);
  };
  for (bool file : {true, false}) {
    auto a = make(3, file), b = make(3, file), c = make(4, file);
    EXPECT_EQ(a->batch(5)[0].bytes, b->batch(5)[0].bytes);
    EXPECT_EQ(a->batch(5)[1].bytes, b->batch(5)[1].bytes);
    EXPECT_NE(a->batch(5)[0].bytes, a->batch(6)[0].bytes);
    EXPECT_NE(a->batch(5)[0].bytes, c->batch(5)[0].bytes);
  }
  const train::Task classifier = train::analyzeTask(classifierTrainingPlan(8, 5, 3, 0.1));
  auto a = train::makeClassificationBatches(classifier, 3);
  auto b = train::makeClassificationBatches(classifier, 3);
  auto c = train::makeClassificationBatches(classifier, 4);
  EXPECT_EQ(a->batch(2)[0].bytes, b->batch(2)[0].bytes);
  EXPECT_EQ(a->batch(2)[1].bytes, b->batch(2)[1].bytes);
  EXPECT_NE(a->batch(2)[0].bytes, a->batch(3)[0].bytes);
  EXPECT_NE(a->batch(2)[0].bytes, c->batch(2)[0].bytes);
}

TEST(TrainData, SyntheticTaskMostlyFollowsThePermutation) {
  const int64_t vocab = 16, length = 65;
  train::SyntheticTokens source(vocab, 11);
  std::vector<int64_t> perm = source.permutation();
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, ramp(vocab, vocab)); // a permutation
  EXPECT_NE(perm, ramp(vocab, vocab));   // not the identity
  EXPECT_NE(perm, train::SyntheticTokens(vocab, 12).permutation());

  // 50,000 transitions: follow rate 0.9 + 0.1 / V, and the true model's mean
  // cross-entropy equals the entropy floor.
  const double other = 0.1 / vocab, follow = 0.9 + other;
  int64_t transitions = 0, followed = 0;
  double crossEntropy = 0;
  std::vector<int64_t> counts(vocab, 0);
  std::vector<int64_t> window(length);
  for (uint64_t step = 0; step < 100; ++step) {
    for (int64_t row = 0; row < 8; ++row) {
      source.window(step, row, length, window.data());
      for (int64_t t = 0; t < length; ++t) {
        ASSERT_GE(window[t], 0);
        ASSERT_LT(window[t], vocab);
        ++counts[window[t]];
      }
      for (int64_t t = 1; t < length; ++t) {
        const bool hit = window[t] == perm[window[t - 1]];
        followed += hit;
        crossEntropy -= std::log(hit ? follow : other);
        ++transitions;
      }
    }
  }
  ASSERT_EQ(transitions, 51200);
  const double rate = double(followed) / transitions;
  EXPECT_NEAR(rate, follow, 0.006); // 4.5 standard deviations
  EXPECT_NEAR(crossEntropy / transitions, train::syntheticLanguageEntropy(vocab), 0.03);
  // Every token occurs (the stationary distribution is uniform).
  for (int64_t v = 0; v < vocab; ++v)
    EXPECT_GT(counts[v], 52000 / vocab / 2) << v;
}

TEST(TrainData, SyntheticEntropyMatchesItsDefinition) {
  EXPECT_NEAR(train::syntheticLanguageEntropy(256), 0.8761856, 1e-6);
  EXPECT_NEAR(train::syntheticLanguageEntropy(50304), 1.4076391, 1e-6);
  for (int64_t vocab : {2, 16, 256, 50304}) {
    // Direct: -sum p ln p over the next-token distribution.
    const double other = 0.1 / vocab, follow = 0.9 + other;
    double direct = -follow * std::log(follow);
    for (int64_t v = 1; v < vocab; ++v)
      direct -= other * std::log(other);
    EXPECT_NEAR(train::syntheticLanguageEntropy(vocab), direct, 1e-9) << vocab;
    // Learnable: far below the uniform model's ln V.
    EXPECT_GT(train::syntheticLanguageEntropy(vocab), 0);
    EXPECT_LT(train::syntheticLanguageEntropy(vocab), 0.3 * std::log(vocab) + 0.3);
  }
}

TEST(TrainData, SyntheticClassificationIsPrototypesPlusNoise) {
  const int64_t batch = 64, features = 4, classes = 3;
  const train::Task task =
      train::analyzeTask(classifierTrainingPlan(batch, features, classes, 0.1));
  auto source = train::makeClassificationBatches(task, 5);
  // Per class: mean and spread of each feature over 200 batches.
  std::vector<double> sum(classes * features, 0), squares(classes * features, 0);
  std::vector<int64_t> count(classes, 0);
  for (uint64_t step = 0; step < 200; ++step) {
    const std::vector<train::InputData> inputs = source->batch(step);
    ASSERT_EQ(inputs[0].name, "x");
    ASSERT_EQ(inputs[1].name, "labels");
    const std::vector<double> x = decodeFloats(inputs[0].bytes);
    const std::vector<int64_t> labels = decodeIntegers(inputs[1].bytes, 4);
    ASSERT_EQ(x.size(), size_t(batch * features));
    ASSERT_EQ(labels.size(), size_t(batch));
    for (int64_t r = 0; r < batch; ++r) {
      ASSERT_GE(labels[r], 0);
      ASSERT_LT(labels[r], classes);
      ++count[labels[r]];
      for (int64_t f = 0; f < features; ++f) {
        sum[labels[r] * features + f] += x[r * features + f];
        squares[labels[r] * features + f] += x[r * features + f] * x[r * features + f];
      }
    }
  }
  for (int64_t c = 0; c < classes; ++c) {
    // Uniform labels: 12,800 / 3 each, within 5 standard deviations.
    EXPECT_NEAR(count[c], 12800.0 / 3, 5 * std::sqrt(12800 * 2.0 / 9)) << c;
    for (int64_t f = 0; f < features; ++f) {
      const double mean = sum[c * features + f] / count[c];
      const double variance = squares[c * features + f] / count[c] - mean * mean;
      EXPECT_NEAR(std::sqrt(variance), 0.5, 0.03) << c << "," << f;
    }
  }
  // The prototypes (class means) differ from each other by far more than the
  // noise: the task is learnable.
  for (int64_t c = 1; c < classes; ++c) {
    double distance = 0;
    for (int64_t f = 0; f < features; ++f) {
      const double d = sum[c * features + f] / count[c] - sum[f] / count[0];
      distance += d * d;
    }
    EXPECT_GT(std::sqrt(distance), 0.5) << c;
  }
}

TEST(TrainData, DataFilesAreForLanguageModelsOnly) {
  train::DataOptions options;
  options.path = "whatever.bin";
  expectDataError(
      [&] {
        train::makeBatchSource(train::analyzeTask(classifierTrainingPlan(8, 5, 3, 0.1)), options);
      },
      "token files are for language models (tokens and targets inputs); this model trains on its "
      "synthetic task, or on NumPy arrays: --data FILE.npz");
  // Without --data an unlearnable model gets no source: random inputs.
  EXPECT_FALSE(
      train::makeBatchSource(train::analyzeTask(regressionTrainingPlan(8, 4, 2, 0.1)), {}));
}

TEST(TrainData, EncodesInputDTypes) {
  EXPECT_EQ(train::encodeIntegers(DType::I32, {1, -2}),
            (std::vector<uint8_t>{1, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff}));
  EXPECT_EQ(train::encodeIntegers(DType::I64, {258}),
            (std::vector<uint8_t>{2, 1, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(train::encodeReals(DType::F32, {1.0}), (std::vector<uint8_t>{0, 0, 0x80, 0x3f}));
  EXPECT_EQ(train::encodeReals(DType::BF16, {1.0}), (std::vector<uint8_t>{0x80, 0x3f}));
  EXPECT_EQ(train::encodeReals(DType::F16, {1.0}), (std::vector<uint8_t>{0x00, 0x3c}));
  EXPECT_EQ(train::withCommas(0), "0");
  EXPECT_EQ(train::withCommas(999), "999");
  EXPECT_EQ(train::withCommas(1234567), "1,234,567");
}

} // namespace
