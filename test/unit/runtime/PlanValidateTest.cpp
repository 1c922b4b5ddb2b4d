//===- PlanValidateTest.cpp - validatePlan rejects each malformed case ----===//
//
// One test per class of check. Each starts from a small valid plan, breaks
// one rule, and expects a one-line PlanError mentioning what is wrong.
//
//===----------------------------------------------------------------------===//

#include "PlanTestUtils.h"
#include "PlanValidateTestUtils.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace ampc;
using namespace ampc::test;
using plan::BufferRole;
using plan::InitKind;
using V = std::vector<int64_t>;

namespace {

/// x [2, 3] f32 input, w [3, 4] f32 parameter, y = x @ w at "m.mlir:2:3",
/// loss = mean(y).
struct SmallPlan {
  PlanBuilder b;
  uint32_t x, w, y;
  SmallPlan() {
    x = b.input("x", DType::F32, {2, 3});
    w = b.parameter("w", DType::F32, {3, 4}, InitKind::Normal, 0, 0.02);
    y = b.op(OpCode::MatMul, {x, w}, DType::F32, {2, 4},
             {{"transpose_a", int64_t(0)}, {"transpose_b", int64_t(0)}}, "m.mlir:2:3");
    b.plan.loss =
        b.op(OpCode::Mean, {y}, DType::F32, {}, {{"axes", V{0, 1}}, {"keepdims", int64_t(0)}});
  }
  plan::Instruction &matmul() { return b.plan.instructions[0]; }
};

TEST(PlanValidate, AcceptsValidPlans) {
  SmallPlan small;
  EXPECT_NO_THROW(plan::validatePlan(small.b.plan));
  EXPECT_NO_THROW(plan::validatePlan(everyOpcodePlan()));
}

TEST(PlanValidate, MessageNamesInstructionOpcodeAndLocation) {
  SmallPlan small;
  small.matmul().operands[1] = 77;
  expectInvalid(small.b.plan,
                {"instruction 0 (matmul at m.mlir:2:3)", "operand buffer 77 is out of range"});
}

TEST(PlanValidate, BufferIdsInRange) {
  SmallPlan small;
  small.matmul().results[0] = 50;
  expectInvalid(small.b.plan, {"result buffer 50 is out of range"});
  SmallPlan loss;
  loss.b.plan.loss = 99;
  expectInvalid(loss.b.plan, {"loss buffer 99 is out of range"});
}

TEST(PlanValidate, EveryBufferWrittenAtMostOnce) {
  SmallPlan small;
  small.b.plan.instructions.push_back(small.matmul());
  expectInvalid(small.b.plan, {"instruction 2", "written a second time"});
}

TEST(PlanValidate, ReadOnlyAfterWrite) {
  SmallPlan small;
  std::swap(small.b.plan.instructions[0], small.b.plan.instructions[1]);
  expectInvalid(small.b.plan, {"instruction 0 (mean)", "read before any instruction writes"});
}

TEST(PlanValidate, OnlyTemporariesAreWritten) {
  SmallPlan small;
  small.matmul().results[0] = small.w;
  expectInvalid(small.b.plan, {"role parameter", "only temporaries"});
}

TEST(PlanValidate, OperandAndResultCounts) {
  SmallPlan small;
  small.matmul().operands.push_back(small.x);
  expectInvalid(small.b.plan, {"takes 2 operands, has 3"});
  SmallPlan results;
  results.matmul().results.push_back(results.x);
  expectInvalid(results.b.plan, {"exactly 1 result, has 2"});
}

TEST(PlanValidate, DTypes) {
  PlanBuilder b;
  uint32_t x = b.input("x", DType::F32, {4});
  uint32_t h = b.input("h", DType::BF16, {4});
  b.plan.loss = b.op(OpCode::Add, {x, h}, DType::F32, {4});
  expectInvalid(b.plan, {"must have one dtype"});

  PlanBuilder ints;
  uint32_t i = ints.input("i", DType::I32, {4});
  ints.op(OpCode::Exp, {i}, DType::F32, {4});
  expectInvalid(ints.plan, {"operand 0 buffer", "must have a float dtype"});

  PlanBuilder ids;
  uint32_t table = ids.parameter("table", DType::F32, {5, 2});
  uint32_t floatIds = ids.input("ids", DType::F32, {3});
  ids.op(OpCode::Embedding, {table, floatIds}, DType::F32, {3, 2});
  expectInvalid(ids.plan, {"embedding", "must have an integer dtype"});
}

TEST(PlanValidate, Shapes) {
  SmallPlan wrongResult;
  wrongResult.b.plan.buffers[wrongResult.y].shape = {2, 5};
  expectInvalid(wrongResult.b.plan, {"must have shape [2, 4]"});

  SmallPlan contraction;
  contraction.b.plan.buffers[contraction.w].shape = {4, 4};
  expectInvalid(contraction.b.plan, {"matmul contraction dimensions differ"});

  PlanBuilder b;
  uint32_t p = b.input("p", DType::F32, {2, 3});
  uint32_t q = b.input("q", DType::F32, {2, 4});
  b.op(OpCode::Mul, {p, q}, DType::F32, {2, 4});
  expectInvalid(b.plan, {"do not broadcast"});
}

TEST(PlanValidate, LayoutRules) {
  PlanBuilder transpose;
  uint32_t x = transpose.input("x", DType::F32, {2, 3});
  transpose.op(OpCode::Transpose, {x}, DType::F32, {3, 2}, {{"permutation", V{1, 1}}});
  expectInvalid(transpose.plan, {"not a permutation"});

  PlanBuilder slice;
  x = slice.input("x", DType::F32, {4, 3});
  slice.op(OpCode::Slice, {x}, DType::F32, {2, 3}, {{"starts", V{3, 0}}});
  expectInvalid(slice.plan,
                {"slice of 2 elements from 3 along dimension 0 is outside its extent 4"});

  PlanBuilder concat;
  x = concat.input("x", DType::F32, {2, 3});
  uint32_t y = concat.input("y", DType::F32, {2, 4});
  concat.op(OpCode::Concat, {x, y}, DType::F32, {4, 3}, {{"axis", int64_t(0)}});
  expectInvalid(concat.plan, {"differs from [2, 3] outside axis 0"});

  PlanBuilder reshape;
  x = reshape.input("x", DType::F32, {2, 3});
  reshape.op(OpCode::Reshape, {x}, DType::F32, {7});
  expectInvalid(reshape.plan, {"element count"});

  PlanBuilder broadcast;
  x = broadcast.input("x", DType::F32, {2, 3});
  broadcast.op(OpCode::Broadcast, {x}, DType::F32, {4, 3});
  expectInvalid(broadcast.plan, {"cannot broadcast [2, 3] to [4, 3]"});

  PlanBuilder reduce;
  x = reduce.input("x", DType::F32, {2, 3});
  reduce.op(OpCode::Sum, {x}, DType::F32, {}, {{"axes", V{1, 0}}, {"keepdims", int64_t(0)}});
  expectInvalid(reduce.plan, {"must be distinct, increasing dimensions"});
}

TEST(PlanValidate, Attributes) {
  SmallPlan missing;
  missing.matmul().attrs.erase("transpose_b");
  expectInvalid(missing.b.plan, {"missing attribute 'transpose_b'"});

  SmallPlan wrongType;
  wrongType.matmul().attrs["transpose_a"] = 1.0;
  expectInvalid(wrongType.b.plan, {"'transpose_a' must be an integer"});

  SmallPlan flag;
  flag.matmul().attrs["transpose_a"] = int64_t(2);
  expectInvalid(flag.b.plan, {"'transpose_a' must be 0 or 1"});

  // Only the attributes PlanAttrs.def declares for the opcode: a misspelled or foreign one is
  // named with the opcode's own.
  SmallPlan misspelled;
  misspelled.matmul().attrs["transpose_c"] = int64_t(0);
  expectInvalid(misspelled.b.plan,
                {"matmul has no attribute 'transpose_c' (it takes transpose_a, transpose_b)"});
  PlanBuilder plain;
  uint32_t y = plain.input("y", DType::F32, {4});
  plain.op(OpCode::Relu, {y}, DType::F32, {4}, {{"causal", int64_t(1)}});
  expectInvalid(plain.plan, {"relu has no attribute 'causal' (it takes none)"});
  PlanBuilder infinite;
  y = infinite.input("y", DType::F32, {4, 3});
  infinite.op(OpCode::LayerNorm,
              {infinite.op(OpCode::Relu, {y}, DType::F32, {4, 3}),
               infinite.input("g", DType::F32, {3}), infinite.input("b", DType::F32, {3})},
              DType::F32, {4, 3}, {{"epsilon", HUGE_VAL}});
  expectInvalid(infinite.plan, {"attribute 'epsilon' must be finite"});

  PlanBuilder dropout;
  uint32_t x = dropout.input("x", DType::F32, {4});
  dropout.op(OpCode::Dropout, {x}, DType::F32, {4}, {{"p", 1.0}, {"stream", int64_t(3)}});
  expectInvalid(dropout.plan, {"'p' must be in [0, 1)"});

  PlanBuilder causal;
  x = causal.input("x", DType::F32, {4, 3});
  causal.op(OpCode::Softmax, {x}, DType::F32, {4, 3}, {{"causal", int64_t(1)}});
  expectInvalid(causal.plan, {"causal masking needs S >= T in [..., T, S], got T = 4 and S = 3"});
}

TEST(PlanValidate, ParameterAndInputTables) {
  SmallPlan role;
  role.b.plan.parameters[0].buffer = role.x;
  expectInvalid(role.b.plan, {"parameter 'w'", "role is input"});

  PlanBuilder intParameter;
  intParameter.parameter("steps", DType::I32, {1});
  expectInvalid(intParameter.plan, {"parameter 'steps' must have a float"});

  PlanBuilder bound;
  bound.input("x", DType::F32, {2}, 10);
  expectInvalid(bound.plan, {"only integer inputs can have a bound"});

  SmallPlan duplicate;
  duplicate.b.input("x", DType::F32, {2});
  expectInvalid(duplicate.b.plan, {"input names must be unique"});

  SmallPlan orphan;
  orphan.b.buffer("lonely", DType::F32, {2}, BufferRole::Parameter);
  expectInvalid(orphan.b.plan, {"role parameter but no parameter entry"});

  SmallPlan init;
  init.b.plan.parameters[0].b = -1;
  expectInvalid(init.b.plan, {"std >= 0"});
}

TEST(PlanValidate, ConstantByteSize) {
  PlanBuilder b;
  uint32_t c = b.constant("c", DType::BF16, {3}, {1, 2, 3});
  b.plan.loss = b.op(OpCode::Sum, {c}, DType::F32, {}, {{"axes", V{0}}, {"keepdims", int64_t(0)}});
  EXPECT_NO_THROW(plan::validatePlan(b.plan));
  b.plan.constants[0].bytes.pop_back();
  expectInvalid(b.plan, {"constant 0 has 5 bytes", "needs 6"});
}

TEST(PlanValidate, LossIsAWrittenFloatScalar) {
  SmallPlan vector;
  vector.b.plan.loss = vector.y;
  expectInvalid(vector.b.plan, {"must be a float scalar"});

  PlanBuilder unwritten;
  unwritten.plan.loss = unwritten.buffer("loss", DType::F32, {});
  expectInvalid(unwritten.plan, {"never written"});
}

TEST(PlanValidate, LossOperandRules) {
  PlanBuilder b;
  uint32_t logits = b.input("logits", DType::F32, {2, 3, 5});
  uint32_t labels = b.input("labels", DType::I64, {2, 5}, 5);
  b.plan.loss = b.op(OpCode::CrossEntropy, {logits, labels}, DType::F32, {},
                     {{"ignore_index", int64_t(-100)}, {"reduction", int64_t(0)}});
  expectInvalid(b.plan, {"with the same leading shape"});
}

} // namespace

