//===- Data.cpp - Training data for the standalone training binary --------===//

#include "runtime/train/Data.h"

#include "runtime/numerics/Float16.h"
#include "runtime/numerics/Philox.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace ampc::train {

using plan::DType;
using plan::InputUse;

namespace {

/// The Philox stream of one use of the data seed.
uint32_t dataStream(const char *use) { return numerics::fnv1a32(use, std::strlen(use)); }

const uint32_t kWindowStream = dataStream("ampc.train.window");
const uint32_t kSyntheticStream = dataStream("ampc.train.synthetic");
const uint32_t kPermutationStream = dataStream("ampc.train.permutation");
const uint32_t kPrototypeStream = dataStream("ampc.train.prototype");
const uint32_t kLabelStream = dataStream("ampc.train.label");
const uint32_t kNoiseStream = dataStream("ampc.train.noise");

/// 64 random bits for (seed, step, stream, element).
uint64_t randomBits(uint64_t seed, uint64_t step, uint32_t stream, uint64_t element) {
  numerics::PhiloxBlock out = numerics::philoxForElement(seed, step, stream, element);
  return (static_cast<uint64_t>(out.word[1]) << 32) | out.word[0];
}

std::string describeInput(const plan::Plan &plan, const plan::Input &input) {
  const plan::Buffer &buffer = plan.buffers[input.buffer];
  return "'" + input.name + "' (" + plan::dtypeName(buffer.dtype) + " " +
         plan::shapeToString(buffer.shape) + ", use " + plan::inputUseName(input.use) + ")";
}

} // namespace

//===----------------------------------------------------------------------===//
// Task recognition
//===----------------------------------------------------------------------===//

Task analyzeTask(const plan::Plan &plan) {
  Task task;
  if (plan.inputs.size() != 2) {
    task.reason = "the model has " + std::to_string(plan.inputs.size()) +
                  " inputs; a language model has tokens and targets, a "
                  "classifier features and labels";
    return task;
  }
  const plan::Input *labels = nullptr, *other = nullptr;
  for (const plan::Input &input : plan.inputs) {
    if (input.use == InputUse::Labels && !labels)
      labels = &input;
    else
      other = &input;
  }
  if (!labels) {
    task.reason = "no input feeds cross_entropy's labels";
    return task;
  }
  const plan::Buffer &labelBuffer = plan.buffers[labels->buffer];
  const plan::Buffer &otherBuffer = plan.buffers[other->buffer];
  if (!plan::isIntegerDType(labelBuffer.dtype) || labels->bound <= 0 || labelBuffer.shape.empty()) {
    task.reason =
        "the labels input " + describeInput(plan, *labels) + " is not a bounded integer tensor";
    return task;
  }
  task.labels = *labels;
  task.first = *other;
  task.labelsDType = labelBuffer.dtype;
  task.firstDType = otherBuffer.dtype;
  task.batch = labelBuffer.shape[0];
  if (other->use == InputUse::Indices) {
    if (!plan::isIntegerDType(otherBuffer.dtype) || other->bound <= 0 ||
        otherBuffer.shape.size() != 2 || otherBuffer.shape != labelBuffer.shape) {
      task.reason = "the tokens input " + describeInput(plan, *other) + " and the targets input " +
                    describeInput(plan, *labels) +
                    " are not bounded integer tensors of one shape [B, T]";
      return task;
    }
    task.kind = TaskKind::Language;
    task.sequence = otherBuffer.shape[1];
    // Targets are tokens too: both inputs must accept every id.
    task.classes = std::min(other->bound, labels->bound);
    return task;
  }
  if (plan::isFloatDType(otherBuffer.dtype) && labelBuffer.shape.size() == 1 &&
      !otherBuffer.shape.empty() && otherBuffer.shape[0] == task.batch) {
    task.kind = TaskKind::Classification;
    task.classes = labels->bound;
    task.features = plan::numElements(otherBuffer) / std::max<int64_t>(1, task.batch);
    return task;
  }
  task.reason = "the inputs " + describeInput(plan, *other) + " and " +
                describeInput(plan, *labels) +
                " are neither tokens and targets [B, T] nor features [B, "
                "F...] and labels [B]";
  return task;
}

