//===- AmpcModule.cpp - The `ampc._ampc` Python extension ------------------===//
//
// The runtime half of the Python package: a training plan (written by `ampc plan --train`,
// which python/ampc/__init__.py runs) loaded into a training backend, driven micro step by
// micro step from NumPy arrays. It links the runtime only, never MLIR. Errors the runtime
// reports (a plan, input or weights that do not fit) become ampc.Error with the runtime's
// one-line message; a step runs with the GIL released, one call at a time per trainer.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/Plan.h"
#include "runtime/plan/SafeTensors.h"
#include "runtime/train/Backend.h"
#include "runtime/train/Data.h"
#include "runtime/train/Evaluation.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace py = pybind11;
using namespace ampc;

namespace {

/// ampc.Error, raised with the runtime's message.
PyObject *errorType = nullptr;

[[noreturn]] void raise(const std::string &message) {
  PyErr_SetString(errorType, message.c_str());
  throw py::error_already_set();
}

/// NumPy's name of a plan dtype's element type.
py::dtype numpyDtype(plan::DType dtype) {
  switch (dtype) {
  case plan::DType::I64:
    return py::dtype::of<int64_t>();
  case plan::DType::I32:
    return py::dtype::of<int32_t>();
  case plan::DType::F32:
    return py::dtype::of<float>();
  default: // bf16 and f16 inputs are fed as f32 and rounded once
    return py::dtype::of<float>();
  }
}

class Trainer {
public:
  /// \p device as the executables' --device: "auto" (the GPU when there is one and the plan
  /// has GPU code, else the CPU, with note() saying why), "cpu" or "cuda" (the GPU or an error).
  Trainer(const std::string &planPath, uint64_t seed, const std::string &device) : seed(seed) {
    if (device != "auto" && device != "cpu" && device != "cuda")
      raise("device is 'auto', 'cpu' or 'cuda', got '" + device + "'");
    try {
      plan = plan::loadPlan(planPath);
      if (plan.optimizerInstructions.empty())
        raise(planPath + " is not a training plan (write it with `ampc plan --train`)");
      const train::DeviceChoice choice =
          train::chooseDevice(device, !plan.device.empty(), /*cpuFallback=*/false, [&] {
            train::GpuProbe probe;
            backend = train::tryMakeCudaBackend(plan, probe);
            return probe;
          });
      if (!choice.error.empty())
        raise(choice.error);
      if (!choice.useCuda)
        backend = train::makeCpuBackend(plan);
      deviceNote = choice.note;
      backend->initializeParameters(seed);
    } catch (const py::error_already_set &) {
      throw;
    } catch (const std::exception &error) {
      raise(error.what());
    }
  }

  /// "cpu" or "cuda".
  std::string device() const { return backend->device(); }
  /// Why auto chose the CPU ("" when it did not fall back).
  std::string note() const { return deviceNote; }

  /// (name, NumPy dtype, shape) of each input, in the plan's order.
  std::vector<std::tuple<std::string, py::dtype, std::vector<int64_t>>> inputs() const {
    std::vector<std::tuple<std::string, py::dtype, std::vector<int64_t>>> out;
    for (const plan::Input &input : plan.inputs) {
      const plan::Buffer &buffer = plan.buffers[input.buffer];
      out.emplace_back(input.name, numpyDtype(buffer.dtype), buffer.shape);
    }
    return out;
  }

  int64_t accumulationSteps() const { return plan.accumulationSteps; }

  /// Sets every input from \p arrays (name -> array of the input's shape), then runs one micro
  /// step (forward, backward, accumulation) with the GIL released.
  void microStep(const std::map<std::string, py::array> &arrays, uint64_t step) {
    std::vector<std::pair<std::string, std::vector<uint8_t>>> inputs = encodeInputs(arrays);
    cpu::RunOptions options;
    options.seed = seed;
    options.step = step;
    options.training = true;
    options.keepTemporaries = false;
    run([&] {
      setInputs(inputs);
      backend->runMicroStep(options);
    });
  }

  /// Runs the optimizer step; returns the step's metrics.
  py::dict optimizerStep(uint64_t step, uint64_t totalSteps) {
    cpu::RunOptions options;
    options.seed = seed;
    options.step = step;
    options.totalSteps = totalSteps;
    options.training = true;
    train::BackendMetrics metrics;
    run([&] {
      backend->runOptimizerStep(options);
      metrics = backend->readMetrics();
    });
    py::dict out;
    out["loss"] = metrics.loss;
    out["grad_norm"] = metrics.gradNorm;
    out["lr"] = metrics.learningRate;
    out["loss_scale"] = metrics.scaleBefore;
    out["skipped"] = metrics.lossScale.lastStepSkipped;
    return out;
  }

