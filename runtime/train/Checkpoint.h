//===- Checkpoint.h - Training checkpoints: format, files and directories -===//
//
// A checkpoint is everything a training executable needs to continue a run
// bit for bit after an optimizer step: the plan's Parameter, State and
// ParameterCopy buffers (master weights, gradient accumulators and optimizer
// moments, loss-scale counters, reduced-precision copies) and a metadata
// section with the run's position (the optimizer step, hence the data and
// dropout position), the runner's counters and the identity of the plan and
// of the options that affect numerics. The byte layout is specified in
// docs/checkpoint-format.md; encodeCheckpoint/decodeCheckpoint implement it.
//
// Files are named step-NNNNNN.ckpt and written atomically (a temporary file
// in the same directory, fsync, rename, fsync of the directory), so a crash
// at any instant leaves every earlier checkpoint readable. Nothing here
// depends on the backend that produced the values.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_TRAIN_CHECKPOINT_H
#define AMPC_RUNTIME_TRAIN_CHECKPOINT_H

#include "runtime/plan/Plan.h"

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ampc::train {

/// A checkpoint that cannot be read or written, or that does not belong to
/// this run; what() is one line naming the file and the cause.
class CheckpointError : public std::runtime_error {
public:
  using runtime_error::runtime_error;
};

/// The version of the format this runner writes and reads.
inline constexpr uint32_t kCheckpointVersion = 1;

/// How a section's bytes are interpreted (the on-disk codes).
enum class SectionType : uint8_t {
  Text = 0, ///< UTF-8 "key value" lines (the metadata)
  F32 = 1,  ///< little-endian float32 elements
  I64 = 2   ///< little-endian int64 elements
};

/// A named section: the metadata or one buffer.
struct CheckpointSection {
  std::string name;
  SectionType type = SectionType::Text;
  std::vector<int64_t> shape; ///< empty for Text and scalars
  std::string bytes;
};

/// A decoded checkpoint: metadata plus buffers, in file order.
struct Checkpoint {
  /// The "meta" section as key -> value.
  std::map<std::string, std::string> meta;
  /// Every other section.
  std::vector<CheckpointSection> sections;

  /// The section named \p name, or null.
  const CheckpointSection *find(const std::string &name) const;
  /// meta[key]; CheckpointError naming \p file when it is missing.
  const std::string &value(const std::string &key, const std::string &file) const;
  /// meta[key], or \p fallback when it is missing.
  std::string valueOr(const std::string &key, const std::string &fallback) const;
};

/// The file bytes of \p checkpoint (docs/checkpoint-format.md).
std::string encodeCheckpoint(const Checkpoint &checkpoint);

/// Parses and verifies \p bytes (magic, version, checksum, table bounds).
/// Throws CheckpointError "checkpoint FILE: <cause>" with \p file as FILE.
Checkpoint decodeCheckpoint(const std::string &bytes, const std::string &file);

/// "step-000200.ckpt".
std::string checkpointFileName(uint64_t step);

/// The checkpoint files of \p directory (names step-N.ckpt only) as
/// (step, path), newest first; empty when the directory does not exist.
std::vector<std::pair<uint64_t, std::string>> listCheckpoints(const std::string &directory);

/// Writes \p bytes to \p directory/\p name atomically: a temporary file in
/// the same directory, fsync, rename over \p name, fsync of the directory.
/// On failure the temporary file is removed, any earlier file is untouched,
/// and CheckpointError names the file and the cause (strerror).
void writeFileAtomically(const std::string &directory, const std::string &name,
                         const std::string &bytes);

/// The bytes of \p path; CheckpointError naming it if it cannot be read.
std::string readWholeFile(const std::string &path);

/// Removes all but the \p keep newest checkpoint files of \p directory up to
/// step \p upTo, and temporary files left by interrupted writes. Files after
/// \p upTo (a run resumed from an earlier checkpoint of the same directory
/// finds those of the run it continues) are left alone: the run overwrites
/// each when it reaches its step. Errors are ignored.
void pruneCheckpoints(const std::string &directory, uint64_t keep, uint64_t upTo = UINT64_MAX);

/// A 64-bit FNV-1a hash of the plan's encoding (writePlan), as 16 hex
/// digits: the plan's identity in checkpoints.
std::string planHash(const plan::Plan &plan);

/// CRC-32 (zlib's) of \p bytes.
uint32_t crc32Of(const std::string &bytes);

} // namespace ampc::train

#endif // AMPC_RUNTIME_TRAIN_CHECKPOINT_H