//===----------------------------------------------------------------------===//
// Token files
//===----------------------------------------------------------------------===//

DataFormat defaultDataFormat(const std::string &path) {
  const std::string extension = ".bin";
  if (path.size() >= extension.size() &&
      path.compare(path.size() - extension.size(), extension.size(), extension) == 0)
    return DataFormat::Tokens;
  return DataFormat::Text;
}

const char *dataFormatName(DataFormat format) {
  return format == DataFormat::Tokens ? "tokens" : "text";
}

TokenSource::~TokenSource() = default;

TokenFile::TokenFile(const std::string &path, DataFormat format, int64_t vocab, int64_t sequence,
                     uint64_t seed)
    : path(path), format(format), sequence(sequence), seed(seed) {
  const std::string name = "data file " + path;
  auto unreadable = [&](const std::string &cause) {
    return DataError("cannot read " + name + ": " + cause);
  };
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    throw unreadable(std::strerror(errno));
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    throw unreadable(std::strerror(error));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    throw unreadable(S_ISDIR(info.st_mode) ? std::strerror(EISDIR) : "not a regular file");
  }
  bytes = static_cast<size_t>(info.st_size);
  if (bytes > 0) {
    void *mapped = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapped == MAP_FAILED) {
      const int error = errno;
      ::close(fd);
      throw unreadable(std::strerror(error));
    }
    data = static_cast<const uint8_t *>(mapped);
  }
  ::close(fd);
  // From here on the destructor does not run on a throw: unmap by hand.
  auto fail = [&](const std::string &message) {
    if (data)
      ::munmap(const_cast<uint8_t *>(data), bytes);
    data = nullptr;
    return DataError(message);
  };
  if (format == DataFormat::Tokens && bytes % 2 != 0)
    throw fail(name + " has an odd number of bytes (" + withCommas(bytes) +
               "), so it is not a file of uint16 tokens; pass "
               "--data-format text if it is text");
  count = static_cast<int64_t>(format == DataFormat::Tokens ? bytes / 2 : bytes);
  if (count < sequence + 1)
    throw fail(name + " has " + withCommas(count) +
               " tokens; one batch row needs T+1 = " + withCommas(sequence + 1));
  for (int64_t i = 0; i < count; ++i) {
    const int64_t value = token(i);
    if (value >= vocab)
      throw fail("data file " + path + ": token " + std::to_string(value) + " at position " +
                 std::to_string(i) +
                 " is outside the model's vocabulary (V = " + std::to_string(vocab) + ")" +
                 (format == DataFormat::Text ? "; text data has one token per byte, so it needs "
                                               "V >= 256 or bytes below V"
                                             : ""));
  }
}

TokenFile::~TokenFile() {
  if (data)
    ::munmap(const_cast<uint8_t *>(data), bytes);
}

int64_t TokenFile::token(int64_t index) const {
  if (format == DataFormat::Text)
    return data[index];
  return static_cast<int64_t>(data[2 * index]) | (static_cast<int64_t>(data[2 * index + 1]) << 8);
}

int64_t TokenFile::offset(uint64_t microStep, int64_t row) const {
  const uint64_t starts = static_cast<uint64_t>(count - sequence);
  return static_cast<int64_t>(
      randomBits(seed, microStep, kWindowStream, static_cast<uint64_t>(row)) % starts);
}

void TokenFile::window(uint64_t microStep, int64_t row, int64_t length, int64_t *out) const {
  const int64_t start = offset(microStep, row);
  for (int64_t i = 0; i < length; ++i)
    out[i] = token(start + i);
}

