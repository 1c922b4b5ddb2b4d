//===- Weights.cpp - A model's weights as safetensors; their moving average ===//

#include "runtime/train/Weights.h"

#include <cmath>
#include <cstring>
#include <set>

namespace ampc::train {

namespace {

[[noreturn]] void fail(const std::string &path, const std::string &cause) {
  throw safetensors::Error(path + ": " + cause);
}

/// "wte [8192, 384]".
std::string describeParameter(const plan::Plan &plan, const plan::Parameter &parameter) {
  return "'" + parameter.name + "' " +
         safetensors::formatShape(plan.buffers[parameter.buffer].shape);
}

/// Appends \p tensor's values to \p values when it holds little-endian integers (I64, I32,
/// I16, I8 or U8); false for any other dtype.
bool integerCounts(const safetensors::Tensor &tensor, ParameterValues &values) {
  int width = 0;
  if (tensor.dtype == "I64")
    width = 8;
  else if (tensor.dtype == "I32")
    width = 4;
  else if (tensor.dtype == "I16")
    width = 2;
  else if (tensor.dtype == "I8" || tensor.dtype == "U8")
    width = 1;
  if (!width)
    return false;
  std::vector<double> out(tensor.bytes.size() / size_t(width));
  for (size_t i = 0; i < out.size(); ++i) {
    uint64_t bits = 0;
    std::memcpy(&bits, tensor.bytes.data() + i * size_t(width), size_t(width));
    if (tensor.dtype != "U8" && width < 8 && (bits >> (width * 8 - 1)) & 1)
      bits |= ~uint64_t(0) << (width * 8);
    out[i] = double(int64_t(bits));
  }
  values.push_back(std::move(out));
  return true;
}

} // namespace

safetensors::File weightsFile(const plan::Plan &plan, const ParameterValues &values,
                              const std::string &dtype) {
  safetensors::File file;
  file.metadata["model"] = plan.modelName;
  file.metadata["written_by"] = "ampc";
  for (size_t i = 0; i < plan.parameters.size(); ++i) {
    const plan::Parameter &parameter = plan.parameters[i];
    const std::vector<float> floats(values.at(i).begin(), values.at(i).end());
    file.tensors.push_back(safetensors::fromFloats(
        parameter.name, plan.buffers[parameter.buffer].shape, floats, dtype));
  }
  return file;
}

ParameterValues matchWeights(const plan::Plan &plan, const safetensors::File &file,
                             const std::string &path) {
  std::set<std::string> names;
  for (const plan::Parameter &parameter : plan.parameters)
    names.insert(parameter.name);
  for (const safetensors::Tensor &tensor : file.tensors) {
    if (names.count(tensor.name))
      continue;
    std::string known;
    if (plan.parameters.size() <= 8) {
      for (const plan::Parameter &parameter : plan.parameters)
        known += (known.empty() ? "" : ", ") + parameter.name;
      known = " (its parameters: " + known + ")";
    }
    fail(path,
         "tensor '" + tensor.name + "' is not a parameter of the model @" + plan.modelName + known);
  }
  ParameterValues values;
  for (const plan::Parameter &parameter : plan.parameters) {
    const safetensors::Tensor *tensor = file.find(parameter.name);
    const std::vector<int64_t> &shape = plan.buffers[parameter.buffer].shape;
    if (!tensor)
      fail(path, "it has no tensor for the parameter " + describeParameter(plan, parameter) +
                     " of the model @" + plan.modelName);
    if (tensor->shape != shape)
      fail(path, "tensor '" + parameter.name + "' has shape " +
                     safetensors::formatShape(tensor->shape) +
                     ", the model's parameter has shape " + safetensors::formatShape(shape));
    // Model state PyTorch keeps as integers (num_batches_tracked, int64) is a float here.
    if (!parameter.trained && integerCounts(*tensor, values)) {
      for (double value : values.back())
        if (std::fabs(value) > 16777216.0)
          fail(path, "tensor '" + parameter.name + "' holds " + std::to_string(int64_t(value)) +
                         ", beyond the integers the model's f32 state holds exactly (2^24)");
      continue;
    }
    try {
      const std::vector<float> floats = safetensors::toFloats(*tensor);
      values.emplace_back(floats.begin(), floats.end());
    } catch (const safetensors::Error &error) {
      fail(path, error.what());
    }
  }
  return values;
}

ParameterValues readWeights(const plan::Plan &plan, const std::string &path) {
  return matchWeights(plan, safetensors::readFile(path), path);
}

WeightAverage::WeightAverage(double decay, const ParameterValues &initial)
    : decayFactor(decay), average(initial) {
  for (std::vector<double> &values : average)
    for (double &value : values)
      value = static_cast<float>(value);
}

void WeightAverage::update(const ParameterValues &weights) {
  const double keep = decayFactor, take = 1.0 - decayFactor;
  for (size_t i = 0; i < average.size(); ++i)
    for (size_t j = 0; j < average[i].size(); ++j)
      average[i][j] = static_cast<float>(keep * average[i][j] + take * weights.at(i).at(j));
}

} // namespace ampc::train
