//===- FlashAttentionLayout.h - The layout argument of the flash-attention kernels -===//
//
// The host's copy of ampc::flash::Layout (runtime/cuda/device/FlashAttention.cuh), the last
// parameter of every flash-attention entry point, passed by value: the same bytes, built from
// a plan's attention step. The executor launches with it, the dry run checks it, and the GPU
// tests and the benchmark build it for their own buffers.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CUDA_FLASHATTENTIONLAYOUT_H
#define AMPC_RUNTIME_CUDA_FLASHATTENTIONLAYOUT_H

#include "runtime/plan/DeviceProgram.h"

#include <cstddef>
#include <cstdint>

namespace ampc::cuda {

/// ampc::flash::OperandStrides: row t of slice (b, h) starts at element b batch + h head +
/// t row of the operand's pointer.
struct FlashOperandStrides {
  int64_t batch = 0, head = 0, row = 0;

  static FlashOperandStrides of(const plan::AttentionLayout &layout) {
    return {layout.batchStride, layout.headStride, layout.rowStride};
  }
  /// A contiguous [batch, heads, rows, headDim] tensor.
  static FlashOperandStrides contiguous(int64_t heads, int64_t rows, int64_t headDim) {
    return of(plan::AttentionLayout::contiguous(heads, rows, headDim));
  }
  bool operator==(const FlashOperandStrides &other) const {
    return batch == other.batch && head == other.head && row == other.row;
  }
};

/// ampc::flash::Layout: blockIdx.y = b heads + h, then the strides of q (and dq), k (and dk),
/// v (and dv), o and dO.
struct FlashLayout {
  int32_t heads = 1;
  int32_t padding = 0; // the device struct's alignment gap, zero so the bytes are defined
  FlashOperandStrides q, k, v, o, dO;

  /// The layout of a plan's attention step: its four operand layouts' strides (dO has o's).
  /// \p scratchOutput: the backward recomputes o into contiguous scratch.
  static FlashLayout of(const plan::AttentionStep &step, bool scratchOutput = false) {
    FlashLayout layout;
    layout.heads = static_cast<int32_t>(step.heads);
    layout.q = FlashOperandStrides::of(step.qLayout);
    layout.k = FlashOperandStrides::of(step.kLayout);
    layout.v = FlashOperandStrides::of(step.vLayout);
    layout.dO = FlashOperandStrides::of(step.oLayout);
    layout.o = scratchOutput
                   ? FlashOperandStrides::contiguous(step.heads, step.queries, step.headDim)
                   : layout.dO;
    return layout;
  }
  /// Every operand contiguous: q, o, dO [batch, heads, queries, headDim], k, v [.., keys, ..].
  static FlashLayout contiguous(int64_t heads, int64_t queries, int64_t keys, int64_t headDim) {
    FlashLayout layout;
    layout.heads = static_cast<int32_t>(heads);
    layout.q = layout.o = layout.dO = FlashOperandStrides::contiguous(heads, queries, headDim);
    layout.k = layout.v = FlashOperandStrides::contiguous(heads, keys, headDim);
    return layout;
  }
};

static_assert(sizeof(FlashOperandStrides) == 24 && sizeof(FlashLayout) == 128 &&
                  alignof(FlashLayout) == 8 && offsetof(FlashLayout, q) == 8,
              "FlashLayout must have ampc::flash::Layout's bytes");

} // namespace ampc::cuda

#endif // AMPC_RUNTIME_CUDA_FLASHATTENTIONLAYOUT_H
