//===- CudnnConvolutionProbeTest.cpp - cuDNN takes our convolutions, without a GPU -===//
//
// runtime/cuda/CudnnConvolution.cpp builds graph.conv2d's forward, data gradient and weight
// gradient as cuDNN backend graphs. As for attention (CudnnEngineProbeTest.cpp), cuDNN chooses
// and compiles engines for a GPU it is only told about and fails only where it loads their
// kernels into the toolkit's stub libcuda. Every convolution of torchvision's ResNet-50 (bf16,
// channels-last, the dw in f32 as ampc accumulates weight gradients) must get that far on an
// H100/H200 and an A100, and so must the windows ResNet-50 lacks: a depthwise convolution
// (MobileNet), dilation, asymmetric padding, fp16 and f32, and NCHW. Skips when cuDNN cannot be
// loaded or predates device descriptions.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudnnConvolution.h"
#include "runtime/cuda/Errors.h"
#include "test/unit/runtime/CudnnDevices.h"

#include <gtest/gtest.h>

#include <cudnn_graph.h>

#include <string>
#include <vector>

namespace ampc::cuda {
namespace {

/// A convolution of \p in to \p out channels on \p size x \p size pixels (a batch of 8: the
/// engines do not depend on it), square kernel, stride and padding.
CudnnConvolutionProblem conv(int64_t in, int64_t out, int64_t size, int64_t kernel,
                             int64_t stride = 1, int64_t padding = 0) {
  CudnnConvolutionProblem p;
  p.batch = 8;
  p.inChannels = in;
  p.outChannels = out;
  p.height = p.width = size;
  p.kernel = {kernel, kernel};
  p.stride = {stride, stride};
  p.padBegin = p.padEnd = {padding, padding};
  return p;
}

/// torchvision's ResNet-50 at 224 x 224: every distinct convolution (stem, bottleneck 1x1 and
/// 3x3 at each stage, strided 3x3 and downsampling 1x1 between stages).
std::vector<CudnnConvolutionProblem> resnet50() {
  std::vector<CudnnConvolutionProblem> problems = {conv(3, 64, 224, 7, 2, 3)};
  int64_t in = 64, size = 56;
  for (int64_t width : {64, 128, 256, 512}) {
    const int64_t stride = width == 64 ? 1 : 2;
    const int64_t out = 4 * width, after = size / stride;
    problems.push_back(conv(in, width, size, 1));                  // first block's reduce
    problems.push_back(conv(width, width, size, 3, stride, 1));    // its 3x3, strided
    problems.push_back(conv(width, out, after, 1));                // expand
    problems.push_back(conv(in, out, size, 1, stride));            // downsample
    problems.push_back(conv(out, width, after, 1));                // later blocks' reduce
    if (stride != 1)
      problems.push_back(conv(width, width, after, 3, 1, 1));      // later blocks' 3x3
    in = out;
    size = after;
  }
  return problems;
}

std::string describe(const CudnnConvolutionProblem &p) {
  return std::to_string(p.inChannels) + "->" + std::to_string(p.outChannels) + " " +
         std::to_string(p.kernel[0]) + "x" + std::to_string(p.kernel[1]) + " stride " +
         std::to_string(p.stride[0]) + " on " + std::to_string(p.height) + "x" +
         std::to_string(p.width) + (p.groups > 1 ? " groups " + std::to_string(p.groups) : "") +
         " " + plan::dtypeName(p.type) + (p.channelsLast ? " NHWC" : " NCHW");
}

/// An engine compiled for the described GPU: its plan finalized (a GPU is here after all), or
/// it failed only at loading the kernels into the stub driver.
void expectAnEngine(const std::string &graph, const std::string &failure, int status) {
  if (failure.empty())
    return;
  EXPECT_EQ(status, CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER)
      << "cuDNN found no engine for the " << graph << ": " << failure;
  EXPECT_EQ(failure.find("NOT_SUPPORTED"), std::string::npos) << failure;
}

/// Probes \p problem; returns whether its weight gradient is the f32-dw graph.
bool probe(const char *device, const char *deviceJson, const CudnnConvolutionProblem &problem) {
  const CudnnConvolutionProbe probe = probeCudnnConvolution(problem, deviceJson);
  if (!probe.available) {
    ADD_FAILURE() << "cannot probe cuDNN here: " << probe.unavailable;
    return false;
  }
  const std::string name = std::string(device) + ", " + describe(problem);
  expectAnEngine("forward of " + name, probe.forward, probe.forwardStatus);
  expectAnEngine("data gradient of " + name, probe.backwardData, probe.backwardDataStatus);
  expectAnEngine("weight gradient of " + name, probe.backwardFilter,
                 probe.backwardFilterStatus);
  return probe.weightGradF32;
}

/// Skips the test where cuDNN cannot be probed (no library, or one without device
/// descriptions).
#define AMPC_SKIP_WITHOUT_CUDNN_PROBE()                                                            \
  do {                                                                                             \
    const CudnnConvolutionProbe check = probeCudnnConvolution(conv(8, 8, 8, 1), kH100);            \
    if (!check.available)                                                                          \
      GTEST_SKIP() << "cannot probe cuDNN here: " << check.unavailable;                            \
  } while (false)

TEST(CudnnConvolutionProbe, ResNet50OnHopper) {
  AMPC_SKIP_WITHOUT_CUDNN_PROBE();
  const std::vector<CudnnConvolutionProblem> problems = resnet50();
  EXPECT_EQ(problems.size(), 24u);
  int f32 = 0;
  for (const CudnnConvolutionProblem &problem : problems)
    f32 += probe("H100", kH100, problem);
  // Every weight gradient but the stem's (3 channels) leaves in f32.
  EXPECT_EQ(f32, 23);
}

// Compiling the fused weight-gradient engines for sm_80 takes cuDNN about 10 s a shape here:
// the stem, a strided 3x3 and a downsampling 1x1.
TEST(CudnnConvolutionProbe, ResNet50OnAmpere) {
  AMPC_SKIP_WITHOUT_CUDNN_PROBE();
  const std::vector<CudnnConvolutionProblem> problems = resnet50();
  EXPECT_FALSE(probe("A100", kA100, problems[0]));
  EXPECT_TRUE(probe("A100", kA100, problems[2]));
  EXPECT_TRUE(probe("A100", kA100, problems[4]));
}

TEST(CudnnConvolutionProbe, WindowsBeyondResNet) {
  AMPC_SKIP_WITHOUT_CUDNN_PROBE();
  CudnnConvolutionProblem depthwise = conv(96, 96, 28, 3, 2, 1);
  depthwise.groups = 96;
  EXPECT_FALSE(probe("H100", kH100, depthwise)); // dw in bf16, widened by the caller
  CudnnConvolutionProblem dilated = conv(64, 64, 28, 3, 1, 2);
  dilated.dilation = {2, 2};
  EXPECT_TRUE(probe("H100", kH100, dilated));
  CudnnConvolutionProblem asymmetric = conv(32, 64, 15, 3, 2);
  asymmetric.padBegin = {0, 0};
  asymmetric.padEnd = {1, 1}; // TensorFlow's "SAME" on an odd size
  EXPECT_TRUE(probe("H100", kH100, asymmetric));
  CudnnConvolutionProblem half = conv(64, 64, 56, 3, 1, 1);
  half.type = plan::DType::F16;
  EXPECT_TRUE(probe("H100", kH100, half));
  CudnnConvolutionProblem single = conv(64, 64, 56, 3, 1, 1);
  single.type = plan::DType::F32;
  EXPECT_TRUE(probe("H100", kH100, single));
  CudnnConvolutionProblem planar = conv(64, 128, 28, 3, 1, 1);
  planar.channelsLast = false;
  EXPECT_FALSE(probe("H100", kH100, planar));
  CudnnConvolutionProblem stored = conv(64, 64, 56, 3, 1, 1);
  stored.weightGradF32 = false;
  EXPECT_FALSE(probe("H100", kH100, stored));
}

TEST(CudnnConvolutionProblem, OutputExtentsAndErrors) {
  const CudnnConvolutionProblem stem = conv(3, 64, 224, 7, 2, 3);
  EXPECT_EQ(stem.outHeight(), 112);
  CudnnConvolutionProblem odd = conv(32, 64, 15, 3, 2);
  odd.padEnd = {1, 1};
  EXPECT_EQ(odd.outHeight(), 7); // (15 + 1 - 3) / 2 + 1
  EXPECT_EQ(cudnnConvolutionProblemError(stem), "");
  CudnnConvolutionProblem grouped = conv(30, 64, 8, 3);
  grouped.groups = 4;
  EXPECT_EQ(cudnnConvolutionProblemError(grouped),
            "4 groups do not divide 30 input and 64 output channels");
  EXPECT_EQ(cudnnConvolutionProblemError(conv(8, 8, 2, 3)),
            "the kernel does not fit the padded input (output 0 x 0)");
  EXPECT_THROW(probeCudnnConvolution(conv(8, 8, 2, 3), kH100), CudaError);
  // Channels-last strides: NHWC in memory, dimensions in NCHW order.
  const std::array<int64_t, 4> nhwc = convolutionStrides(stem, 3, 224, 224);
  EXPECT_EQ(nhwc, (std::array<int64_t, 4>{224 * 224 * 3, 1, 224 * 3, 3}));
  CudnnConvolutionProblem planar = stem;
  planar.channelsLast = false;
  EXPECT_EQ(convolutionStrides(planar, 3, 224, 224),
            (std::array<int64_t, 4>{3 * 224 * 224, 224 * 224, 224, 1}));
}

} // namespace
} // namespace ampc::cuda
