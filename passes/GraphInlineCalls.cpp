//===- GraphInlineCalls.cpp - flatten calls into the entry function -------===//
//
// Clones each callee's body at its call sites until the entry function holds no calls, then
// erases functions that are no longer called. The model verifier guarantees the call graph is
// acyclic, so repeated inlining terminates.
//
//===--------------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

namespace ampc::graph {
#define GEN_PASS_DEF_GRAPHINLINECALLS
#include "passes/Passes.h.inc"
} // namespace ampc::graph

using namespace mlir;
using namespace ampc::graph;

namespace {

/// Replaces `call` by a copy of `callee`'s body. The callee has one block ending in func.return.
void inlineCall(func::CallOp call, func::FuncOp callee) {
  OpBuilder builder(call);
  IRMapping mapping;
  Block &body = callee.getBody().front();
  mapping.map(body.getArguments(), call.getOperands());
  for (Operation &op : body.without_terminator()) {
    Operation *clone = builder.clone(op, mapping);
    // Keep the op's own location and record which call brought it here.
    clone->walk([&](Operation *nested) {
      nested->setLoc(CallSiteLoc::get(nested->getLoc(), call.getLoc()));
    });
  }
  auto ret = llvm::cast<func::ReturnOp>(body.getTerminator());
  for (auto [result, returned] : llvm::zip(call.getResults(), ret.getOperands()))
    result.replaceAllUsesWith(mapping.lookupOrDefault(returned));
  call.erase();
}

struct GraphInlineCallsPass : ampc::graph::impl::GraphInlineCallsBase<GraphInlineCallsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModelOp model = getOperation();
    mlir::SymbolTable symbols(model);
    // Inline until no calls remain anywhere; each round removes one level of nesting.
    while (true) {
      llvm::SmallVector<func::CallOp> calls;
      model.walk([&](func::CallOp call) { calls.push_back(call); });
      if (calls.empty())
        break;
      for (func::CallOp call : calls) {
        auto callee = symbols.lookup<func::FuncOp>(call.getCallee());
        if (!callee || callee.isExternal() || !llvm::hasSingleElement(callee.getBody())) {
          call.emitOpError("cannot be inlined: @")
              << call.getCallee() << " must be a function with a single-block body";
          return signalPassFailure();
        }
        inlineCall(call, callee);
      }
    }
    // Every function other than the entry is now unused.
    func::FuncOp entry = model.getEntryFunction();
    for (auto func : llvm::make_early_inc_range(model.getBodyBlock().getOps<func::FuncOp>()))
      if (func != entry)
        func.erase();
  }
};

} // namespace
