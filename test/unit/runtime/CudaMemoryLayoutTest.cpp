//===- CudaMemoryLayoutTest.cpp - Offsets of the persistent buffers -------===//
//
// The persistent pool places buffers by bump allocation at 256-byte
// alignment (BumpLayout); the executor sizes the pool with the same class
// before allocating it. No GPU needed.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Memory.h"

#include <gtest/gtest.h>

namespace {

using namespace ampc::cuda;

TEST(CudaMemoryLayout, AlignUp) {
  EXPECT_EQ(alignUp(0), 0u);
  EXPECT_EQ(alignUp(1), 256u);
  EXPECT_EQ(alignUp(256), 256u);
  EXPECT_EQ(alignUp(257), 512u);
  EXPECT_EQ(alignUp(5, 4), 8u);
}

TEST(CudaMemoryLayout, BumpLayoutAlignsEveryBuffer) {
  BumpLayout layout;
  EXPECT_EQ(layout.reserve(10, "a"), 0u);
  EXPECT_EQ(layout.reserve(256, "b"), 256u);
  EXPECT_EQ(layout.reserve(1, "c"), 512u);
  EXPECT_EQ(layout.reserve(0, "empty"), 768u);
  EXPECT_EQ(layout.reserve(300, "d"), 768u);
  EXPECT_EQ(layout.used(), 1068u);
}

TEST(CudaMemoryLayout, BoundedLayoutSaysWhatDoesNotFit) {
  BumpLayout layout(1024);
  EXPECT_EQ(layout.reserve(600, "the master weights"), 0u);
  EXPECT_EQ(layout.reserve(256, "the gradient accumulators"), 768u);
  try {
    layout.reserve(1, "the optimizer state");
    FAIL() << "a full layout accepted another buffer";
  } catch (const CudaError &error) {
    EXPECT_EQ(error.kind(), CudaErrorKind::InvalidArgument);
    EXPECT_STREQ(error.what(), "no room for the optimizer state: 1 bytes at "
                               "offset 1024 exceed the pool's 1024 bytes");
  }
  // A buffer that exactly fills the rest fits.
  BumpLayout exact(512);
  EXPECT_EQ(exact.reserve(256, "a"), 0u);
  EXPECT_EQ(exact.reserve(256, "b"), 256u);
}

} // namespace
