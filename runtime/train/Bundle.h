//===- Bundle.h - Training executables: runner + embedded plan ------------===//
//
// `ampc compile` turns a model into a standalone training executable by
// appending the compiled plan to a copy of the generic runner
// (`ampc-train-runner`, runtime/train/TrainMain.cpp). The layout is
//
//   [runner executable bytes][plan, binary plan format][u64 n][ "AMPCPLAN" ]
//
// where n is the little-endian byte length of the plan and the last 8 bytes
// are the ASCII magic: a 16-byte trailer the runner finds by reading the end
// of its own file (/proc/self/exe). The loader never looks at the executable
// part, so any runner build works with any plan of the matching format
// version.
//
// Nothing here depends on MLIR or on a backend: the compiler links it to
// write executables, the runner to read its plan.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_TRAIN_BUNDLE_H
#define AMPC_RUNTIME_TRAIN_BUNDLE_H

#include "runtime/plan/Plan.h"

#include <string>

namespace ampc::train {

/// Size of the trailer that ends a training executable.
inline constexpr size_t kTrailerBytes = 16;
/// The magic that ends a training executable.
inline constexpr char kTrailerMagic[9] = "AMPCPLAN";

/// Writes the executable \p outPath: the bytes of \p runnerPath (with any
/// plan it already carries removed), then \p plan in the binary plan format,
/// then the trailer. The file is written to `outPath.tmp`, every byte
/// checked, made executable (0755) and renamed over \p outPath, so a failure
/// (unreadable runner, full disk, missing directory) leaves \p outPath as it
/// was and no temporary behind. Throws plan::PlanError naming the path and the
/// cause.
void writeTrainingExecutable(const std::string &runnerPath, const plan::Plan &plan,
                             const std::string &outPath);

/// Reads and validates the plan embedded in \p executablePath. Throws
/// plan::PlanError if the file cannot be read, carries no plan ("build one
/// with `ampc compile`"), or its plan is malformed.
plan::Plan readEmbeddedPlan(const std::string &executablePath);

/// True if \p executablePath ends with a training-plan trailer. False for a
/// file that cannot be read.
bool hasEmbeddedPlan(const std::string &executablePath);

/// Where the runner executable is, for the compiler at \p ampcExecutable
/// (its argv[0] or /proc/self/exe; a bare name without '/' is resolved via
/// /proc/self/exe). Looks, in order, at: $AMPC_RUNNER (which must then
/// exist); <dir of ampc>/ampc-train-runner (an installation);
/// <dir of ampc>/../runtime/train/ampc-train-runner (the build tree);
/// \p buildTreeRunner, when given (the `ampc` executable passes the runner's
/// absolute path in the build tree it was built in; the runtime libraries
/// carry no such path, so training executables do not either).
/// Throws plan::PlanError listing every place it looked if none is an
/// executable file.
std::string findRunner(const std::string &ampcExecutable, const std::string &buildTreeRunner = "");

} // namespace ampc::train

#endif // AMPC_RUNTIME_TRAIN_BUNDLE_H
