//===- OpClassesTest.cpp - the op classes declared with the graph ops --------===//
//
// Every graph op declares at most one precision class and at most one kernel class
// (GraphBase.td), and the precision policy's defaults are exactly those declarations: the
// lists below pin the default policy of DESIGN.md, so a change to an op's class is deliberate.
//
//===----------------------------------------------------------------------===//

#include "dialects/Graph/GraphDialect.h"
#include "passes/PrecisionPolicy.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

using namespace ampc;
using namespace ampc::graph;

namespace {

std::set<std::string> kindsOf(PrecisionClass precisionClass) {
  std::set<std::string> kinds;
  for (llvm::StringRef kind : opKindsWith(precisionClass))
    kinds.insert(kind.str());
  return kinds;
}

TEST(OpClasses, EachOpDeclaresAtMostOneClassOfEachFamily) {
  mlir::MLIRContext context;
  context.loadDialect<GraphDialect>();
  int governed = 0, kernels = 0;
  for (mlir::RegisteredOperationName name : context.getRegisteredOperations()) {
    if (name.getDialectNamespace() != GraphDialect::getDialectNamespace())
      continue;
    SCOPED_TRACE(name.getStringRef().str());
    int precision = name.hasTrait<ReducedPrecision>() + name.hasTrait<Fp32Precision>() +
                    name.hasTrait<FollowPrecision>();
    int kernel = name.hasTrait<ElementwiseKernel>() + name.hasTrait<DataMovementKernel>() +
                 name.hasTrait<ReductionKernel>() + name.hasTrait<MatmulKernel>() +
                 name.hasTrait<AttentionKernel>() + name.hasTrait<AccumulateKernel>() +
                 name.hasTrait<OptimizerKernel>() + name.hasTrait<ImageKernel>();
    EXPECT_LE(precision, 1);
    EXPECT_LE(kernel, 1);
    // An op the precision policy governs computes in some kernel.
    if (precision == 1)
      EXPECT_EQ(kernel, 1);
    // Storing in f32 is a refinement of a governed op.
    if (name.hasTrait<StoresFp32>())
      EXPECT_EQ(precision, 1);
    governed += precision;
    kernels += kernel;
  }
  EXPECT_EQ(governed, 63);
  EXPECT_EQ(kernels, 68);
}

TEST(OpClasses, DefaultPolicyIsTheOpsDeclarations) {
  EXPECT_EQ(kindsOf(PrecisionClass::Reduced),
            (std::set<std::string>{"matmul", "attention", "attention_grad", "qkv_attention",
                                   "qkv_attention_grad", "embedding", "conv2d",
                                   "conv2d_grad_input", "conv2d_grad_weight"}));
  EXPECT_EQ(kindsOf(PrecisionClass::Fp32),
            (std::set<std::string>{"softmax", "softmax_grad", "layernorm", "layernorm_grad",
                                   "rmsnorm", "rmsnorm_grad", "cross_entropy", "cross_entropy_grad",
                                   "mse_loss", "exp", "log", "sqrt", "rsqrt", "sum", "mean", "max",
                                   "max_grad", "embedding_grad", "softplus", "softplus_grad",
                                   "batch_norm", "batch_norm_grad"}));
  EXPECT_EQ(kindsOf(PrecisionClass::Follow),
            (std::set<std::string>{"add",       "sub",       "mul",          "div",
                                   "neg",       "relu",      "silu",         "hardswish",
                                   "tanh",      "gelu",      "dropout",      "relu_grad",
                                   "silu_grad", "gelu_grad", "hardswish_grad", "transpose",
                                   "reshape",   "broadcast", "slice",        "split",
                                   "concat",    "pad",       "sigmoid",      "sigmoid_grad",
                                   "hardsigmoid", "hardsigmoid_grad", "clip", "clip_grad",
                                   "max_pool2d", "max_pool2d_grad", "avg_pool2d",
                                   "avg_pool2d_grad"}));
  EXPECT_EQ(kindsOf(PrecisionClass::StoresFp32),
            (std::set<std::string>{"cross_entropy", "mse_loss", "embedding_grad"}));

  PrecisionPolicy policy = PrecisionPolicy::defaults();
  EXPECT_EQ(policy.ruleFor("matmul"), PrecisionRule::Reduced);
  EXPECT_EQ(policy.ruleFor("layernorm"), PrecisionRule::Fp32);
  EXPECT_EQ(policy.ruleFor("gelu"), PrecisionRule::Follow);
  EXPECT_EQ(policy.ruleFor("cast"), std::nullopt);
  EXPECT_TRUE(policy.storesFp32("embedding_grad"));
  EXPECT_FALSE(policy.storesFp32("layernorm"));
  EXPECT_EQ(PrecisionPolicy::knownKinds().size(), 63u);
}

} // namespace
