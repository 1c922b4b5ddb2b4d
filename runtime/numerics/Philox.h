//===- Philox.h - Philox4x32-10 counter-based random numbers --------------===//
//
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC'11), bit-identical to Random123's philox4x32_10. A counter-based
// generator is a pure function of (key, counter), so any element of any
// random tensor can be produced independently, in any order, on the host or a
// GPU, and an op that is recomputed during the backward pass reproduces its
// forward values exactly.
//
// ampc's keying (also in docs/plan-format.md, "Random numbers"):
//   key     = (seed bits 0..31, seed bits 32..63)
//   counter = (element bits 0..31, element bits 32..63, stream, step bits
//              0..31)
// where `element` is the row-major index of the element within its tensor,
// `stream` identifies the op or parameter (a dropout's "stream" attribute, or
// fnv1a32 of a parameter or input name), and `step` is the optimizer step
// (0 for initialisation).
//
// Derived values from the four output words out[0..3]:
//   uniform01      = (out[0] >> 8) * 2^-24, in [0, 1), exact in float.
//   standardNormal = sqrt(-2 ln u1) * cos(2 pi u2), computed in double, with
//                    u1 = (out[0] + 1) * 2^-32 in (0, 1] (so ln u1 is finite)
//                    and u2 = out[1] * 2^-32 in [0, 1).
//
// Everything here is usable from CUDA device code and compiles under NVRTC.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_NUMERICS_PHILOX_H
#define AMPC_RUNTIME_NUMERICS_PHILOX_H

#include "runtime/numerics/HostDevice.h"

#if !defined(__CUDACC_RTC__)
#include <cmath>
#endif

namespace ampc {
namespace numerics {

/// Four 32-bit words: a Philox counter or one block of output.
struct PhiloxBlock {
  uint32_t word[4];
};

/// The two 32-bit words of a Philox key.
struct PhiloxKey {
  uint32_t word[2];
};

namespace detail {
constexpr uint32_t kPhiloxMultiplier0 = 0xD2511F53u;
constexpr uint32_t kPhiloxMultiplier1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxWeyl0 = 0x9E3779B9u; // golden ratio
constexpr uint32_t kPhiloxWeyl1 = 0xBB67AE85u; // sqrt(3) - 1

/// High and low halves of the 64-bit product \p a * \p b.
AMPC_HOST_DEVICE inline void mulHiLo(uint32_t a, uint32_t b, uint32_t &hi, uint32_t &lo) {
#if AMPC_DEVICE_PASS
  hi = __umulhi(a, b);
  lo = a * b;
#else
  const uint64_t product = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(product >> 32);
  lo = static_cast<uint32_t>(product);
#endif
}

/// One Philox S-box round on \p counter under \p key.
AMPC_HOST_DEVICE inline PhiloxBlock philoxRound(PhiloxBlock counter, PhiloxKey key) {
  uint32_t hi0, lo0, hi1, lo1;
  mulHiLo(kPhiloxMultiplier0, counter.word[0], hi0, lo0);
  mulHiLo(kPhiloxMultiplier1, counter.word[2], hi1, lo1);
  PhiloxBlock next;
  next.word[0] = hi1 ^ counter.word[1] ^ key.word[0];
  next.word[1] = lo1;
  next.word[2] = hi0 ^ counter.word[3] ^ key.word[1];
  next.word[3] = lo0;
  return next;
}
} // namespace detail

/// Philox4x32 with 10 rounds: the key is bumped by the Weyl constants before
/// every round after the first.
AMPC_HOST_DEVICE inline PhiloxBlock philox4x32x10(PhiloxBlock counter, PhiloxKey key) {
  counter = detail::philoxRound(counter, key);
  for (int round = 1; round < 10; ++round) {
    key.word[0] += detail::kPhiloxWeyl0;
    key.word[1] += detail::kPhiloxWeyl1;
    counter = detail::philoxRound(counter, key);
  }
  return counter;
}

/// The Philox block for one tensor element under ampc's keying (see the file
/// comment).
AMPC_HOST_DEVICE inline PhiloxBlock philoxForElement(uint64_t seed, uint64_t step, uint32_t stream,
                                                     uint64_t element) {
  PhiloxKey key;
  key.word[0] = static_cast<uint32_t>(seed);
  key.word[1] = static_cast<uint32_t>(seed >> 32);
  PhiloxBlock counter;
  counter.word[0] = static_cast<uint32_t>(element);
  counter.word[1] = static_cast<uint32_t>(element >> 32);
  counter.word[2] = stream;
  counter.word[3] = static_cast<uint32_t>(step);
  return philox4x32x10(counter, key);
}

/// A uniform sample in [0, 1) with 24 random bits (exact as a float).
AMPC_HOST_DEVICE inline float uniform01(uint64_t seed, uint64_t step, uint32_t stream,
                                        uint64_t element) {
  const PhiloxBlock out = philoxForElement(seed, step, stream, element);
  return static_cast<float>(out.word[0] >> 8) * (1.0f / 16777216.0f);
}

/// A standard normal sample by the Box-Muller transform, in double.
AMPC_HOST_DEVICE inline double standardNormal(uint64_t seed, uint64_t step, uint32_t stream,
                                              uint64_t element) {
  const PhiloxBlock out = philoxForElement(seed, step, stream, element);
  const double kTwoToMinus32 = 1.0 / 4294967296.0;
  const double kTwoPi = 6.283185307179586476925286766559;
  // Adding 1 in double cannot overflow; u1 is in (0, 1], so ln(u1) <= 0.
  const double u1 = (static_cast<double>(out.word[0]) + 1.0) * kTwoToMinus32;
  const double u2 = static_cast<double>(out.word[1]) * kTwoToMinus32;
#if defined(__CUDACC_RTC__) || AMPC_DEVICE_PASS
  return sqrt(-2.0 * log(u1)) * cos(kTwoPi * u2);
#else
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
#endif
}

/// 32-bit FNV-1a hash of \p size bytes at \p data: how parameter and input
/// names become RNG stream ids.
AMPC_HOST_DEVICE inline uint32_t fnv1a32(const char *data, size_t size) {
  uint32_t hash = 0x811C9DC5u;
  for (size_t i = 0; i < size; ++i) {
    hash ^= static_cast<unsigned char>(data[i]);
    hash *= 0x01000193u;
  }
  return hash;
}

} // namespace numerics
} // namespace ampc

#endif // AMPC_RUNTIME_NUMERICS_PHILOX_H
