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
#include "runtime/train/Checkpoint.h"
#include "runtime/train/Data.h"
#include "runtime/train/Evaluation.h"
#include "runtime/train/RunCheckpoint.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
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
  void microStep(const std::map<std::string, py::array> &arrays, uint64_t step,
                 uint64_t totalSteps) {
    const std::vector<EncodedInput> inputs = encodeInputs(arrays);
    const cpu::RunOptions options = runOptions(step, totalSteps, /*training=*/true);
    run([&] {
      setInputs(inputs);
      backend->runMicroStep(options);
    });
  }

  /// Runs the optimizer step; returns the step's metrics.
  py::dict optimizerStep(uint64_t step, uint64_t totalSteps) {
    const cpu::RunOptions options = runOptions(step, totalSteps, /*training=*/true);
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
    const std::vector<EncodedInput> inputs = encodeInputs(arrays);
    const cpu::RunOptions options = runOptions(0, 0, /*training=*/false);
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

  /// Writes the training state after optimizer step \p step to \p directory: the plan as
  /// model.plan and a checkpoint step-NNNNNN.ckpt in the executables' format (master weights,
  /// copies, optimizer moments, loss-scale counters) whose metadata holds \p meta beside the
  /// plan's identity. Both files are written atomically; returns the checkpoint's path.
  std::string save(const std::string &directory, uint64_t step,
                   const std::map<std::string, std::string> &meta) {
    train::Checkpoint checkpoint;
    checkpoint.meta = meta;
    checkpoint.meta["format"] = "ampc training checkpoint";
    checkpoint.meta["plan_hash"] = train::planHash(plan);
    checkpoint.meta["model"] = plan.modelName;
    checkpoint.meta["device"] = backend->device();
    checkpoint.meta["seed"] = std::to_string(seed);
    checkpoint.meta["step"] = std::to_string(step);
    checkpoint.meta["accumulation_steps"] = std::to_string(plan.accumulationSteps);
    checkpoint.meta["gradient_accumulators"] = "zero (written at an optimizer-step boundary)";
    checkpoint.meta["training"] = plan.trainingSummary;
    const std::string name = train::checkpointFileName(step);
    run([&] {
      train::captureBuffers(plan, *backend, checkpoint);
      std::ostringstream planBytes;
      plan::writePlan(plan, planBytes);
      train::makeDirectories(directory);
      train::writeFileAtomically(directory, "model.plan", planBytes.str());
      train::writeFileAtomically(directory, name, train::encodeCheckpoint(checkpoint));
    });
    return directory + "/" + name;
  }

  /// Restores the state \p file (a checkpoint of this plan, on this backend) holds, and the
  /// seed it was trained with; returns its metadata.
  std::map<std::string, std::string> restore(const std::string &file) {
    train::Checkpoint checkpoint;
    run([&] {
      checkpoint = train::decodeCheckpoint(train::readWholeFile(file), file);
      const std::string where = "cannot resume from " + file + ": ";
      if (checkpoint.value("plan_hash", file) != train::planHash(plan))
        throw train::CheckpointError(where + "it was written by a plan with hash " +
                                     checkpoint.value("plan_hash", file) + " (model @" +
                                     checkpoint.value("model", file) + "), this plan has hash " +
                                     train::planHash(plan));
      if (checkpoint.value("device", file) != backend->device())
        throw train::CheckpointError(where + "it was written on the " +
                                     checkpoint.value("device", file) +
                                     " backend, whose numerics differ from the " +
                                     backend->device() + " backend's (load it with device='" +
                                     checkpoint.value("device", file) + "')");
      train::restoreBuffers(plan, *backend, checkpoint, file);
      // Dropout's random numbers continue from the saved run's seed.
      seed = std::stoull(checkpoint.value("seed", file));
    });
    return checkpoint.meta;
  }

private:
  /// A backend run at \p step of \p totalSteps with this trainer's seed; temporaries are not
  /// kept.
  cpu::RunOptions runOptions(uint64_t step, uint64_t totalSteps, bool training) const {
    cpu::RunOptions options;
    options.seed = seed;
    options.step = step;
    options.totalSteps = totalSteps;
    options.training = training;
    options.keepTemporaries = false;
    return options;
  }

  static std::string shapeText(const py::array &array) {
    return plan::shapeToString(std::vector<int64_t>(array.shape(), array.shape() + array.ndim()));
  }

  /// Each input's bytes in its dtype, checked (shape, kind, range), with the GIL held.
  /// An input's bytes in its dtype: the caller's array itself when it is already a C-ordered
  /// array of that dtype (held here so it outlives the step), else a converted copy.
  struct EncodedInput {
    std::string name;
    std::optional<py::array> held;
    std::vector<uint8_t> converted;
    const void *data() const { return held ? held->data() : converted.data(); }
    size_t size() const { return held ? static_cast<size_t>(held->nbytes()) : converted.size(); }
  };

  std::vector<EncodedInput> encodeInputs(const std::map<std::string, py::array> &arrays) const {
    for (const auto &[name, array] : arrays)
      if (std::none_of(plan.inputs.begin(), plan.inputs.end(),
                       [&](const plan::Input &input) { return input.name == name; }))
        raise("'" + name + "' is not an input of the model");
    std::vector<EncodedInput> out;
    for (const plan::Input &input : plan.inputs) {
      auto found = arrays.find(input.name);
      if (found == arrays.end())
        raise("no value for input '" + input.name + "'");
      EncodedInput &encoded = out.emplace_back();
      encoded.name = input.name;
      encodeInput(input, found->second, encoded);
    }
    return out;
  }

  void encodeInput(const plan::Input &input, const py::array &array, EncodedInput &out) const {
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
    // The caller's bytes as they lie: C order, little-endian (this runtime's byte order).
    const bool asIs =
        (array.flags() & py::array::c_style) != 0 && array.dtype().byteorder() != '>';
    if (buffer.dtype == plan::DType::F32 && kind == 'f' && array.itemsize() == 4 && asIs) {
      out.held = array; // no copy: the runtime reads the caller's floats
      return;
    }
    if (integer) {
      if (buffer.dtype == plan::DType::I64 && kind == 'i' && array.itemsize() == 8 && asIs) {
        out.held = array;
        return;
      }
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
      out.converted = train::encodeIntegers(buffer.dtype, ints);
      return;
    }
    py::array_t<float, py::array::c_style | py::array::forcecast> values(array);
    if (buffer.dtype == plan::DType::F32) {
      out.held = values;
      return;
    }
    out.converted = train::encodeReals(
        buffer.dtype, std::vector<double>(values.data(), values.data() + values.size()));
  }

  /// Sets the encoded inputs (the GIL released, the trainer locked).
  void setInputs(const std::vector<EncodedInput> &inputs) {
    for (const EncodedInput &input : inputs)
      backend->setInput(input.name, input.data(), input.size());
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
           py::arg("total_steps") = 0, "Sets the inputs (name -> array of the input's shape) and runs one micro step.")
      .def("optimizer_step", &Trainer::optimizerStep, py::arg("step"), py::arg("total_steps"),
           "Runs the optimizer step; returns its loss, grad_norm, lr, loss_scale and skipped.")
      .def("evaluate", &Trainer::evaluate, py::arg("inputs"),
           "The loss of one batch from the forward pass alone, in evaluation mode.")
      .def("state_dict", &Trainer::stateDict,
           "Every parameter and running statistic by name, as float32 arrays.")
      .def("save", &Trainer::save, py::arg("directory"), py::arg("step"), py::arg("meta"),
           "Writes model.plan and the checkpoint after optimizer step `step` to directory, "
           "with meta in its metadata; returns the checkpoint's path.")
      .def("restore", &Trainer::restore, py::arg("file"),
           "Restores a checkpoint of this plan; returns its metadata.")
      .def("load_state_dict", &Trainer::loadStateDict, py::arg("state"), py::arg("strict") = true,
           "Sets parameters from name -> array.");
}
