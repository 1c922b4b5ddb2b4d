//===- RunCheckpoint.h - What a training run puts in its checkpoints ------===//
//
// The runner's side of checkpoints: the identity a checkpoint must share with
// a run to continue it bit for bit, the buffers and moving average it holds,
// and finding the checkpoint --resume names. The file format itself is
// Checkpoint.h's (docs/checkpoint-format.md).
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_TRAIN_RUNCHECKPOINT_H
#define AMPC_RUNTIME_TRAIN_RUNCHECKPOINT_H

#include "runtime/plan/Plan.h"
#include "runtime/train/Backend.h"
#include "runtime/train/Checkpoint.h"
#include "runtime/train/Runner.h"
#include "runtime/train/Weights.h"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ampc::train {

/// \p value exactly, as a hexadecimal float ("%a"), for the metadata.
std::string exactNumber(double value);

/// The last component of \p path.
std::string fileNameOf(const std::string &path);

/// The metadata that must match for a checkpoint to continue this run bit
/// for bit: the plan and every option that changes the numbers.
std::map<std::string, std::string> runIdentity(const plan::Plan &plan, const RunnerOptions &options,
                                               const TrainingBackend &backend);

/// Throws when \p checkpoint (read from \p file) was written by another plan
/// or with other numerics options than \p identity, naming what differs.
void checkIdentity(const Checkpoint &checkpoint, const std::string &file,
                   const std::map<std::string, std::string> &identity);

/// The buffers a checkpoint holds, in restore order: parameters (master
/// weights), their reduced-precision copies, then the state (gradient
/// accumulators, optimizer moments, loss-scale counters).
std::vector<std::pair<uint32_t, std::string>> checkpointBuffers(const plan::Plan &plan);

/// Appends the checkpointed buffers of \p backend to \p checkpoint.
void captureBuffers(const plan::Plan &plan, TrainingBackend &backend, Checkpoint &checkpoint);

/// Restores the buffers of \p checkpoint (read from \p file) into \p backend.
void restoreBuffers(const plan::Plan &plan, TrainingBackend &backend, const Checkpoint &checkpoint,
                    const std::string &file);

/// Appends the moving average \p ema as sections "ema/<parameter>" (F32).
void captureAverage(const plan::Plan &plan, const WeightAverage &ema, Checkpoint &checkpoint);

/// The moving average held by \p checkpoint (read from \p file).
ParameterValues restoreAverage(const plan::Plan &plan, const Checkpoint &checkpoint,
                               const std::string &file);

/// Creates \p directory and its parents; errors are left to the write.
void makeDirectories(const std::string &directory);

/// True when \p path is a directory.
bool isDirectory(const std::string &path);

/// The checkpoint --resume names, decoded, and its file; no file when
/// `--resume latest` finds no checkpoint yet (the run starts at step 0).
/// Invalid files in a directory are skipped with a warning naming them.
std::pair<std::string, Checkpoint> findResumePoint(const RunnerOptions &options,
                                                   const std::string &program,
                                                   const RunnerStreams &streams);

} // namespace ampc::train

#endif // AMPC_RUNTIME_TRAIN_RUNCHECKPOINT_H
