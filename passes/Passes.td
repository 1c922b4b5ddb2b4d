//===- Passes.td - graph dialect passes ---------------------*- tablegen -*-===//
//
// Every pass of the ampc pipeline, one def per pass, each with a summary and a description that
// shows the IR before and after. Flags carry the `graph-` prefix.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_PASSES_PASSES_TD
#define AMPC_PASSES_PASSES_TD

include "mlir/Pass/PassBase.td"

def GraphInlineCalls : Pass<"graph-inline-calls", "::ampc::graph::ModelOp"> {
  let summary = "Inline every call into the entry function and drop unused functions";
  let description = [{
    Models write a transformer block once and call it per layer. The later stages (plan
    emission, autodiff, precision assignment) work on one flat entry function: this pass clones
    each callee's body at its call sites, repeating until no call is left, and then erases the functions
    nothing calls any more. Source locations of the inlined ops are kept, wrapped in a
    `callsite` location that names the call.

    Before:
    ```mlir
    graph.model @m {
      graph.param @w : tensor<4x4xf32> init #graph.normal<std = 0.02>
      graph.input @x : tensor<2x4xf32>
      func.func private @layer(%x: tensor<2x4xf32>, %w: tensor<4x4xf32>) -> tensor<2x4xf32> {
        %y = graph.matmul %x, %w : tensor<2x4xf32>, tensor<4x4xf32>
        return %y : tensor<2x4xf32>
      }
      func.func @forward() {
        %w = graph.get_param @w : tensor<4x4xf32>
        %x = graph.get_input @x : tensor<2x4xf32>
        %h = func.call @layer(%x, %w) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
        %l = graph.mse_loss %h, %x : tensor<2x4xf32>
        graph.loss %l : tensor<f32>
        return
      }
    }
    ```
    After:
    ```mlir
    graph.model @m {
      graph.param @w : tensor<4x4xf32> init #graph.normal<mean = 0.0, std = 0.02>
      graph.input @x : tensor<2x4xf32>
      func.func @forward() {
        %w = graph.get_param @w : tensor<4x4xf32>
        %x = graph.get_input @x : tensor<2x4xf32>
        %h = graph.matmul %x, %w : tensor<2x4xf32>, tensor<4x4xf32>
        %l = graph.mse_loss %h, %x : tensor<2x4xf32>
        graph.loss %l : tensor<f32>
        return
      }
    }
    ```
  }];
  let dependentDialects = ["::mlir::func::FuncDialect"];
}

#endif // AMPC_PASSES_PASSES_TD
