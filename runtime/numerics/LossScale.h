//===- LossScale.h - the dynamic loss-scale state machine ----------------===//
//
// fp16 training multiplies the loss by a scale before the backward pass so that small gradients
// do not underflow, and divides the gradients by it before the optimizer uses them. The scale
// follows torch.amp.GradScaler exactly (its _amp_update_scale_ kernel):
//   - a step whose gradients hold an inf or NaN is skipped, the scale is multiplied by the
//     backoff factor (0.5) and the count of consecutive finite steps is reset;
//   - after growth_interval (2000) consecutive finite steps the scale is multiplied by the growth
//     factor (2.0), if the result is finite, and the count restarts.
// The scale is kept in f32, as GradScaler keeps it. Beyond GradScaler: an optional floor the
// scale never falls below, and a record of when the floor was first reached so the runtime can
// warn once.
//
// Header-only and host/device, so the CPU backend, the CUDA runtime and generated kernels update
// the scale with the same code and the GPU never synchronises with the host to do it.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_NUMERICS_LOSSSCALE_H
#define AMPC_RUNTIME_NUMERICS_LOSSSCALE_H

#include "runtime/numerics/HostDevice.h"

namespace ampc::numerics {

/// The scaler's settings; the defaults are GradScaler's.
struct LossScaleConfig {
  float initialScale = 65536.0f; ///< 2^16
  float growthFactor = 2.0f;
  float backoffFactor = 0.5f;
  int32_t growthInterval = 2000;
  /// The scale never falls below this (0: no floor, as GradScaler).
  float minScale = 0.0f;
};

/// The scaler's state between optimizer steps.
struct LossScaleState {
  float scale;
  /// Consecutive steps with finite gradients since the last change of the scale.
  int32_t growthTracker;
  /// Number of backoffs the floor stopped (0 until the floor is first reached).
  int32_t floorHits;
};

/// The state before the first step.
AMPC_HOST_DEVICE inline LossScaleState initialLossScale(const LossScaleConfig &config) {
  return LossScaleState{config.initialScale, 0, 0};
}

/// True for a float that is neither infinite nor NaN (no <cmath> under NVRTC).
AMPC_HOST_DEVICE inline bool isFiniteScale(float value) {
  return value == value && value - value == 0.0f;
}

/// What one update did.
struct LossScaleUpdate {
  bool stepApplied;  ///< false: the optimizer step is skipped (non-finite gradients)
  bool floorReached; ///< the floor stopped this backoff for the first time: warn now
};

/// Updates \p state after a step whose gradients were all finite (\p foundNonFinite false) or
/// not. The arithmetic is GradScaler's: products are formed and rounded in f32.
AMPC_HOST_DEVICE inline LossScaleUpdate
updateLossScale(LossScaleState &state, const LossScaleConfig &config, bool foundNonFinite) {
  LossScaleUpdate update{!foundNonFinite, false};
  if (foundNonFinite) {
    float backedOff = state.scale * config.backoffFactor;
    if (backedOff < config.minScale) {
      backedOff = config.minScale;
      update.floorReached = state.floorHits == 0;
      ++state.floorHits;
    }
    state.scale = backedOff;
    state.growthTracker = 0;
    return update;
  }
  int32_t successful = state.growthTracker + 1;
  if (successful == config.growthInterval) {
    float grown = state.scale * config.growthFactor;
    if (isFiniteScale(grown))
      state.scale = grown;
    state.growthTracker = 0;
  } else {
    state.growthTracker = successful;
  }
  return update;
}

} // namespace ampc::numerics

#endif // AMPC_RUNTIME_NUMERICS_LOSSSCALE_H
