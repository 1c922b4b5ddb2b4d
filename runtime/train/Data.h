//===- Data.h - Training data for the standalone training binary ----------===//
//
// What a training executable feeds its plan's inputs each micro step. The
// runner recognises two kinds of models from the plan's inputs:
//
//  - Language models: exactly two inputs, an integer input with use Indices
//    (the tokens) and one with use Labels (the targets), both [B, T]. The
//    vocabulary V is the tokens input's bound. Each batch row is a window of
//    T + 1 consecutive tokens w: tokens = w[0..T), targets = w[1..T].
//    The windows come from a token file (--data) or from the built-in
//    synthetic task below.
//  - Classification models: exactly two inputs, a float input [B, F...] (the
//    features) and an integer input with use Labels [B] with bound C (the
//    classes). They train on a synthetic task, or on arrays.
//
// Any model trains on NumPy arrays (--data FILE.npz): one per input (makeArrayBatches).
//
// Everything else is "unlearnable" here: the runner draws random inputs.
//
// All randomness is Philox (runtime/numerics/Philox.h) keyed by the run's
// seed, the global micro-step index (step * accumulationSteps + i) as the
// counter's step, and a stream per use, so a batch is a pure function of
// (seed, micro step): the same seed gives the same data whatever else runs.
//
// Token files (--data FILE): ".bin" is the nanoGPT format (uint16
// little-endian tokens, no header), anything else plain text with one token
// per byte. The whole file is validated when loaded. Row r of micro step m is
// the window starting at offset philox(seed, m, stream, r) mod (N - T), N the
// file's token count.
//
// Synthetic language task (no --data): a Markov chain over the vocabulary.
// A fixed permutation perm of [0, V) is drawn from the seed; a window starts
// at a uniformly random token, and each next token is perm[previous] with
// probability 0.9, otherwise (probability 0.1) a uniformly random token (which
// may happen to be perm[previous] as well). So the next token is perm[prev]
// with probability q = 0.9 + 0.1 / V and each other token with probability
// 0.1 / V, and no model can do better than the conditional entropy
//   H(V) = -q ln q - (V - 1) (0.1 / V) ln(0.1 / V)   nats per token,
// about 0.876 for V = 256 and 1.408 for V = 50304 (syntheticLanguageEntropy).
// The first target of each row is predictable too (it follows w[0]), so a
// trained model's mean loss approaches H(V) from above.
//
// Synthetic classification task: C prototypes (standard normal vectors of the
// feature shape, drawn from the seed); each example has a uniformly random
// label y and features prototype[y] + 0.5 * standard normal noise.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_TRAIN_DATA_H
#define AMPC_RUNTIME_TRAIN_DATA_H

#include "runtime/plan/Plan.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ampc::train {

/// A problem with the training data a user can fix (a missing or malformed
/// data file, data given for a model that cannot use it). what() is one line.
class DataError : public std::runtime_error {
public:
  using runtime_error::runtime_error;
};

/// The kinds of models the runner knows how to feed.
enum class TaskKind { Language, Classification, Unlearnable };

/// How a plan's inputs map onto a training task.
struct Task {
  TaskKind kind = TaskKind::Unlearnable;
  /// Language: the tokens input. Classification: the features input.
  plan::Input first;
  /// The targets (language) or labels (classification) input.
  plan::Input labels;
  /// The dtypes of the two inputs' buffers.
  plan::DType firstDType = plan::DType::F32, labelsDType = plan::DType::I64;
  /// B: the leading dimension of the labels input.
  int64_t batch = 0;
  /// Language: T, the tokens per row.
  int64_t sequence = 0;
  /// Language: V, the number of token ids; classification: C, the classes.
  int64_t classes = 0;
  /// Classification: the elements of one example's features (F...).
  int64_t features = 0;
  /// Unlearnable: why the inputs are neither of the known kinds.
  std::string reason;
};

/// Recognises the task of \p plan from its inputs (see the file comment).
Task analyzeTask(const plan::Plan &plan);

/// How a token file is encoded.
enum class DataFormat {
  Tokens, ///< nanoGPT .bin: uint16 little-endian token ids
  Text    ///< one token per byte
};

/// The format implied by \p path: Tokens for a ".bin" file, else Text.
DataFormat defaultDataFormat(const std::string &path);
/// "tokens" or "text".
const char *dataFormatName(DataFormat format);

/// Produces windows of consecutive tokens for a language model.
class TokenSource {
public:
  virtual ~TokenSource();
  /// Writes window \p row of micro step \p microStep: \p length tokens.
  virtual void window(uint64_t microStep, int64_t row, int64_t length, int64_t *out) const = 0;
  /// One line for the start-up message ("FILE (text, 1,024 tokens)").
  virtual std::string describe() const = 0;
};

