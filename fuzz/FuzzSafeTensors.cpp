//===- FuzzSafeTensors.cpp - Fuzz target: safetensors files -----------------===//
//
// The input is a safetensors file, as --init-from, `ampc eval --weights` and a model's weights
// file are read: decode checks the header length, the JSON, every entry's dtype, shape and
// offsets; each floating-point tensor is then converted as the readers convert it (toFloats).
// A file that is accepted must encode to bytes that decode to the same encoding again.
// safetensors::Error is the expected answer to bad bytes.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/SafeTensors.h"

#include <cstdio>
#include <cstdlib>

using namespace ampc;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  safetensors::File decoded;
  try {
    decoded = safetensors::decode(std::string(reinterpret_cast<const char *>(data), size),
                                  "fuzz.safetensors");
  } catch (const safetensors::Error &) {
    return 0;
  }
  for (const safetensors::Tensor &tensor : decoded.tensors) {
    try {
      safetensors::toFloats(tensor);
    } catch (const safetensors::Error &) {
      // Not a floating-point tensor.
    }
  }
  // encode writes the header's keys in order into an ordered_json, whose insertions scan the
  // keys written before: quadratic, but its input is a model's parameters, not a file's bytes.
  // Files of many tensors are decoded only.
  if (decoded.tensors.size() > 4096)
    return 0;
  const std::string first = safetensors::encode(decoded);
  if (safetensors::encode(safetensors::decode(first, "again.safetensors")) != first) {
    std::fprintf(stderr, "ampc fuzz: an accepted safetensors file does not survive "
                         "encode/decode\n");
    std::abort();
  }
  return 0;
}