  /// The loss of one batch from the forward pass alone (evaluation mode).
  double evaluate(const std::map<std::string, py::array> &arrays) {
    std::vector<std::pair<std::string, std::vector<uint8_t>>> inputs = encodeInputs(arrays);
    cpu::RunOptions options;
    options.seed = seed;
    options.training = false;
    double loss = 0;
    run([&] {
      setInputs(inputs);
      loss = backend->evaluateLoss(options);
    });
    return loss;
  }

  /// Every parameter (fp32 master weights and untrained state), by name, as float32 arrays.
  py::dict stateDict() {
    std::vector<std::vector<double>> all(plan.parameters.size());
    run([&] {
      for (size_t i = 0; i < plan.parameters.size(); ++i)
        all[i] = backend->readBuffer(plan.parameters[i].buffer);
    });
    py::dict out;
    for (size_t p = 0; p < plan.parameters.size(); ++p) {
      const plan::Parameter &parameter = plan.parameters[p];
      const std::vector<double> &values = all[p];
      const std::vector<int64_t> &shape = plan.buffers[parameter.buffer].shape;
      py::array_t<float> array(std::vector<py::ssize_t>(shape.begin(), shape.end()));
      float *data = array.mutable_data();
      for (size_t i = 0; i < values.size(); ++i)
        data[i] = static_cast<float>(values[i]);
      out[py::str(parameter.name)] = array;
    }
    return out;
  }

  /// Sets the parameters named in \p state (float arrays of their shapes); each must be one.
  void loadStateDict(const std::map<std::string, py::array> &state, bool strict) {
    std::map<std::string, const plan::Parameter *> byName;
    for (const plan::Parameter &parameter : plan.parameters)
      byName[parameter.name] = &parameter;
    for (const auto &[name, array] : state)
      if (!byName.count(name))
        raise("'" + name + "' is not a parameter of the model @" + plan.modelName);
    // Every value is checked before any is written: a mistake changes nothing.
    std::vector<std::pair<uint32_t, std::vector<double>>> writes;
    for (const plan::Parameter &parameter : plan.parameters) {
      auto found = state.find(parameter.name);
      if (found == state.end()) {
        if (strict)
          raise("no value for the parameter '" + parameter.name + "'");
        continue;
      }
      const std::vector<int64_t> &shape = plan.buffers[parameter.buffer].shape;
      py::array_t<double, py::array::c_style | py::array::forcecast> values(found->second);
      if (std::vector<int64_t>(values.shape(), values.shape() + values.ndim()) != shape)
        raise("'" + parameter.name + "' has shape " + shapeText(values) +
              ", the model's parameter " + plan::shapeToString(shape));
      writes.emplace_back(parameter.buffer,
                          std::vector<double>(values.data(), values.data() + values.size()));
    }
    run([&] {
      for (const auto &[buffer, values] : writes)
        backend->writeBuffer(buffer, values);
      // Copies follow their parameters (the CPU backend refreshes them as it sets them).
      for (const plan::ParameterCopy &copy : plan.parameterCopies)
        backend->writeBuffer(copy.buffer, backend->readBuffer(copy.source));
    });
  }

private:
  static std::string shapeText(const py::array &array) {
    return plan::shapeToString(std::vector<int64_t>(array.shape(), array.shape() + array.ndim()));
  }

  /// Each input's bytes in its dtype, checked (shape, kind, range), with the GIL held.
  std::vector<std::pair<std::string, std::vector<uint8_t>>>
  encodeInputs(const std::map<std::string, py::array> &arrays) const {
    for (const auto &[name, array] : arrays)
      if (std::none_of(plan.inputs.begin(), plan.inputs.end(),
                       [&](const plan::Input &input) { return input.name == name; }))
        raise("'" + name + "' is not an input of the model");
    std::vector<std::pair<std::string, std::vector<uint8_t>>> out;
    for (const plan::Input &input : plan.inputs) {
      auto found = arrays.find(input.name);
      if (found == arrays.end())
        raise("no value for input '" + input.name + "'");
      out.emplace_back(input.name, encodeInput(input, found->second));
    }
    return out;
  }

