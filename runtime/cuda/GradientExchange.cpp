//===- GradientExchange.cpp - Summing gradients over NCCL, bucket by bucket

#include "runtime/cuda/GradientExchange.h"

#include "runtime/cuda/Driver.h"

namespace ampc::cuda {

std::vector<size_t> GradientExchange::cutsFor(const plan::Plan &plan) {
  std::vector<size_t> cuts;
  for (const plan::GradientBucket &bucket : plan::gradientBuckets(plan))
    cuts.push_back(bucket.readyAfter);
  return cuts;
}

GradientExchange::GradientExchange(Executor &executor, NcclWorld &world)
    : executor(executor), world(world), all(plan::gradientBuckets(executor.plan())) {
  Device &device = executor.device();
  const DriverApi &api = device.api();
  device.makeCurrent();
  checkDriver(api, api.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate",
              "creating the gradient exchange stream");
  checkDriver(api, api.cuEventCreate(&computed, CU_EVENT_DISABLE_TIMING), "cuEventCreate",
              "creating the gradient exchange events");
  checkDriver(api, api.cuEventCreate(&exchanged, CU_EVENT_DISABLE_TIMING), "cuEventCreate",
              "creating the gradient exchange events");
}

GradientExchange::~GradientExchange() {
  executor.setMicroStepObserver(nullptr);
  const DriverApi &api = executor.device().api();
  if (computed)
    api.cuEventDestroy(computed);
  if (exchanged)
    api.cuEventDestroy(exchanged);
  if (stream)
    api.cuStreamDestroy(stream);
}

void GradientExchange::armForLastMicroStep() {
  next = 0;
  early = 0;
  executor.setMicroStepObserver([this](size_t done) {
    issueReady(done);
    early = next;
  });
}

void GradientExchange::issueReady(size_t done) {
  // Groups [0, done) are queued: a bucket final after group g < done can go.
  while (next < all.size() && all[next].readyAfter < done)
    issue(all[next++]);
}

void GradientExchange::issue(const plan::GradientBucket &bucket) {
  Device &device = executor.device();
  const DriverApi &api = device.api();
  // The exchange stream waits for what the compute stream has queued so far.
  checkDriver(api, api.cuEventRecord(computed, device.stream()), "cuEventRecord",
              "marking a gradient bucket final");
  checkDriver(api, api.cuStreamWaitEvent(stream, computed, 0), "cuStreamWaitEvent",
              "ordering a gradient bucket's exchange");
  world.groupStart();
  for (uint32_t accumulator : bucket.accumulators)
    world.allReduceSum(executor.deviceAddress(accumulator),
                       static_cast<size_t>(plan::numElements(executor.plan().buffers[accumulator])),
                       stream);
  world.groupEnd();
}

void GradientExchange::finish() {
  executor.setMicroStepObserver(nullptr);
  // Buckets the last micro step did not issue (none was armed, or the
  // groups after the last cut).
  issueReady(~size_t(0));
  Device &device = executor.device();
  const DriverApi &api = device.api();
  const plan::Plan &plan = executor.plan();
  if (plan.lossScaling.mode != plan::LossScaleMode::None) {
    // The found flag is 0 or 1 (f32): the maximum is "any rank overflowed".
    checkDriver(api, api.cuEventRecord(computed, device.stream()), "cuEventRecord",
                "marking the overflow flag final");
    checkDriver(api, api.cuStreamWaitEvent(stream, computed, 0), "cuStreamWaitEvent",
                "ordering the overflow flag's exchange");
    world.allReduceMax(executor.deviceAddress(plan.lossScaling.foundNonFinite), 1, stream);
  }
  checkDriver(api, api.cuEventRecord(exchanged, stream), "cuEventRecord",
              "marking the gradient exchange done");
  checkDriver(api, api.cuStreamWaitEvent(device.stream(), exchanged, 0), "cuStreamWaitEvent",
              "ordering the optimizer step after the gradient exchange");
  next = 0;
}

} // namespace ampc::cuda
