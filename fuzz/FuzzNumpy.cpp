//===- FuzzNumpy.cpp - Fuzz target: NumPy .npz and .npy data files ----------===//
//
// The input is a NumPy file, as `--data FILE.npz` gives a model its arrays: read as a .npz
// archive (minizip, then each member's .npy image) and, when it starts with the .npy magic, as
// a .npy file; the arrays are then matched to a small model's inputs and batches drawn, as the
// training executable does (makeArrayBatches): x, f32 [2, 3], and labels, i64 [2] below 10 (a
// .npy file feeds a model whose one input is x). DataError is the expected answer to bad bytes.
//
//===----------------------------------------------------------------------===//

#include "fuzz/FuzzSupport.h"
#include "runtime/train/Data.h"
#include "runtime/train/NumpyFile.h"

#include <cstring>

using namespace ampc;

namespace {

/// A plan with only what makeArrayBatches reads: the inputs and their buffers.
plan::Plan modelInputs(bool withLabels) {
  plan::Plan plan;
  plan.buffers.push_back({"x", plan::DType::F32, {2, 3}, plan::BufferRole::Input});
  plan.inputs.push_back({"x", 0, 0, plan::InputUse::None});
  if (withLabels) {
    plan.buffers.push_back({"labels", plan::DType::I64, {2}, plan::BufferRole::Input});
    plan.inputs.push_back({"labels", 1, 10, plan::InputUse::Labels});
  }
  return plan;
}

void readArrays(const std::string &path, bool withLabels) {
  try {
    train::readNumpyFile(path);
    auto batches = train::makeArrayBatches(modelInputs(withLabels), path, /*seed=*/1);
    for (uint64_t step = 0; step < 3; ++step)
      batches->batch(step);
  } catch (const train::DataError &) {
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  readArrays(fuzz::writeScratchFile("arrays.npz", data, size), /*withLabels=*/true);
  if (size >= 6 && std::memcmp(data, "\x93NUMPY", 6) == 0)
    readArrays(fuzz::writeScratchFile("x.npy", data, size), /*withLabels=*/false);
  return 0;
}