namespace {

/// A plan whose loss is the sum of one conv2d / pooling / clip instruction's result.
struct WindowPlan {
  PlanBuilder b;
  void finish(uint32_t y, const V &shape) {
    V axes(shape.size());
    for (size_t i = 0; i < axes.size(); ++i)
      axes[i] = static_cast<int64_t>(i);
    b.plan.loss = b.op(OpCode::Sum, {y}, DType::F32, {}, {{"axes", axes}, {"keepdims", int64_t(0)}});
  }
};

Attrs convAttrs(V strides, V pads, int64_t groups = 1) {
  return {{"strides", strides}, {"pads", pads}, {"dilations", V{1, 1}}, {"groups", groups}};
}

TEST(PlanValidate, ConvolutionRules) {
  WindowPlan valid;
  uint32_t x = valid.b.input("x", DType::F32, {2, 4, 9, 9});
  uint32_t w = valid.b.parameter("w", DType::F32, {6, 2, 3, 3}, InitKind::Normal, 0, 0.02);
  valid.finish(valid.b.op(OpCode::Conv2d, {x, w}, DType::F32, {2, 6, 5, 5},
                          convAttrs({2, 2}, {1, 1, 1, 1}, 2)),
               {2, 6, 5, 5});
  EXPECT_NO_THROW(plan::validatePlan(valid.b.plan));

  // The result shape the window implies, the groups, the window's own attributes.
  WindowPlan shape;
  x = shape.b.input("x", DType::F32, {2, 4, 9, 9});
  w = shape.b.parameter("w", DType::F32, {6, 4, 3, 3}, InitKind::Normal, 0, 0.02);
  shape.finish(shape.b.op(OpCode::Conv2d, {x, w}, DType::F32, {2, 6, 4, 4},
                          convAttrs({2, 2}, {1, 1, 1, 1})),
               {2, 6, 4, 4});
  expectInvalid(shape.b.plan, {"the convolution of [2, 4, 9, 9] by [6, 4, 3, 3] gives "
                               "[2, 6, 5, 5], not [2, 6, 4, 4]"});

  WindowPlan groups;
  x = groups.b.input("x", DType::F32, {2, 4, 9, 9});
  w = groups.b.parameter("w", DType::F32, {6, 4, 3, 3}, InitKind::Normal, 0, 0.02);
  groups.finish(groups.b.op(OpCode::Conv2d, {x, w}, DType::F32, {2, 6, 7, 7},
                            convAttrs({1, 1}, {0, 0, 0, 0}, 3)),
                {2, 6, 7, 7});
  expectInvalid(groups.b.plan, {"groups (3) must divide the input channels (4)"});

  WindowPlan pads;
  x = pads.b.input("x", DType::F32, {2, 4, 9, 9});
  w = pads.b.parameter("w", DType::F32, {6, 4, 3, 3}, InitKind::Normal, 0, 0.02);
  pads.finish(pads.b.op(OpCode::Conv2d, {x, w}, DType::F32, {2, 6, 7, 7},
                        convAttrs({1, 1}, {0, 0, 0})),
              {2, 6, 7, 7});
  expectInvalid(pads.b.plan, {"padding must have 4 entries, got [0, 0, 0]"});

  // The data gradient's result is the input it checks.
  WindowPlan gradient;
  uint32_t dy = gradient.b.input("dy", DType::F32, {2, 6, 5, 5});
  w = gradient.b.parameter("w", DType::F32, {6, 4, 3, 3}, InitKind::Normal, 0, 0.02);
  gradient.finish(gradient.b.op(OpCode::Conv2dGradInput, {dy, w}, DType::F32, {2, 4, 8, 8},
                                convAttrs({1, 1}, {0, 0, 0, 0})),
                  {2, 4, 8, 8});
  expectInvalid(gradient.b.plan, {"the convolution of [2, 4, 8, 8] by [6, 4, 3, 3] gives "
                                  "[2, 6, 6, 6], not [2, 6, 5, 5]"});
}

TEST(PlanValidate, PoolingAndClipRules) {
  WindowPlan pool;
  uint32_t x = pool.b.input("x", DType::F32, {2, 4, 9, 9});
  pool.finish(pool.b.op(OpCode::MaxPool2d, {x}, DType::F32, {2, 4, 4, 4},
                        {{"kernel_shape", V{3, 3}}, {"strides", V{2, 2}}, {"pads", V{1, 1, 1, 1}},
                         {"dilations", V{1, 1}}, {"ceil_mode", int64_t(0)}}),
              {2, 4, 4, 4});
  expectInvalid(pool.b.plan, {"pooling [2, 4, 9, 9] gives [2, 4, 5, 5], not [2, 4, 4, 4]"});

  WindowPlan padding;
  x = padding.b.input("x", DType::F32, {2, 4, 9, 9});
  padding.finish(padding.b.op(OpCode::AvgPool2d, {x}, DType::F32, {2, 4, 5, 5},
                              {{"kernel_shape", V{3, 3}}, {"strides", V{2, 2}},
                               {"pads", V{2, 2, 2, 2}}, {"ceil_mode", int64_t(0)},
                               {"count_include_pad", int64_t(0)}}),
                 {2, 4, 5, 5});
  expectInvalid(padding.b.plan, {"must be at most half the window"});

  // avg_pool2d takes no dilations.
  WindowPlan dilated;
  x = dilated.b.input("x", DType::F32, {2, 4, 9, 9});
  dilated.finish(dilated.b.op(OpCode::AvgPool2d, {x}, DType::F32, {2, 4, 4, 4},
                              {{"kernel_shape", V{3, 3}}, {"strides", V{2, 2}},
                               {"pads", V{0, 0, 0, 0}}, {"ceil_mode", int64_t(0)},
                               {"count_include_pad", int64_t(0)}, {"dilations", V{1, 1}}}),
                 {2, 4, 4, 4});
  expectInvalid(dilated.b.plan, {"avg_pool2d has no attribute 'dilations'"});

  WindowPlan clip;
  x = clip.b.input("x", DType::F32, {4});
  clip.finish(clip.b.op(OpCode::Clip, {x}, DType::F32, {4}, {{"min", 6.0}, {"max", 0.0}}), {4});
  expectInvalid(clip.b.plan, {"attribute 'min' (6) must not exceed 'max' (0)"});
}

} // namespace
