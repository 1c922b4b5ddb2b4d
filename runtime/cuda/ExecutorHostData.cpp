//===- ExecutorHostData.cpp - cuda::Executor: metrics, inputs, test hooks -===//
//
// What crosses between the host and the device outside the steps
// themselves: reading the metrics block and the error records once per
// optimizer step (readMetrics), parameter initialisation and random inputs
// computed with the CPU backend's formulas and uploaded, setInput and the
// pinned staging slots its copies go through, resetting the state; and the
// hooks tests use to compare a step group with the CPU backend (runGroups,
// bufferValues, setBufferValues), with the value encoding they share.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/ExecutorState.h"
#include "runtime/numerics/Float16.h"
#include "runtime/numerics/Philox.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace ampc::cuda {

std::vector<double> decodeValues(const uint8_t *bytes, plan::DType dtype, size_t count) {
  std::vector<double> values(count);
  for (size_t i = 0; i < count; ++i) {
    switch (dtype) {
    case plan::DType::F32: {
      float value;
      std::memcpy(&value, bytes + 4 * i, 4);
      values[i] = value;
      break;
    }
    case plan::DType::BF16:
    case plan::DType::F16: {
      uint16_t bits;
      std::memcpy(&bits, bytes + 2 * i, 2);
      values[i] = dtype == plan::DType::BF16 ? numerics::bf16BitsToFloat(bits)
                                             : numerics::f16BitsToFloat(bits);
      break;
    }
    case plan::DType::I32: {
      int32_t value;
      std::memcpy(&value, bytes + 4 * i, 4);
      values[i] = value;
      break;
    }
    case plan::DType::I64: {
      int64_t value;
      std::memcpy(&value, bytes + 8 * i, 8);
      values[i] = static_cast<double>(value);
      break;
    }
    }
  }
  return values;
}

