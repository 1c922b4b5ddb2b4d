//===- TrainTestUtils.h - Temporary files, processes and training plans ---===//

#ifndef AMPC_TEST_UNIT_TRAIN_TRAINTESTUTILS_H
#define AMPC_TEST_UNIT_TRAIN_TRAINTESTUTILS_H

#include "runtime/plan/Plan.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ampc::test {

/// A fresh directory under $TMPDIR (or /tmp), removed with its contents.
class TempDir {
public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;

  /// \p name inside the directory.
  std::string path(const std::string &name) const { return root + "/" + name; }
  const std::string &dir() const { return root; }

private:
  std::string root;
};

/// Writes \p bytes to \p path (test setup: fails the test on error).
void writeFile(const std::string &path, const std::string &bytes);
/// The bytes of \p path ("" if it cannot be read).
std::string readFile(const std::string &path);
/// \p tokens as uint16 little-endian bytes (a nanoGPT .bin file).
std::string uint16Tokens(const std::vector<int64_t> &tokens);

/// The result of running a shell command.
struct CommandResult {
  int status = -1;    ///< exit status, or -1 if it did not exit normally
  std::string output; ///< stdout and stderr together
};
/// Runs \p command with sh -c, capturing stdout and stderr.
CommandResult runCommand(const std::string &command);

/// A bigram language model trained with AdamW: logits = table[tokens]
/// (table [V, V]), cross-entropy against the targets; inputs "tokens" i32
/// [B, T] (Indices) and "targets" i64 [B, T] (Labels), both bounded by V.
plan::Plan bigramTrainingPlan(int64_t vocab, int64_t batch, int64_t sequence, int64_t accumulation,
                              double learningRate);

/// A softmax-regression classifier trained with AdamW: logits = x @ W,
/// cross-entropy; inputs "x" f32 [B, F] and "labels" i32 [B] (Labels, bound
/// C).
plan::Plan classifierTrainingPlan(int64_t batch, int64_t features, int64_t classes,
                                  double learningRate);

/// A linear regression y = x @ W trained with SGD on the mean squared error
/// against "y", with inputs "x" f32 [B, F] and "y" f32 [B, O] that carry no
/// use: the runner feeds it random inputs. W starts at standard normal
/// values, so the loss falls from about 1 + F towards var(y) = 1.
plan::Plan regressionTrainingPlan(int64_t batch, int64_t features, int64_t outputs,
                                  double learningRate);

/// A forward-only plan (no optimizer step): the mean squared error of a
/// parameter against an input.
plan::Plan forwardOnlyPlan();

/// \p plan with loss scaling added as the compiler adds it: four state
/// buffers, the scale as grad_seed's operand, unscaling accumulates, adamw/
/// sgd reading the found flag and applied-steps count, and a final
/// update_loss_scale (growth x2, backoff x0.5, interval 2000).
plan::Plan withLossScaling(plan::Plan plan, plan::LossScaleMode mode, float initialScale,
                           float minScale = 0, bool debugNonFinite = false);

/// \p plan with a \p dtype copy of parameter \p name that every micro-step
/// instruction reads instead of the parameter, refreshed by its optimizer.
plan::Plan withParameterCopy(plan::Plan plan, const std::string &name, plan::DType dtype);

} // namespace ampc::test

#endif // AMPC_TEST_UNIT_TRAIN_TRAINTESTUTILS_H