/// A token file, memory-mapped and validated.
class TokenFile : public TokenSource {
public:
  /// Loads \p path and checks that it holds at least \p sequence + 1 tokens,
  /// each below \p vocab. Throws DataError: "cannot read data file F: <cause>",
  /// an odd byte count for Tokens, too few tokens, or the first token outside
  /// the vocabulary with its position.
  TokenFile(const std::string &path, DataFormat format, int64_t vocab, int64_t sequence,
            uint64_t seed);
  ~TokenFile() override;
  TokenFile(const TokenFile &) = delete;
  TokenFile &operator=(const TokenFile &) = delete;

  /// Number of tokens in the file.
  int64_t size() const { return count; }
  /// Token \p index of the file.
  int64_t token(int64_t index) const;
  /// The start of window \p row of micro step \p microStep, in
  /// [0, size() - sequence).
  int64_t offset(uint64_t microStep, int64_t row) const;

  void window(uint64_t microStep, int64_t row, int64_t length, int64_t *out) const override;
  std::string describe() const override;

private:
  std::string path;
  DataFormat format;
  int64_t sequence;
  uint64_t seed;
  const uint8_t *data = nullptr;
  size_t bytes = 0;
  int64_t count = 0;
};

/// The built-in synthetic language task (see the file comment).
class SyntheticTokens : public TokenSource {
public:
  /// Probability that a token is replaced by a uniformly random one.
  static constexpr double kNoise = 0.1;

  SyntheticTokens(int64_t vocab, uint64_t seed);

  /// The permutation: the next token is usually permutation()[previous].
  const std::vector<int64_t> &permutation() const { return perm; }

  void window(uint64_t microStep, int64_t row, int64_t length, int64_t *out) const override;
  std::string describe() const override;

private:
  int64_t vocab;
  uint64_t seed;
  std::vector<int64_t> perm;
};

/// The conditional entropy, in nats per token, of the synthetic language task
/// with vocabulary \p vocab (see the file comment): the lowest mean
/// cross-entropy any model can reach on it.
double syntheticLanguageEntropy(int64_t vocab);

/// The data of one input for one micro step.
struct InputData {
  std::string name;
  /// Little-endian, row-major, in the input's dtype (for Executor::setInput).
  std::vector<uint8_t> bytes;
};

/// Produces every input of each micro step.
class BatchSource {
public:
  virtual ~BatchSource();
  /// The inputs of micro step \p microStep.
  virtual std::vector<InputData> batch(uint64_t microStep) const = 0;
  /// One line for the start-up message: where the data comes from.
  virtual std::string describe() const = 0;
};

/// Language-model batches: windows of \p tokens for a Language \p task.
std::unique_ptr<BatchSource> makeLanguageBatches(const Task &task,
                                                 std::unique_ptr<TokenSource> tokens);

/// Synthetic classification batches for a Classification \p task.
std::unique_ptr<BatchSource> makeClassificationBatches(const Task &task, uint64_t seed);

/// Where the training data should come from.
struct DataOptions {
  /// A token file; empty for the synthetic task.
  std::string path;
  /// The file's format; by default from its extension (defaultDataFormat).
  std::optional<DataFormat> format;
  uint64_t seed = 0;
};

/// The batches for \p task: the token file or synthetic language task for a
/// language model, the synthetic task for a classification model, and null
/// for an unlearnable model (the runner randomises its inputs). Throws
/// DataError for a bad file, or a file given for a model that is not a
/// language model.
std::unique_ptr<BatchSource> makeBatchSource(const Task &task, const DataOptions &options);

/// Batches of every input of \p plan from NumPy arrays (--data FILE.npz, or FILE.npy for a
/// model with one input; ArrayData.cpp): one array per input, named as the input, one row per
/// example along the first dimension, the input's shape after it. Each epoch visits the rows
/// in an order drawn from (\p seed, epoch) (file order without \p shuffle), a micro-batch at
/// a time; an epoch's last, partial micro-batch is dropped. Throws DataError, naming the array
/// and the input, for a missing or extra array, a shape, dtype or value that does not fit.
std::unique_ptr<BatchSource> makeArrayBatches(const plan::Plan &plan, const std::string &path,
                                              uint64_t seed, bool shuffle = true);

/// \p values as little-endian elements of the integer \p dtype.
std::vector<uint8_t> encodeIntegers(plan::DType dtype, const std::vector<int64_t> &values);
/// \p values rounded once to the float \p dtype, little-endian.
std::vector<uint8_t> encodeReals(plan::DType dtype, const std::vector<double> &values);

/// \p value with thousands separators: 1234567 -> "1,234,567".
std::string withCommas(int64_t value);

} // namespace ampc::train

#endif // AMPC_RUNTIME_TRAIN_DATA_H
