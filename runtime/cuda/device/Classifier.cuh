//===- Classifier.cuh - The fixed kernel of the cross-entropy classifier --===//
//
// The classifier (graph.cross_entropy and its gradient, fused) is two kernels: the count of the
// labelled rows, here, and the loss-and-gradient row kernel, which the generator writes whole
// (compiler/cuda/CudaCodegenReductions.cpp, crossEntropyKernels): its passes over a row are
// RowWalk's, whose pack count, register-held packs and fused producers and consumers depend on
// the group. The count kernel's entry point passes the label type (its template argument),
// ignore_index and the reduction. NVRTC-compilable.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CUDA_DEVICE_CLASSIFIER_CUH
#define AMPC_RUNTIME_CUDA_DEVICE_CLASSIFIER_CUH

#include "runtime/cuda/device/KernelSupport.h"

namespace ampc {
namespace device {

/// The classifier's first kernel, one block: labelled[0] = the number of the \p rows labels
/// (int or long long) that are not \p ignoreIndex, as an f32 (the mean's divisor, which the
/// loss-and-gradient kernel reads), and the loss reset for the rows' atomicAdds: 0, or for a
/// \p mean over no labelled row 0/0 = NaN, as in PyTorch. Memory: the labels read once.
template <typename Label>
__device__ __forceinline__ void crossEntropyCount(const Label *labels, long long rows,
                                                  long long ignoreIndex, bool mean, float *loss,
                                                  float *labelled) {
  __shared__ float reduceScratch[32];
  float count = 0.0f;
  for (long long row = threadIdx.x; row < rows; row += blockDim.x)
    count += static_cast<long long>(labels[row]) != ignoreIndex ? 1.0f : 0.0f;
  count = blockSum(count, reduceScratch);
  if (threadIdx.x == 0) {
    labelled[0] = count;
    loss[0] = mean && count == 0.0f ? __int_as_float(0x7fffffff) : 0.0f;
  }
}

} // namespace device
} // namespace ampc

#endif // AMPC_RUNTIME_CUDA_DEVICE_CLASSIFIER_CUH
