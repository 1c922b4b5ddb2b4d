//===- Weights.h - A model's weights as safetensors; their moving average -===//
//
// A training executable starts from given weights (--init-from FILE), writes
// its trained weights (--export-weights FILE) and `ampc eval --weights FILE`
// evaluates them, all as safetensors files (runtime/plan/SafeTensors.h)
// whose tensor names are the model's parameter names ("wte", "h0.attn.w",
// as in the model file) and whose values are the f32 master weights. A file
// read for a model must hold exactly its parameters, each with its shape, in
// F32, BF16, F16 or F64.
//
// WeightAverage is the exponential moving average of the weights
// (--ema-decay D): an f32 copy updated after every optimizer step,
//   ema = D * ema + (1 - D) * weights,
// computed in double and stored rounded to f32, so a resumed run continues
// it bit for bit. It lives on the host: on a GPU every step reads the weights
// back (4 bytes a parameter, about 0.5 GB for GPT-124M), which costs a few
// milliseconds a step there; a device-side update is future work.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_TRAIN_WEIGHTS_H
#define AMPC_RUNTIME_TRAIN_WEIGHTS_H

#include "runtime/plan/Plan.h"
#include "runtime/plan/SafeTensors.h"

#include <functional>
#include <string>
#include <vector>

namespace ampc::train {

/// Values per parameter, indexed like plan.parameters.
using ParameterValues = std::vector<std::vector<double>>;

/// The weights file of \p values for \p plan's parameters, stored as
/// \p dtype ("F32", "BF16" or "F16"), with the model's name in the metadata.
safetensors::File weightsFile(const plan::Plan &plan, const ParameterValues &values,
                              const std::string &dtype = "F32");

/// The values of \p file (read from \p path) for \p plan's parameters.
/// safetensors::Error "<path>: ..." naming the first parameter missing, a
/// tensor that is not a parameter (with the model's parameters listed when
/// there are few), a shape that differs, or a dtype that is not floating
/// point.
ParameterValues matchWeights(const plan::Plan &plan, const safetensors::File &file,
                             const std::string &path);

/// Reads \p path and matches it to \p plan (readFile, then matchWeights).
ParameterValues readWeights(const plan::Plan &plan, const std::string &path);

/// The exponential moving average of a model's weights.
class WeightAverage {
public:
  /// Starts at \p initial (the weights the average begins from).
  WeightAverage(double decay, const ParameterValues &initial);

  /// ema = decay * ema + (1 - decay) * weights, per element, in double,
  /// rounded to f32.
  void update(const ParameterValues &weights);

  double decay() const { return decayFactor; }
  const ParameterValues &values() const { return average; }
  /// Replaces the average (resuming from a checkpoint).
  void set(ParameterValues values) { average = std::move(values); }

private:
  double decayFactor;
  ParameterValues average;
};

} // namespace ampc::train

#endif // AMPC_RUNTIME_TRAIN_WEIGHTS_H
