//===- Evaluation.h - Validation loss and weights of a running backend ----===//
//
// The parts of a training run that look at the model rather than train it:
// reading and setting a backend's weights (for --init-from, --export-weights
// and the moving average) and the validation loss over fixed held-out
// batches (--val-data).
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_TRAIN_EVALUATION_H
#define AMPC_RUNTIME_TRAIN_EVALUATION_H

#include "runtime/train/Backend.h"
#include "runtime/train/Data.h"
#include "runtime/train/Weights.h"

#include <memory>
#include <string>

namespace ampc::train {

/// The master weights of every parameter of \p plan held by \p backend.
ParameterValues readParameters(const plan::Plan &plan, TrainingBackend &backend);

/// Sets every parameter of \p plan in \p backend to \p values (rounded to
/// the parameter's dtype) and refreshes their reduced-precision copies
/// exactly as the optimizer step does (round to nearest even).
void writeParameters(const plan::Plan &plan, TrainingBackend &backend,
                     const ParameterValues &values);

/// A validation set: K fixed batches of a held-out data file, drawn as the
/// training batches are (runtime/train/Data.h) with the seed + 1, so every
/// evaluation sees the same batches; from NumPy arrays, the first K
/// micro-batches of rows in file order. Batch norms use their running
/// statistics (evaluation mode).
class ValidationSet {
public:
  /// DataError for a bad file or a model that reads neither token data nor arrays.
  ValidationSet(const plan::Plan &plan, const Task &task, const std::string &path,
                std::optional<DataFormat> format, uint64_t seed, uint64_t batches);

  /// The mean loss of the K batches from the forward pass alone, without
  /// dropout. The backend's inputs are left set to the last batch.
  double loss(TrainingBackend &backend, uint64_t seed, uint64_t totalSteps) const;

  /// "K batches of FILE (...)", for the start-up line.
  std::string describe() const;

private:
  std::unique_ptr<BatchSource> source;
  uint64_t batches;
};

} // namespace ampc::train

#endif // AMPC_RUNTIME_TRAIN_EVALUATION_H