std::string TokenFile::describe() const {
  return path + " (" + dataFormatName(format) + ", " + withCommas(count) + " tokens)";
}

//===----------------------------------------------------------------------===//
// The synthetic language task
//===----------------------------------------------------------------------===//

SyntheticTokens::SyntheticTokens(int64_t vocab, uint64_t seed)
    : vocab(vocab), seed(seed), perm(static_cast<size_t>(vocab)) {
  for (int64_t i = 0; i < vocab; ++i)
    perm[i] = i;
  // Fisher-Yates, one random draw per position.
  for (int64_t i = vocab - 1; i > 0; --i) {
    const uint64_t j = randomBits(seed, 0, kPermutationStream, i) % static_cast<uint64_t>(i + 1);
    std::swap(perm[i], perm[j]);
  }
}

void SyntheticTokens::window(uint64_t microStep, int64_t row, int64_t length, int64_t *out) const {
  const uint64_t base = static_cast<uint64_t>(row) * length;
  for (int64_t i = 0; i < length; ++i) {
    numerics::PhiloxBlock draw =
        numerics::philoxForElement(seed, microStep, kSyntheticStream, base + i);
    const uint64_t bits = (static_cast<uint64_t>(draw.word[3]) << 32) | draw.word[2];
    const int64_t uniform = static_cast<int64_t>(bits % static_cast<uint64_t>(vocab));
    // 24 random bits decide the noise, as uniform01 does.
    const bool noise = i == 0 || (draw.word[0] >> 8) < static_cast<uint32_t>(kNoise * (1 << 24));
    out[i] = noise ? uniform : perm[out[i - 1]];
  }
}

std::string SyntheticTokens::describe() const {
  char floor[32];
  std::snprintf(floor, sizeof(floor), "%.3f", syntheticLanguageEntropy(vocab));
  return "the synthetic permutation task (V = " + withCommas(vocab) +
         ", 10% noise; no model can beat a loss of " + floor + ")";
}

double syntheticLanguageEntropy(int64_t vocab) {
  const double v = static_cast<double>(vocab);
  const double other = SyntheticTokens::kNoise / v;
  const double follow = 1.0 - SyntheticTokens::kNoise + other;
  double entropy = -follow * std::log(follow);
  if (vocab > 1)
    entropy -= (v - 1) * other * std::log(other);
  return entropy;
}

//===----------------------------------------------------------------------===//
// Batches
//===----------------------------------------------------------------------===//

BatchSource::~BatchSource() = default;

std::vector<uint8_t> encodeIntegers(DType dtype, const std::vector<int64_t> &values) {
  const size_t width = plan::dtypeBytes(dtype);
  std::vector<uint8_t> bytes(values.size() * width);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint64_t bits = static_cast<uint64_t>(values[i]);
    for (size_t b = 0; b < width; ++b)
      bytes[i * width + b] = static_cast<uint8_t>(bits >> (8 * b));
  }
  return bytes;
}

std::vector<uint8_t> encodeReals(DType dtype, const std::vector<double> &values) {
  const size_t width = plan::dtypeBytes(dtype);
  std::vector<uint8_t> bytes(values.size() * width);
  for (size_t i = 0; i < values.size(); ++i) {
    uint32_t bits;
    if (dtype == DType::BF16)
      bits = numerics::doubleToBF16Bits(values[i]);
    else if (dtype == DType::F16)
      bits = numerics::doubleToF16Bits(values[i]);
    else
      bits = numerics::floatToBits(static_cast<float>(values[i]));
    for (size_t b = 0; b < width; ++b)
      bytes[i * width + b] = static_cast<uint8_t>(bits >> (8 * b));
  }
  return bytes;
}

namespace {

/// Windows of a token source cut into tokens and targets.
class LanguageBatches : public BatchSource {
public:
  LanguageBatches(const Task &task, std::unique_ptr<TokenSource> source)
      : task(task), source(std::move(source)) {}

