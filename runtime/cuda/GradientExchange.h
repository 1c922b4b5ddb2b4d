//===- GradientExchange.h - Summing gradients over NCCL, bucket by bucket -===//
//
// One rank of a data parallel run on GPUs (runtime/train/Distributed.h).
// The plan's gradient buckets (runtime/plan/GradientBuckets.h) say after
// which micro-step group each bucket of accumulators is final. During the
// last micro step of an optimizer step the executor calls back after each
// segment it queues (Executor::setMicroStepObserver; the executor is built
// with the buckets' ready groups as segment cuts, cutsFor()), and every
// bucket that is final by then is summed over the ranks at once: an event
// recorded on the compute stream, the exchange stream waiting for it, and
// one ncclAllReduce per accumulator of the bucket in one NCCL group, on the
// exchange stream. So the transfers overlap the rest of the backward pass.
// Before the optimizer step, finish() issues what is left, takes the maximum
// of the loss-scaling found flag (an overflow on any rank skips the step on
// all), and makes the compute stream wait for the exchange stream. Nothing
// here waits for the GPU on the host.
//
// The plan divides each micro-batch's loss by the global number of
// micro-batches, so the sum over the ranks is the mean gradient. NCCL adds
// in the same order every run for a given world size, topology and NCCL
// version (set NCCL_ALGO=Ring NCCL_PROTO=Simple to pin the choice).
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CUDA_GRADIENTEXCHANGE_H
#define AMPC_RUNTIME_CUDA_GRADIENTEXCHANGE_H

#include "runtime/cuda/Executor.h"
#include "runtime/cuda/Nccl.h"
#include "runtime/plan/GradientBuckets.h"

#include <cstddef>
#include <vector>

namespace ampc::cuda {

class GradientExchange {
public:
  /// The micro-step groups after which the executor must end a segment:
  /// where the buckets of \p plan become final.
  static std::vector<size_t> cutsFor(const plan::Plan &plan);

  /// Over \p executor's accumulators and \p world; creates the exchange
  /// stream and its events on \p executor's device.
  GradientExchange(Executor &executor, NcclWorld &world);
  ~GradientExchange();
  GradientExchange(const GradientExchange &) = delete;
  GradientExchange &operator=(const GradientExchange &) = delete;

  /// Call before queueing the last micro step of an optimizer step: each
  /// bucket is issued as soon as that micro step has queued its groups.
  void armForLastMicroStep();
  /// Call before queueing the optimizer step (see the file comment).
  void finish();

  const std::vector<plan::GradientBucket> &buckets() const { return all; }
  /// Buckets issued during the last micro step (the rest by finish()).
  size_t issuedEarly() const { return early; }
  CUstream exchangeStream() const { return stream; }

private:
  void issueReady(size_t done);
  void issue(const plan::GradientBucket &bucket);

  Executor &executor;
  NcclWorld &world;
  std::vector<plan::GradientBucket> all;
  CUstream stream = nullptr;
  CUevent computed = nullptr, exchanged = nullptr;
  size_t next = 0, early = 0;
};

} // namespace ampc::cuda

#endif // AMPC_RUNTIME_CUDA_GRADIENTEXCHANGE_H
