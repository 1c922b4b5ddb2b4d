//===- Evaluation.cpp - Validation loss and weights of a running backend --===//

#include "runtime/train/Evaluation.h"
#include "runtime/train/NumpyFile.h"

#include <map>

namespace ampc::train {

ParameterValues readParameters(const plan::Plan &plan, TrainingBackend &backend) {
  ParameterValues values;
  values.reserve(plan.parameters.size());
  for (const plan::Parameter &parameter : plan.parameters)
    values.push_back(backend.readBuffer(parameter.buffer));
  return values;
}

void writeParameters(const plan::Plan &plan, TrainingBackend &backend,
                     const ParameterValues &values) {
  for (size_t i = 0; i < plan.parameters.size(); ++i)
    backend.writeBuffer(plan.parameters[i].buffer, values.at(i));
  // A copy gets its source's values, which the backend rounds to the copy's
  // dtype once. (The values are f32 numbers, so this is the optimizer's
  // rounding of the stored f32 master weights.)
  std::map<uint32_t, size_t> parameterOf;
  for (size_t i = 0; i < plan.parameters.size(); ++i)
    parameterOf[plan.parameters[i].buffer] = i;
  for (const plan::ParameterCopy &copy : plan.parameterCopies)
    backend.writeBuffer(copy.buffer, values.at(parameterOf.at(copy.source)));
}

ValidationSet::ValidationSet(const plan::Plan &plan, const Task &task, const std::string &path,
                             std::optional<DataFormat> format, uint64_t seed, uint64_t batches)
    : batches(batches) {
  // NumPy arrays feed any model; validation takes their rows in file order.
  if (isNumpyPath(path)) {
    source = makeArrayBatches(plan, path, seed, /*shuffle=*/false);
    return;
  }
  if (task.kind != TaskKind::Language)
    throw DataError("--val-data is for language models (tokens and targets inputs) or NumPy "
                    "arrays (FILE.npz, one per input); this model reads no token data");
  DataOptions options;
  options.path = path;
  options.format = format;
  options.seed = seed + 1;
  source = makeBatchSource(task, options);
}

double ValidationSet::loss(TrainingBackend &backend, uint64_t seed, uint64_t totalSteps) const {
  double sum = 0;
  for (uint64_t i = 0; i < batches; ++i) {
    for (const InputData &input : source->batch(i))
      backend.setInput(input.name, input.bytes.data(), input.bytes.size());
    cpu::RunOptions run;
    run.seed = seed;
    run.step = i;
    run.training = false;
    run.keepTemporaries = false;
    run.totalSteps = totalSteps;
    sum += backend.evaluateLoss(run);
  }
  return sum / static_cast<double>(batches);
}

std::string ValidationSet::describe() const {
  return std::to_string(batches) + " batch" + (batches == 1 ? "" : "es") + " of " +
         source->describe();
}

} // namespace ampc::train