  std::vector<InputData> batch(uint64_t microStep) const override {
    const int64_t rows = task.batch, length = task.sequence;
    std::vector<int64_t> tokens(rows * length), targets(rows * length);
    std::vector<int64_t> window(length + 1);
    for (int64_t r = 0; r < rows; ++r) {
      source->window(microStep, r, length + 1, window.data());
      std::copy(window.begin(), window.end() - 1, tokens.begin() + r * length);
      std::copy(window.begin() + 1, window.end(), targets.begin() + r * length);
    }
    return {{task.first.name, encodeIntegers(task.firstDType, tokens)},
            {task.labels.name, encodeIntegers(task.labelsDType, targets)}};
  }

  std::string describe() const override { return source->describe(); }

private:
  Task task;
  std::unique_ptr<TokenSource> source;
};

/// Prototype-plus-noise examples for a classifier.
class ClassificationBatches : public BatchSource {
public:
  ClassificationBatches(const Task &task, uint64_t seed)
      : task(task), seed(seed), prototypes(static_cast<size_t>(task.classes * task.features)) {
    for (size_t e = 0; e < prototypes.size(); ++e)
      prototypes[e] = numerics::standardNormal(seed, 0, kPrototypeStream, e);
  }

  std::vector<InputData> batch(uint64_t microStep) const override {
    const int64_t rows = task.batch, width = task.features;
    std::vector<int64_t> labels(rows);
    std::vector<double> features(rows * width);
    for (int64_t r = 0; r < rows; ++r) {
      labels[r] = static_cast<int64_t>(randomBits(seed, microStep, kLabelStream, r) %
                                       static_cast<uint64_t>(task.classes));
      for (int64_t f = 0; f < width; ++f)
        features[r * width + f] =
            prototypes[labels[r] * width + f] +
            0.5 * numerics::standardNormal(seed, microStep, kNoiseStream, r * width + f);
    }
    return {{task.first.name, encodeReals(task.firstDType, features)},
            {task.labels.name, encodeIntegers(task.labelsDType, labels)}};
  }

  std::string describe() const override {
    return "the synthetic classification task (" + withCommas(task.classes) +
           " noisy prototypes of " + withCommas(task.features) + " features)";
  }

private:
  Task task;
  uint64_t seed;
  std::vector<double> prototypes;
};

} // namespace

std::unique_ptr<BatchSource> makeLanguageBatches(const Task &task,
                                                 std::unique_ptr<TokenSource> tokens) {
  return std::make_unique<LanguageBatches>(task, std::move(tokens));
}

std::unique_ptr<BatchSource> makeClassificationBatches(const Task &task, uint64_t seed) {
  return std::make_unique<ClassificationBatches>(task, seed);
}

std::unique_ptr<BatchSource> makeBatchSource(const Task &task, const DataOptions &options) {
  if (task.kind != TaskKind::Language && !options.path.empty())
    throw DataError(
        "token files are for language models (tokens and targets inputs); this model trains on "
        "its " +
        std::string(task.kind == TaskKind::Classification ? "synthetic task" : "random inputs") +
        ", or on NumPy arrays: --data FILE.npz, one array per input, named as the input");
  switch (task.kind) {
  case TaskKind::Language:
    if (options.path.empty())
      return makeLanguageBatches(task,
                                 std::make_unique<SyntheticTokens>(task.classes, options.seed));
    return makeLanguageBatches(
        task, std::make_unique<TokenFile>(options.path,
                                          options.format.value_or(defaultDataFormat(options.path)),
                                          task.classes, task.sequence, options.seed));
  case TaskKind::Classification:
    return makeClassificationBatches(task, options.seed);
  case TaskKind::Unlearnable:
    break;
  }
  return nullptr;
}

std::string withCommas(int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return value < 0 ? "-" + out : out;
}

} // namespace ampc::train