  std::vector<uint8_t> encodeInput(const plan::Input &input, const py::array &array) const {
    const plan::Buffer &buffer = plan.buffers[input.buffer];
    const std::vector<int64_t> shape(array.shape(), array.shape() + array.ndim());
    if (shape != buffer.shape)
      raise("input '" + input.name + "' takes shape " + plan::shapeToString(buffer.shape) +
            ", got " + shapeText(array));
    const bool integer = plan::isIntegerDType(buffer.dtype);
    const char kind = array.dtype().kind();
    if (integer && kind != 'i' && kind != 'u' && kind != 'b')
      raise("input '" + input.name + "' takes integers (" + plan::dtypeName(buffer.dtype) +
            "), got " + std::string(py::str(array.dtype())));
    if (!integer && kind != 'f' && kind != 'i' && kind != 'u' && kind != 'b')
      raise("input '" + input.name + "' takes numbers, got " +
            std::string(py::str(array.dtype())));
    if (integer) {
      if (kind == 'u' && array.itemsize() == 8) {
        py::array_t<uint64_t, py::array::c_style | py::array::forcecast> wide(array);
        for (py::ssize_t i = 0; i < wide.size(); ++i)
          if (wide.data()[i] > uint64_t(INT64_MAX))
            raise("input '" + input.name + "' element " + std::to_string(i) +
                  " exceeds int64");
      }
      py::array_t<int64_t, py::array::c_style | py::array::forcecast> values(array);
      std::vector<int64_t> ints(values.data(), values.data() + values.size());
      if (buffer.dtype == plan::DType::I32)
        for (size_t i = 0; i < ints.size(); ++i)
          if (ints[i] < INT32_MIN || ints[i] > INT32_MAX)
            raise("input '" + input.name + "' element " + std::to_string(i) + " is " +
                  std::to_string(ints[i]) + ", outside i32");
      return train::encodeIntegers(buffer.dtype, ints);
    }
    py::array_t<float, py::array::c_style | py::array::forcecast> values(array);
    if (buffer.dtype == plan::DType::F32) {
      const uint8_t *bytes = reinterpret_cast<const uint8_t *>(values.data());
      return std::vector<uint8_t>(bytes, bytes + values.nbytes());
    }
    return train::encodeReals(buffer.dtype,
                              std::vector<double>(values.data(), values.data() + values.size()));
  }

  /// Sets the encoded inputs (the GIL released, the trainer locked).
  void setInputs(const std::vector<std::pair<std::string, std::vector<uint8_t>>> &inputs) {
    for (const auto &[name, bytes] : inputs)
      backend->setInput(name, bytes.data(), bytes.size());
  }

  /// Runs \p body without the GIL, turning the runtime's exceptions into ampc.Error.
  template <typename Body> void run(Body body) {
    std::string failure;
    {
      py::gil_scoped_release release;
      // One call at a time: another thread may call in while this one runs without the GIL.
      std::lock_guard<std::mutex> lock(mutex);
      try {
        body();
      } catch (const std::exception &error) {
        failure = error.what();
      }
    }
    if (!failure.empty())
      raise(failure);
  }

  plan::Plan plan;
  std::unique_ptr<train::TrainingBackend> backend;
  uint64_t seed;
  std::string deviceNote;
  std::mutex mutex;
};

} // namespace

PYBIND11_MODULE(_ampc, m) {
  m.doc() = "The runtime of the ampc Python package: training plans run from NumPy arrays.";
  static py::exception<std::runtime_error> error(m, "Error");
  errorType = error.ptr();
  py::class_<Trainer>(m, "PlanTrainer",
                      "A training plan loaded into the CPU backend, driven one micro step at a "
                      "time.")
      .def(py::init<const std::string &, uint64_t, const std::string &>(), py::arg("plan_path"),
           py::arg("seed") = 0, py::arg("device") = "auto",
           "Loads the training plan at plan_path on device ('auto', 'cpu' or 'cuda', as the "
           "executables' --device) and initialises its parameters from seed.")
      .def_property_readonly("device", &Trainer::device, "Where the plan runs: cpu or cuda.")
      .def_property_readonly("note", &Trainer::note,
                             "Why 'auto' chose the CPU; empty when it did not fall back.")
      .def("inputs", &Trainer::inputs, "(name, dtype, shape) of each model input.")
      .def_property_readonly("accumulation_steps", &Trainer::accumulationSteps,
                             "Micro steps per optimizer step, as the plan was compiled.")
      .def("micro_step", &Trainer::microStep, py::arg("inputs"), py::arg("step"),
           "Sets the inputs (name -> array of the input's shape) and runs one micro step.")
      .def("optimizer_step", &Trainer::optimizerStep, py::arg("step"), py::arg("total_steps"),
           "Runs the optimizer step; returns its loss, grad_norm, lr, loss_scale and skipped.")
      .def("evaluate", &Trainer::evaluate, py::arg("inputs"),
           "The loss of one batch from the forward pass alone, in evaluation mode.")
      .def("state_dict", &Trainer::stateDict,
           "Every parameter and running statistic by name, as float32 arrays.")
      .def("load_state_dict", &Trainer::loadStateDict, py::arg("state"), py::arg("strict") = true,
           "Sets parameters from name -> array.");
}