std::vector<uint8_t> encodeValues(const std::vector<double> &values, plan::DType dtype) {
  std::vector<uint8_t> bytes(values.size() * plan::dtypeBytes(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    switch (dtype) {
    case plan::DType::F32: {
      const float value = static_cast<float>(values[i]);
      std::memcpy(bytes.data() + 4 * i, &value, 4);
      break;
    }
    case plan::DType::BF16:
    case plan::DType::F16: {
      const float value = static_cast<float>(values[i]);
      const uint16_t bits = dtype == plan::DType::BF16 ? numerics::floatToBF16Bits(value)
                                                       : numerics::floatToF16Bits(value);
      std::memcpy(bytes.data() + 2 * i, &bits, 2);
      break;
    }
    case plan::DType::I32: {
      const int32_t value = static_cast<int32_t>(values[i]);
      std::memcpy(bytes.data() + 4 * i, &value, 4);
      break;
    }
    case plan::DType::I64: {
      const int64_t value = static_cast<int64_t>(values[i]);
      std::memcpy(bytes.data() + 8 * i, &value, 8);
      break;
    }
    }
  }
  return bytes;
}

//===----------------------------------------------------------------------===//
// Metrics, host data and test hooks
//===----------------------------------------------------------------------===//

/// One scalar of \p dtype at \p bytes.
double Executor::Impl::scalarAt(const uint8_t *bytes, plan::DType dtype) {
  return decodeValues(bytes, dtype, 1)[0];
}

StepMetrics Executor::Impl::readMetrics() {
  const size_t recordBytes = 2 * sizeof(plan::DeviceErrorRecord);
  const uint64_t metricBytes = metricsBytes(plan);
  uint8_t *host = static_cast<uint8_t *>(pinnedMetrics.data());
  device.copyToHostAsync(host, metrics, metricBytes);
  device.copyToHostAsync(host + metricBytes, microRecord, recordBytes);
  const bool scaling = plan.lossScaling.mode != plan::LossScaleMode::None;
  uint8_t *state = host + metricBytes + recordBytes;
  if (scaling) {
    device.copyToHostAsync(state, address(plan.lossScaling.scale), 4);
    device.copyToHostAsync(state + 4, address(plan.lossScaling.appliedSteps), 4);
    device.copyToHostAsync(state + 8, address(plan.lossScaling.floorHits), 4);
  }
  device.synchronize("running the training step on the GPU");
  // Errors the kernels recorded, micro step first.
  for (int which = 0; which < 2; ++which) {
    plan::DeviceErrorRecord record;
    std::memcpy(&record, host + metricBytes + which * sizeof(record), sizeof(record));
    if (record.code != 0) {
      device.memsetAsync(microRecord, 0, recordBytes);
      throw cpu::ExecutionError(plan::describeDeviceError(plan, which == 1, record));
    }
  }
  StepMetrics result;
  const plan::DType lossType = plan.buffers[plan.loss].dtype;
  const uint64_t losses = lossesForMean ? lossesForMean : 1;
  double sum = 0;
  if (lossesForMean) {
    for (uint64_t i = 0; i < losses; ++i)
      sum += scalarAt(host + 8 * i, lossType);
  } else {
    sum = scalarAt(host + 8 * lastMicroSlot, lossType);
  }
  result.loss = sum / static_cast<double>(losses);
  if (stepTimed)
    result.deviceMilliseconds = Event::elapsedMilliseconds(*stepStart, *stepEnd);
  const uint64_t base = 8 * static_cast<uint64_t>(plan.accumulationSteps);
  result.gradNorm = scalarAt(host + base, plan.buffers[plan.gradNorm].dtype);
  result.learningRate = scalarAt(host + base + 8, plan.buffers[plan.learningRate].dtype);
  if (scaling) {
    float scaleBefore, appliedBefore, floorBefore, scale, applied, floor;
    std::memcpy(&scaleBefore, host + base + 16, 4);
    std::memcpy(&appliedBefore, host + base + 24, 4);
    std::memcpy(&floorBefore, host + base + 32, 4);
    std::memcpy(&scale, state, 4);
    std::memcpy(&applied, state + 4, 4);
    std::memcpy(&floor, state + 8, 4);
    result.scaleBefore = scaleBefore;
    result.lossScale.enabled = true;
    result.lossScale.scale = scale;
    result.lossScale.lastStepSkipped = optimizerSteps > 0 && applied == appliedBefore;
    result.lossScale.floorReachedNow = floorBefore == 0 && floor > 0;
    result.lossScale.skippedSteps =
        static_cast<int64_t>(optimizerSteps) - static_cast<int64_t>(applied);
  }
  return result;
}

//===----------------------------------------------------------------------===//
// Staging: host-to-device copies from pinned memory
//===----------------------------------------------------------------------===//
//
// Every micro step uploads its inputs (setInput) and the run scalars. From
// pageable memory the driver may hold the host until the stream has drained
// before it takes the bytes, and then the host cannot queue the next micro
// step's data and graph while the GPU computes. So these copies go through
// pinned slots: the host writes a slot (a memcpy), queues cuMemcpyHtoDAsync
// from it, records the slot's event right after the copy and returns.
//
// A slot is written again only once the stream is past its previous copy.
// The host knows that without asking the driver when Device::synchronize has
// returned since the copy was queued (readMetrics, once per optimizer step);
// otherwise it waits on the slot's event. Each ring has a slot per micro step
// of an optimizer step (at least two, within kStagingBytesLimit), so a
// training loop that reads the metrics once per optimizer step never waits;
// a caller that queues more uploads than that between synchronisations waits
// for the copy of a ring's length ago, which bounds how far the host runs
// ahead of the GPU without stalling it.

namespace {

/// The most pinned memory one ring takes; rings of larger inputs get fewer
/// slots (never fewer than two).
constexpr uint64_t kStagingBytesLimit = 64ull << 20;

/// Slots of \p slotBytes for \p wanted copies between synchronisations.
size_t stagingSlots(uint64_t slotBytes, uint64_t wanted) {
  const uint64_t fit = kStagingBytesLimit / std::max<uint64_t>(slotBytes, 1);
  return static_cast<size_t>(std::max<uint64_t>(2, std::min(wanted, fit)));
}

} // namespace

StagingRing::~StagingRing() {
  for (Slot &slot : slots)
    if (slot.pending && device->synchronizations() == slot.syncsAtCopy) {
      try {
        slot.copied->synchronize();
      } catch (const CudaError &) {
        // A failed stream leaves nothing to wait for.
      }
    }
}

void Executor::Impl::allocateStaging() {
  const uint64_t microSteps = static_cast<uint64_t>(std::max<int64_t>(plan.accumulationSteps, 1));
  bool warned = false;
  auto layOut = [&](StagingRing &ring, uint64_t bytes, uint64_t wanted, const std::string &what) {
    ring.slotBytes = bytes;
    if (bytes == 0)
      return;
    const uint64_t stride = alignUp(bytes);
    const size_t slots = stagingSlots(stride, wanted);
    try {
      ring.memory = device.allocatePinned(stride * slots, what);
    } catch (const CudaError &error) {
      // Pageable copies still work; they only let the host stall.
      if (!warned) {
        const std::string why = error.what();
        std::fprintf(stderr,
                     "warning: %s; host-to-device copies go from pageable memory instead, "
                     "which may hold the host until the GPU is idle every micro step\n",
                     why.substr(0, why.find('\n')).c_str());
        warned = true;
      }
      return;
    }
    ring.device = &device;
    ring.slots.resize(slots);
    for (size_t i = 0; i < slots; ++i) {
      ring.slots[i].offset = i * stride;
      ring.slots[i].copied = std::make_unique<Event>(device, CU_EVENT_DISABLE_TIMING);
    }
  };
  inputStaging.resize(plan.inputs.size());
  for (size_t i = 0; i < plan.inputs.size(); ++i)
    layOut(inputStaging[i], bufferBytes(plan.buffers[plan.inputs[i].buffer]), microSteps,
           "the staging slots of input '" + plan.inputs[i].name + "'");
  // Every micro step and the optimizer step change the step.
  layOut(runScalarStaging, sizeof(plan::RunScalarBlock), microSteps + 2,
         "the staging slots of the run scalars");
}

void Executor::Impl::stageCopy(StagingRing &ring, CUdeviceptr destination, const void *data,
                               size_t bytes) {
  if (!ring.memory.data() || bytes > ring.slotBytes) {
    device.copyToDeviceAsync(destination, data, bytes);
    return;
  }
  StagingRing::Slot &slot = ring.slots[ring.next];
  ring.next = (ring.next + 1) % ring.slots.size();
  // The stream may not have read this slot's previous bytes yet: rewriting
  // them now would change what that copy delivers.
  if (slot.pending && device.synchronizations() == slot.syncsAtCopy)
    slot.copied->synchronize("waiting for the GPU to take an earlier upload from its staging slot");
  uint8_t *host = static_cast<uint8_t *>(ring.memory.data()) + slot.offset;
  std::memcpy(host, data, bytes);
  device.copyToDeviceAsync(destination, host, bytes);
  slot.copied->record();
  slot.syncsAtCopy = device.synchronizations();
  slot.pending = true;
}

void Executor::Impl::requireParameters() const {
  if (!parametersSet)
    throw cpu::ExecutionError("the parameters are not initialised: call "
                              "initializeParameters first");
}

void Executor::Impl::upload(uint32_t buffer, const std::vector<double> &values) {
  const std::vector<uint8_t> bytes = encodeValues(values, plan.buffers[buffer].dtype);
  device.copyToDevice(address(buffer), bytes.data(), bytes.size());
}

void Executor::Impl::initializeParameters(uint64_t seed) {
  // The CPU backend's initializer, run on the host, is the definition.
  cpu::Executor host(plan, cpu::Precision::F32);
  host.initializeParameters(seed);
  for (const plan::Parameter &parameter : plan.parameters)
    upload(parameter.buffer, host.bufferValues(parameter.buffer));
  for (const plan::ParameterCopy &copy : plan.parameterCopies)
    upload(copy.buffer, host.bufferValues(copy.buffer));
  parametersSet = true;
}

void Executor::Impl::randomizeInputs(uint64_t seed) {
  for (const plan::Input &input : plan.inputs)
    if (plan::isIntegerDType(plan.buffers[input.buffer].dtype) && input.bound == 0)
      throw cpu::ExecutionError("input '" + input.name +
                                "' is an integer input without a bound, so it cannot be "
                                "randomized: supply its data with setInput");
  // The CPU backend's formulas (docs/plan-format.md, "Random numbers").
  for (size_t index = 0; index < plan.inputs.size(); ++index) {
    const plan::Input &input = plan.inputs[index];
    const plan::Buffer &buffer = plan.buffers[input.buffer];
    const int64_t count = plan::numElements(buffer);
    const uint32_t stream = numerics::fnv1a32(input.name.data(), input.name.size()) ^ 0x9e3779b9u;
    std::vector<double> values(static_cast<size_t>(count));
    for (int64_t e = 0; e < count; ++e) {
      if (plan::isIntegerDType(buffer.dtype)) {
        const numerics::PhiloxBlock out = numerics::philoxForElement(seed, 0, stream, e);
        const uint64_t bits = (static_cast<uint64_t>(out.word[1]) << 32) | out.word[0];
        values[e] = static_cast<double>(bits % static_cast<uint64_t>(input.bound));
      } else {
        // As the CPU backend: f32 inputs hold the float nearest the
        // sample, bf16/f16 inputs round the double once.
        const double z = numerics::standardNormal(seed, 0, stream, e);
        values[e] = buffer.dtype == plan::DType::F32    ? static_cast<double>(static_cast<float>(z))
                    : buffer.dtype == plan::DType::BF16 ? numerics::roundToBF16(z)
                                                        : numerics::roundToF16(z);
      }
    }
    markStepStart();
    const std::vector<uint8_t> bytes = encodeValues(values, buffer.dtype);
    stageCopy(inputStaging[index], address(input.buffer), bytes.data(), bytes.size());
  }
}

void Executor::Impl::setInput(const std::string &name, const void *data, size_t bytes) {
  const plan::Input *found = nullptr;
  size_t index = 0;
  for (size_t i = 0; i < plan.inputs.size(); ++i)
    if (plan.inputs[i].name == name) {
      found = &plan.inputs[i];
      index = i;
    }
  if (!found)
    throw cpu::ExecutionError("setInput: the plan has no input named '" + name + "'");
  const plan::Buffer &buffer = plan.buffers[found->buffer];
  const size_t expected = bufferBytes(buffer);
  if (bytes != expected)
    throw cpu::ExecutionError("setInput: input '" + name + "' (" + plan::dtypeName(buffer.dtype) +
                              " " + plan::shapeToString(buffer.shape) + ") needs " +
                              std::to_string(expected) + " bytes, got " + std::to_string(bytes));
  if (found->bound > 0 && plan::isIntegerDType(buffer.dtype)) {
    const std::vector<double> values =
        decodeValues(static_cast<const uint8_t *>(data), buffer.dtype,
                     static_cast<size_t>(plan::numElements(buffer)));
    for (size_t i = 0; i < values.size(); ++i)
      if (values[i] < 0 || values[i] >= static_cast<double>(found->bound))
        throw cpu::ExecutionError("setInput: input '" + name + "' has value " +
                                  std::to_string(static_cast<int64_t>(values[i])) + " at index " +
                                  std::to_string(i) + ", outside its range [0, " +
                                  std::to_string(found->bound) + ")");
  }
  // Through a pinned slot, so the call returns without waiting for the GPU
  // and the caller may reuse \p data at once. The destination is the
  // input's one buffer in the persistent pool: the stream orders this copy
  // after the previous micro step's graph, which reads the buffer, so no
  // second device buffer is needed.
  markStepStart();
  stageCopy(inputStaging[index], address(found->buffer), data, bytes);
}

void Executor::Impl::resetState() {
  for (uint32_t id = 0; id < plan.buffers.size(); ++id)
    if (plan.buffers[id].role == plan::BufferRole::State)
      device.memsetAsync(address(id), 0, bufferBytes(plan.buffers[id]));
  if (plan.lossScaling.mode != plan::LossScaleMode::None)
    device.copyToDeviceAsync(address(plan.lossScaling.scale), &plan.lossScaling.initialScale, 4);
  optimizerSteps = 0;
}

void Executor::Impl::runGroups(PlanFunction which, size_t first, size_t last,
                               const cpu::RunOptions &run) {
  FunctionState &f = which == PlanFunction::MicroStep ? micro : optimizer;
  if (first > last || last > f.program->groups.size())
    throw CudaError(CudaErrorKind::InvalidArgument,
                    "runGroups: groups [" + std::to_string(first) + ", " + std::to_string(last) +
                        ") are outside the " + std::to_string(f.program->groups.size()) +
                        " groups of " + planFunctionName(which));
  if (f.readsRunScalars)
    uploadRunScalars(run);
  runGroupRange(f, first, last);
}

std::vector<double> Executor::Impl::bufferValues(uint32_t buffer) {
  if (buffer >= plan.buffers.size() || !addresses.buffers[buffer])
    throw CudaError(CudaErrorKind::InvalidArgument,
                    "buffer " + std::to_string(buffer) +
                        " has no device memory (a value fused into a kernel)");
  const plan::Buffer &b = plan.buffers[buffer];
  std::vector<uint8_t> bytes(bufferBytes(b));
  device.copyToHost(bytes.data(), address(buffer), bytes.size());
  return decodeValues(bytes.data(), b.dtype, static_cast<size_t>(plan::numElements(b)));
}

void Executor::Impl::setBufferValues(uint32_t buffer, const std::vector<double> &values) {
  if (buffer >= plan.buffers.size() || !addresses.buffers[buffer] ||
      values.size() != static_cast<size_t>(plan::numElements(plan.buffers[buffer])))
    throw CudaError(CudaErrorKind::InvalidArgument,
                    "setBufferValues: buffer " + std::to_string(buffer) +
                        " has no device memory or another element count");
  upload(buffer, values);
}

} // namespace ampc::cuda
