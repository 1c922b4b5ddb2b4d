//===- GraphInterfaces.td - graph dialect op interfaces ----*- tablegen -*-===//
//
// Interfaces that let passes treat a family of ops alike without a list of them. An activation
// (Graph_Activation in GraphOps.td) declares its gradient op with it, so graph-build-training
// differentiates every activation the same way.
//
//===----------------------------------------------------------------------------------------===//

#ifndef AMPC_DIALECTS_GRAPH_GRAPHINTERFACES_TD
#define AMPC_DIALECTS_GRAPH_GRAPHINTERFACES_TD

include "mlir/IR/OpBase.td"

def Graph_ActivationOpInterface : OpInterface<"ActivationOpInterface"> {
  let description = [{
    An elementwise function y = f(x) of one operand whose gradient is its own op,
    dx = f_grad(x, dy), computed from the forward input (not its result).
  }];
  let cppNamespace = "::ampc::graph";
  let methods = [
    InterfaceMethod<"Creates the gradient op: dx from this op's input and dy, the gradient of "
                    "its result.",
                    "::mlir::Value", "createGradient",
                    (ins "::mlir::OpBuilder &":$builder, "::mlir::Value":$grad)>,
  ];
}

#endif // AMPC_DIALECTS_GRAPH_GRAPHINTERFACES_TD
