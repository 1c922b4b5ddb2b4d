//===- OpCodesTest.cpp - The opcode list is consistent and keeps its codes ===//
//
// Everything about opcodes is generated from runtime/plan/OpCodes.def, so these tests check the
// list itself: one entry per code in order, unique names that opCodeFromName inverts, arities that
// fit each kind, and a few numeric codes pinned by hand, since plan files store the numbers and a
// reordered or removed line would silently change what old plans mean. Also the attribute table
// beside it (PlanAttrs.def): its typed keys and the document generated from it.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/Plan.h"
#include "runtime/plan/PlanAttrs.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <string>

using namespace ampc::plan;

namespace {

int code(OpCode op) { return static_cast<int>(op); }

TEST(OpCodes, TableHasOneEntryPerCodeInOrder) {
  int lines = 0;
#define AMPC_OP(Name, ...) ++lines;
#include "runtime/plan/OpCodes.def"
  EXPECT_EQ(lines, kNumOpCodes);
  ASSERT_EQ(std::size(kOpTable), size_t(kNumOpCodes));
  for (int i = 0; i < kNumOpCodes; ++i) {
    EXPECT_EQ(code(kOpTable[i].op), i);
    EXPECT_EQ(&opInfo(static_cast<OpCode>(i)), &kOpTable[i]);
  }
}

TEST(OpCodes, PinnedCodes) {
  // The on-disk codes of docs/plan-format.md. Appending an opcode changes only the count (an
  // older runtime refuses the new code by name); any other change here breaks existing plans.
  EXPECT_EQ(code(OpCode::Add), 0);
  EXPECT_EQ(code(OpCode::Div), 3);
  EXPECT_EQ(code(OpCode::Neg), 4);
  EXPECT_EQ(code(OpCode::Rsqrt), 11);
  EXPECT_EQ(code(OpCode::Gelu), 12);
  EXPECT_EQ(code(OpCode::MatMul), 13);
  EXPECT_EQ(code(OpCode::Broadcast), 18);
  EXPECT_EQ(code(OpCode::Max), 21);
  EXPECT_EQ(code(OpCode::Cast), 30);
  EXPECT_EQ(code(OpCode::ReluGrad), 31);
  EXPECT_EQ(code(OpCode::Accumulate), 43);
  EXPECT_EQ(code(OpCode::UpdateLossScale), 48);
  EXPECT_EQ(code(OpCode::QkvAttention), 49);
  EXPECT_EQ(code(OpCode::QkvAttentionGrad), 50);
  EXPECT_EQ(code(OpCode::Hardswish), 51);
  EXPECT_EQ(code(OpCode::HardswishGrad), 52);
  EXPECT_EQ(code(OpCode::Sigmoid), 53);
  EXPECT_EQ(code(OpCode::HardsigmoidGrad), 56);
  EXPECT_EQ(code(OpCode::SoftplusGrad), 58);
  EXPECT_EQ(code(OpCode::Clip), 59);
  EXPECT_EQ(code(OpCode::ClipGrad), 60);
  EXPECT_EQ(code(OpCode::Conv2d), 61);
  EXPECT_EQ(code(OpCode::MaxPool2d), 64);
  EXPECT_EQ(code(OpCode::AvgPool2dGrad), 67);
  EXPECT_EQ(code(OpCode::BatchNorm), 68);
  EXPECT_EQ(code(OpCode::UpdateRunningStats), 70);
  EXPECT_EQ(kNumOpCodes, 71);
  EXPECT_EQ(code(OpCode::UpdateRunningStats), kNumOpCodes - 1);
}

TEST(OpCodes, PinnedNames) {
  EXPECT_STREQ(opCodeName(OpCode::Add), "add");
  EXPECT_STREQ(opCodeName(OpCode::Rsqrt), "rsqrt");
  EXPECT_STREQ(opCodeName(OpCode::LayerNorm), "layer_norm");
  EXPECT_STREQ(opCodeName(OpCode::LayerNormGrad), "layernorm_grad");
  EXPECT_STREQ(opCodeName(OpCode::UpdateLossScale), "update_loss_scale");
}

TEST(OpCodes, NamesAreUniqueAndKnown) {
  std::set<std::string> names;
  for (int i = 0; i < kNumOpCodes; ++i) {
    const std::string name = opCodeName(static_cast<OpCode>(i));
    SCOPED_TRACE(name);
    EXPECT_FALSE(name.empty());
    EXPECT_NE(name, "unknown");
    EXPECT_EQ(name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_"), std::string::npos);
    EXPECT_TRUE(names.insert(name).second) << "two opcodes are called " << name;
  }
  EXPECT_STREQ(opCodeName(static_cast<OpCode>(kNumOpCodes)), "unknown");
  EXPECT_STREQ(opCodeName(static_cast<OpCode>(0xffff)), "unknown");
}

TEST(OpCodes, NameLookupRoundTrips) {
  for (int i = 0; i < kNumOpCodes; ++i) {
    const OpCode op = static_cast<OpCode>(i);
    SCOPED_TRACE(opCodeName(op));
    std::optional<OpCode> found = opCodeFromName(opCodeName(op));
    ASSERT_TRUE(found.has_value());
    EXPECT_EQ(*found, op);
  }
  for (const char *name : {"", "unknown", "Add", "rsqrt ", "layernorm", "MatMul"})
    EXPECT_FALSE(opCodeFromName(name).has_value()) << name;
}

TEST(OpCodes, AritiesFitTheKinds) {
  std::set<OpCode> inPlace;
  for (const OpInfo &info : kOpTable) {
    SCOPED_TRACE(info.name);
    EXPECT_TRUE(info.operands == kVariadic || info.operands >= 0);
    EXPECT_GE(info.results, 1);
    switch (info.kind) {
    case OpKind::ElementwiseBinary:
      EXPECT_EQ(info.operands, 2);
      EXPECT_EQ(info.results, 1);
      break;
    case OpKind::ElementwiseUnary:
    case OpKind::Reduction:
      EXPECT_EQ(info.operands, 1);
      EXPECT_EQ(info.results, 1);
      break;
    case OpKind::Layout:
      EXPECT_EQ(info.results, 1);
      break;
    case OpKind::InPlace:
      inPlace.insert(info.op);
      break;
    case OpKind::Forward:
    case OpKind::Training:
      break;
    }
  }
  // Only these write parameters, parameter copies and state (docs/plan-format.md, Validation).
  EXPECT_EQ(inPlace, (std::set<OpCode>{OpCode::Accumulate, OpCode::AdamW, OpCode::Sgd,
                                       OpCode::UpdateLossScale, OpCode::UpdateRunningStats}));
}

} // namespace

TEST(PlanAttrs, EveryOpcodeAttributeIsDeclaredOnceWithItsKeysType) {
  std::set<std::pair<OpCode, std::string>> seen;
  for (const OpAttr &entry : opAttrs()) {
    EXPECT_TRUE(seen.insert({entry.op, entry.name}).second)
        << opCodeName(entry.op) << " declares '" << entry.name << "' twice";
  }
  // Typed keys: the emitter's values reach the validator as the declared type.
  Instruction instruction;
  instruction.op = OpCode::Attention;
  instruction.attrs = {attr::causal(1), attr::scale(0.125)};
  EXPECT_EQ(checkAttributes(instruction), "");
  EXPECT_EQ(get(instruction, attr::causal), 1);
  EXPECT_EQ(get(instruction, attr::scale), 0.125);
  instruction.attrs.erase(attr::scale.name);
  EXPECT_EQ(checkAttributes(instruction), "attention is missing attribute 'scale'");
  EXPECT_THROW(get(instruction, attr::scale), PlanError);
}

TEST(PlanAttrs, PlanFormatDocumentListsTheTable) {
  // docs/plan-format.md's "Attributes by opcode" holds attributeTableMarkdown() between its
  // markers; after a change to PlanAttrs.def, paste the text this test prints there.
  std::ifstream file(std::string(AMPC_SOURCE_DIR) + "/docs/plan-format.md");
  ASSERT_TRUE(file) << "cannot read docs/plan-format.md";
  const std::string text((std::istreambuf_iterator<char>(file)), {});
  const std::string begin = "<!-- attribute table: begin -->\n",
                    end = "<!-- attribute table: end -->";
  const size_t from = text.find(begin), to = text.find(end);
  ASSERT_TRUE(from != std::string::npos && to != std::string::npos && from < to);
  EXPECT_EQ(text.substr(from + begin.size(), to - from - begin.size()), attributeTableMarkdown())
      << "docs/plan-format.md's attribute table differs from PlanAttrs.def; it should read:\n"
      << attributeTableMarkdown();
}
