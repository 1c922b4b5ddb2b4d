//===- GradientBuckets.h - When each bucket of gradients is final ---------===//
//
// A data parallel run on GPUs all-reduces the gradient accumulators in
// buckets, each issued as soon as the last micro step's backward pass has
// finished accumulating into every accumulator of the bucket, so the
// transfers overlap the rest of the backward pass. Which accumulators form a
// bucket is a compiler decision, made at plan emission from the backward
// schedule (assignGradientBuckets): the micro step's accumulate instructions
// are taken in the order they run (the order in which the gradients become
// final) and cut into consecutive buckets of about `bucketBytes`. Each
// accumulate instruction carries its bucket as the integer attribute
// "bucket" (docs/plan-format.md); a plan without it has one bucket.
//
// gradientBuckets() reads the decision back, with the point after which each
// bucket is final: the last device step group of the micro step that
// computes one of its accumulates (or, without a device program, the last
// such instruction). The runtime and `ampc report` both use it.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_PLAN_GRADIENTBUCKETS_H
#define AMPC_RUNTIME_PLAN_GRADIENTBUCKETS_H

#include "runtime/plan/Plan.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ampc::plan {

/// The default bucket size (PyTorch DDP's 25 MiB).
inline constexpr uint64_t kDefaultGradientBucketBytes = 25ull << 20;

/// One bucket of gradient accumulators.
struct GradientBucket {
  /// The accumulators (State buffers), in the order they become final.
  std::vector<uint32_t> accumulators;
  uint64_t bytes = 0;
  /// The bucket is final after this micro-step device group (with a device
  /// program) or instruction (without one), 0-based.
  size_t readyAfter = 0;
};

/// Cuts the micro step's accumulates into buckets of at most \p bucketBytes
/// (a single accumulator larger than that is a bucket of its own), in the
/// order they run, and records each one's bucket as its "bucket" attribute.
void assignGradientBuckets(Plan &plan, uint64_t bucketBytes);

/// The buckets of \p plan (one bucket of every accumulator when its
/// accumulates carry no "bucket" attribute), in bucket order.
std::vector<GradientBucket> gradientBuckets(const Plan &plan);

/// One line per bucket for reports: "bucket 0: 4 accumulators, 1.2 MB, final
/// after micro-step group 95 of 122".
std::string describeGradientBuckets(const Plan &plan);

} // namespace ampc::plan

#endif // AMPC_RUNTIME_PLAN_GRADIENTBUCKETS_H
