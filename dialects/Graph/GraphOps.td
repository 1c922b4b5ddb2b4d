//===- GraphOps.td - graph dialect operations ---------------*- tablegen -*-===//
//
// Model structure (graph.model, graph.param, graph.input, graph.get_param, graph.get_input,
// graph.loss) and the tensor ops of the forward computation. Every op checks shapes and element
// types in its verifier; ops whose result type follows from their operands infer it, so the
// result type is not written in the textual form. The gradient, training-state and optimizer
// ops are in GraphTrainingOps.td, included at the end.
//
//===----------------------------------------------------------------------------------------===//

#ifndef AMPC_DIALECTS_GRAPH_GRAPHOPS_TD
#define AMPC_DIALECTS_GRAPH_GRAPHOPS_TD

include "dialects/Graph/GraphBase.td"
include "dialects/Graph/GraphInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/RegionKindInterface.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/OpAsmInterface.td"

class Graph_Op<string mnemonic, list<Trait> traits = []>
    : Op<Graph_Dialect, mnemonic, traits>;

//===----------------------------------------------------------------------------------------===//
// Model structure
//===----------------------------------------------------------------------------------------===//

def Graph_ModelOp : Graph_Op<"model", [IsolatedFromAbove, SymbolTable, Symbol,
    NoTerminator, SingleBlock, NoRegionArguments]> {
  let summary = "a model: parameters, inputs, and functions computing one scalar loss";
  let description = [{
    Holds `graph.param`, `graph.input` and `func.func` ops, and after graph-build-training the
    `graph.state` of training. Exactly one `graph.loss` appears in the model, in its entry
    function (the function without arguments that holds it). Calls between functions may not
    recurse, and nothing may call the entry function.

    ```mlir
    graph.model @linear {
      graph.param @w : tensor<4x2xf32> init #graph.normal<std = 0.02>
      graph.input @x : tensor<8x4xf32>
      graph.input @y : tensor<8x2xf32>
      func.func @forward() {
        %w = graph.get_param @w : tensor<4x2xf32>
        %x = graph.get_input @x : tensor<8x4xf32>
        %y = graph.get_input @y : tensor<8x2xf32>
        %p = graph.matmul %x, %w : tensor<8x4xf32>, tensor<4x2xf32>
        %l = graph.mse_loss %p, %y : tensor<8x2xf32>
        graph.loss %l : tensor<f32>
        return
      }
    }
    ```

    `weights`, when present, names the safetensors file (relative to the model file) that the
    parameters initialised `#graph.given` take their values from; `ampc import` writes it beside
    the model it imports: `graph.model @mlp attributes {weights = "mlp.safetensors"} {...}`.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, OptionalAttr<StrAttr>:$weights);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$sym_name attr-dict-with-keyword $body";
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    /// The function holding the graph.loss op, or null if the model has none.
    ::mlir::func::FuncOp getEntryFunction();
    /// The graph.loss op, or null.
    LossOp getLossOp();
    ::mlir::Block &getBodyBlock() { return getBody().front(); }
  }];
}

def Graph_ParamOp : Graph_Op<"param", [Symbol, HasParent<"ModelOp">]> {
  let summary = "a named trainable parameter with its initializer";
  let description = [{
    ```mlir
    graph.param @wte : tensor<8192x384xf32> init #graph.normal<std = 0.02>
    graph.param @ln_g : tensor<384xf32> init #graph.ones
    graph.param @fc_b : tensor<1536xf32> init #graph.zeros {weight_decay = true}
    graph.param @fc1.weight : tensor<64x32xf32> init #graph.given
    ```
    `#graph.given` takes the values from the model's `weights` file.
    `weight_decay` overrides the optimizer's default (decay for rank >= 2 parameters, none for
    biases and norm gains). One parameter may be read any number of times (a tied embedding and
    output head read the same parameter).
    An `untrained` parameter is model state the optimizer never touches (PyTorch's buffers: a
    batch norm's running statistics and its `num_batches_tracked`): initialised, checkpointed,
    exported and loaded as the others, written only by graph.update_running_stats.
    ```mlir
    graph.param @bn1.running_var : tensor<64xf32> init #graph.ones untrained
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttrOf<Graph_FloatTensor>:$type,
                       Graph_InitializerAttr:$init, OptionalAttr<BoolAttr>:$weight_decay,
                       UnitAttr:$untrained);
  let assemblyFormat = "$sym_name `:` $type `init` $init (`untrained` $untrained^)? attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getType());
    }
    /// Whether the optimizer decays this parameter: the explicit flag, else rank >= 2.
    bool decays() {
      if (auto flag = getWeightDecay()) return *flag;
      return getTensorType().getRank() >= 2;
    }
  }];
}

def Graph_InputOp : Graph_Op<"input", [Symbol, HasParent<"ModelOp">]> {
  let summary = "a named input of the model (a batch of data)";
  let description = [{
    ```mlir
    graph.input @tokens : tensor<64x256xi32>
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttrOf<Graph_Tensor>:$type);
  let assemblyFormat = "$sym_name `:` $type attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getType());
    }
  }];
}

def Graph_GetParamOp : Graph_Op<"get_param", [Pure,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmResultNames"]>]> {
  let summary = "reads a parameter's current value";
  let description = [{
    ```mlir
    %w = graph.get_param @wte : tensor<8192x384xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$name);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
}

def Graph_GetInputOp : Graph_Op<"get_input", [Pure,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmResultNames"]>]> {
  let summary = "reads the current batch of an input";
  let description = [{
    ```mlir
    %tokens = graph.get_input @tokens : tensor<64x256xi32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$name);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
}

def Graph_LossOp : Graph_Op<"loss", []> {
  let summary = "marks the model's scalar loss";
  let description = [{
    ```mlir
    graph.loss %l : tensor<f32>
    ```
    Exactly one per model, in the entry function.
  }];
  let arguments = (ins AnyType:$loss);
  let assemblyFormat = "$loss attr-dict `:` type($loss)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------------------------===//
// Constants and casts
//===----------------------------------------------------------------------------------------===//

def Graph_ConstantOp : Graph_Op<"constant", [ConstantLike, Pure,
    AllTypesMatch<["value", "result"]>]> {
  let summary = "a constant tensor";
  let description = [{
    ```mlir
    %c = graph.constant dense<[1.0, 2.0]> : tensor<2xf32>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
  let hasVerifier = 1;
}

def Graph_CastOp : Graph_Op<"cast", [Graph_ElementwiseKernel, Pure, SameOperandsAndResultShape]> {
  let summary = "converts the element type";
  let description = [{
    Float to float rounds to nearest even; float to integer truncates toward zero.
    ```mlir
    %h = graph.cast %x : tensor<4x8xf32> -> tensor<4x8xbf16>
    ```
  }];
  let arguments = (ins Graph_Tensor:$input);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

//===----------------------------------------------------------------------------------------===//
// Elementwise arithmetic
//===----------------------------------------------------------------------------------------===//

class Graph_BinaryOp<string mnemonic, string math>
    : Graph_Op<mnemonic, [Graph_FollowPrecision, Graph_ElementwiseKernel, Pure,
                          InferTypeOpAdaptor]> {
  let summary = "elementwise " # math # " with broadcasting";
  let description = [{
    Operands have the same element type and NumPy-broadcastable shapes: shapes are aligned at
    their last dimension, and each pair of dimensions is equal or one of them is 1 (a missing
    leading dimension counts as 1). The result has the broadcast shape.
    ```mlir
    %y = graph.}] # mnemonic # [{ %a, %b : tensor<4x8xf32>, tensor<8xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$lhs, Graph_FloatTensor:$rhs);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs)";
}

def Graph_AddOp : Graph_BinaryOp<"add", "lhs + rhs">;
def Graph_SubOp : Graph_BinaryOp<"sub", "lhs - rhs">;
def Graph_MulOp : Graph_BinaryOp<"mul", "lhs * rhs">;
def Graph_DivOp : Graph_BinaryOp<"div", "lhs / rhs">;

class Graph_UnaryOp<string mnemonic, string math, list<Trait> traits = []>
    : Graph_Op<mnemonic, !listconcat([Graph_ElementwiseKernel, Pure, SameOperandsAndResultType],
                                     traits)> {
  let summary = "elementwise " # math;
  let description = [{
    ```mlir
    %y = graph.}] # mnemonic # [{ %x : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$input);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

class Graph_ActivationGradOp<string mnemonic, string math,
                             list<Trait> traits = [Graph_FollowPrecision]>
    : Graph_Op<mnemonic, !listconcat([Graph_ElementwiseKernel, Pure, SameOperandsAndResultType],
                                     traits)> {
  let summary = "gradient of " # math;
  let description = [{
    dx = dy * f'(x) for the forward input x and the gradient dy of the forward result.
    ```mlir
    %dx = graph.}] # mnemonic # [{ %x, %dy : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$grad);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$input `,` $grad attr-dict `:` type($input)";
}

// An activation: a unary op y = f(x) and its gradient op dx = f_grad(x, dy), declared together.
// `defm Graph_Name : Graph_Activation<"name", ...>` defines Graph_NameOp and Graph_NameGradOp;
// graph-build-training differentiates it through ActivationOpInterface, and both run as their
// plan opcodes' scalar math (runtime/numerics/Elementwise.h, ops::Name and ops::NameGrad).
multiclass Graph_Activation<string mnemonic, string math, string derivative,
                            list<Trait> traits = [Graph_FollowPrecision]> {
  def Op : Graph_UnaryOp<mnemonic, math,
      !listconcat(traits, [DeclareOpInterfaceMethods<Graph_ActivationOpInterface>])> {
    let extraClassDefinition = [{
      ::mlir::Value $cppClass::createGradient(::mlir::OpBuilder &builder, ::mlir::Value grad) {
        return builder.create<}] # !subst("Graph_", "", NAME) # [{GradOp>(getLoc(), getInput(),
                                                                         grad);
      }
    }];
  }
  // The gradient computes in the forward's precision class.
  def GradOp : Graph_ActivationGradOp<mnemonic # "_grad", mnemonic # ": " # derivative, traits>;
}

defm Graph_Relu : Graph_Activation<"relu", "max(x, 0)", "dy where x > 0, else 0">;
defm Graph_Silu : Graph_Activation<"silu", "x * sigmoid(x)",
    "dy * s * (1 + x * (1 - s)), s = sigmoid(x)">;
defm Graph_Hardswish : Graph_Activation<"hardswish", "x * min(max(x + 3, 0), 6) / 6",
    "0 below -3, dy (x / 3 + 1/2) up to 3, dy above">;
defm Graph_Sigmoid : Graph_Activation<"sigmoid", "1 / (1 + e^-x)", "dy * (1 - s) * s, s = sigmoid(x)">;
defm Graph_Hardsigmoid : Graph_Activation<"hardsigmoid", "min(max(x + 3, 0), 6) / 6",
    "dy / 6 strictly between -3 and 3, else 0">;
// PyTorch's softplus with beta 1 and threshold 20 (x itself above it); f32 as under autocast.
defm Graph_Softplus : Graph_Activation<"softplus", "log(1 + e^x), x above 20",
    "dy * sigmoid(x), dy above 20", [Graph_Fp32Precision]>;

def Graph_NegOp : Graph_UnaryOp<"neg", "-x", [Graph_FollowPrecision]>;
def Graph_TanhOp : Graph_UnaryOp<"tanh", "tanh(x)", [Graph_FollowPrecision]>;
def Graph_ExpOp : Graph_UnaryOp<"exp", "e^x", [Graph_Fp32Precision]>;
def Graph_LogOp : Graph_UnaryOp<"log", "natural logarithm", [Graph_Fp32Precision]>;
def Graph_SqrtOp : Graph_UnaryOp<"sqrt", "square root", [Graph_Fp32Precision]>;
def Graph_RsqrtOp : Graph_UnaryOp<"rsqrt", "1 / sqrt(x)", [Graph_Fp32Precision]>;

def Graph_GeluOp : Graph_Op<"gelu", [Graph_FollowPrecision, Graph_ElementwiseKernel, Pure,
    SameOperandsAndResultType]> {
  let summary = "Gaussian error linear unit";
  let description = [{
    `erf`: 0.5 x (1 + erf(x / sqrt 2)); `tanh`: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
    ```mlir
    %y = graph.gelu tanh %x : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Graph_GeluApproximation:$approximation, Graph_FloatTensor:$input);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$approximation $input attr-dict `:` type($input)";
}

def Graph_DropoutOp : Graph_Op<"dropout", [Graph_FollowPrecision, Graph_ElementwiseKernel,
    SameOperandsAndResultType]> {
  let summary = "zeroes elements with probability p while training";
  let description = [{
    While training, element e is kept when uniform(seed, step, stream, e) >= p and kept values
    are scaled by 1 / (1 - p); the generator is counter-based so a recomputed dropout reproduces
    its mask. `stream` names the random stream: graph-build-training gives every dropout its own
    and gives the backward dropout (dy masked and scaled the same way) the forward's stream.
    Without it, plan emission numbers the dropouts in order. When evaluating, dropout is the
    identity.
    ```mlir
    %y = graph.dropout %x {p = 0.1 : f64} : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$input, F64Attr:$p, OptionalAttr<I64Attr>:$stream);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------------------------===//
// Linear algebra and data movement
//===----------------------------------------------------------------------------------------===//

def Graph_MatmulOp : Graph_Op<"matmul", [Graph_ReducedPrecision, Graph_MatmulKernel, Pure,
    InferTypeOpAdaptor]> {
  let summary = "batched matrix product";
  let description = [{
    After transposing the last two dimensions where `transpose_lhs` / `transpose_rhs` are set,
    lhs is [..., M, K] and rhs is [..., K, N]; leading (batch) dimensions broadcast as in
    graph.add, so a [B, T, D] activation times a [D, N] weight is one op. Result [..., M, N], in
    the operands' element type, or with `-> f32` in f32 (bf16 or f16 operands, f32 accumulation
    written out unrounded: how mixed precision keeps weight gradients exact).
    ```mlir
    %y = graph.matmul %x, %w : tensor<64x256x384xf32>, tensor<384x1536xf32>
    %s = graph.matmul %q, %k transpose_rhs : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>
    %g = graph.matmul %x, %dy transpose_lhs : tensor<64x384xbf16>, tensor<64x1536xbf16> -> f32
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$lhs, Graph_FloatTensor:$rhs,
                       UnitAttr:$transpose_lhs, UnitAttr:$transpose_rhs,
                       OptionalAttr<TypeAttr>:$result_element);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs (`transpose_lhs` $transpose_lhs^)? (`transpose_rhs` $transpose_rhs^)?
    attr-dict `:` type($lhs) `,` type($rhs) (`->` $result_element^)?
  }];
}

def Graph_TransposeOp : Graph_Op<"transpose", [Graph_FollowPrecision, Graph_DataMovementKernel,
    Pure, InferTypeOpAdaptor]> {
  let summary = "permutes dimensions";
  let description = [{
    Result dimension i is input dimension permutation[i].
    ```mlir
    %y = graph.transpose %x [0, 2, 1, 3] : tensor<2x8x4x16xf32>
    ```
  }];
  let arguments = (ins Graph_Tensor:$input, DenseI64ArrayAttr:$permutation);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$input $permutation attr-dict `:` type($input)";
}

def Graph_ReshapeOp : Graph_Op<"reshape", [Graph_FollowPrecision, Graph_DataMovementKernel, Pure]> {
  let summary = "reinterprets the row-major elements with a new shape";
  let description = [{
    ```mlir
    %y = graph.reshape %x : tensor<2x8x64xf32> -> tensor<2x8x4x16xf32>
    ```
  }];
  let arguments = (ins Graph_Tensor:$input);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Graph_BroadcastOp : Graph_Op<"broadcast", [Graph_FollowPrecision, Graph_DataMovementKernel,
    Pure]> {
  let summary = "broadcasts to a larger shape (NumPy rules)";
  let description = [{
    ```mlir
    %y = graph.broadcast %b : tensor<8xf32> -> tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Graph_Tensor:$input);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Graph_SliceOp : Graph_Op<"slice", [Graph_FollowPrecision, Graph_DataMovementKernel, Pure,
    InferTypeOpAdaptor]> {
  let summary = "a contiguous box of a tensor";
  let description = [{
    Takes `sizes[i]` elements from `starts[i]` along each dimension i.
    ```mlir
    %y = graph.slice %x starts [0, 0, 8] sizes [2, 4, 8] : tensor<2x4x24xf32>
    ```
  }];
  let arguments = (ins Graph_Tensor:$input, DenseI64ArrayAttr:$starts,
                       DenseI64ArrayAttr:$sizes);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$input `starts` $starts `sizes` $sizes attr-dict `:` type($input)";
}

def Graph_SplitOp : Graph_Op<"split", [Graph_FollowPrecision, Graph_DataMovementKernel, Pure,
    InferTypeOpAdaptor]> {
  let summary = "splits a tensor along one axis into consecutive pieces";
  let description = [{
    ```mlir
    %q, %k, %v = graph.split %qkv axis 2 sizes [8, 8, 8] : tensor<2x4x24xf32>
    ```
  }];
  let arguments = (ins Graph_Tensor:$input, I64Attr:$axis, DenseI64ArrayAttr:$sizes);
  let results = (outs Variadic<Graph_Tensor>:$results);
  let assemblyFormat = "$input `axis` $axis `sizes` $sizes attr-dict `:` type($input)";
}

def Graph_ConcatOp : Graph_Op<"concat", [Graph_FollowPrecision, Graph_DataMovementKernel, Pure,
    InferTypeOpAdaptor]> {
  let summary = "joins tensors along one axis";
  let description = [{
    ```mlir
    %y = graph.concat %a, %b axis 1 : tensor<2x3xf32>, tensor<2x5xf32>
    ```
  }];
  let arguments = (ins Variadic<Graph_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs Graph_Tensor:$result);
  let assemblyFormat = "$inputs `axis` $axis attr-dict `:` type($inputs)";
}

//===----------------------------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------------------------===//

class Graph_ReduceOp<string mnemonic, string math>
    : Graph_Op<mnemonic, [Graph_Fp32Precision, Graph_ReductionKernel, Pure, InferTypeOpAdaptor]> {
  let summary = math # " over the given axes";
  let description = [{
    `axes` are distinct dimensions in increasing order; with `keepdims` the reduced dimensions stay
    as size 1.
    ```mlir
    %y = graph.}] # mnemonic # [{ %x axes [1] keepdims : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$input, DenseI64ArrayAttr:$axes, UnitAttr:$keepdims);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $input `axes` $axes (`keepdims` $keepdims^)? attr-dict `:` type($input)
  }];
}

def Graph_SumOp : Graph_ReduceOp<"sum", "sum">;
def Graph_MeanOp : Graph_ReduceOp<"mean", "arithmetic mean">;
def Graph_MaxOp : Graph_ReduceOp<"max", "maximum">;

//===----------------------------------------------------------------------------------------===//
// Neural-network ops
//===----------------------------------------------------------------------------------------===//

def Graph_EmbeddingOp : Graph_Op<"embedding", [Graph_ReducedPrecision, Graph_ReductionKernel,
    Pure, InferTypeOpAdaptor]> {
  let summary = "gathers rows of a table";
  let description = [{
    table [V, D], indices [...] with values in [0, V) -> [..., D].
    ```mlir
    %x = graph.embedding %wte[%tokens] : tensor<8192x384xf32>, tensor<64x256xi32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$table, Graph_IndexTensor:$indices);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$table `[` $indices `]` attr-dict `:` type($table) `,` type($indices)";
}

def Graph_LayerNormOp : Graph_Op<"layernorm", [Graph_Fp32Precision, Graph_ReductionKernel, Pure,
    InferTypeOpAdaptor]> {
  let summary = "layer normalisation over the last axis with gain and bias";
  let description = [{
    y = (x - mean) / sqrt(var + epsilon) * gamma + beta, mean and (biased) variance over the last
    axis; gamma and beta have the shape of the last axis. The result has the type of x, which may
    be bf16 or f16 with f32 gamma and beta: the op computes in its `precision` attribute's compute
    type (f32), widening x as it reads it, and rounds once as it writes.
    ```mlir
    %y = graph.layernorm %x, %g, %b {epsilon = 1.0e-05 : f64}
        : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$gamma,
                       Graph_FloatTensor:$beta, DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $gamma `,` $beta attr-dict `:` type($input) `,` type($gamma) `,` type($beta)
  }];
}

def Graph_RmsNormOp : Graph_Op<"rmsnorm", [Graph_Fp32Precision, Graph_ReductionKernel, Pure,
    InferTypeOpAdaptor]> {
  let summary = "root-mean-square normalisation over the last axis with gain";
  let description = [{
    y = x / sqrt(mean(x^2) + epsilon) * gamma. The result has the type of x, as for
    graph.layernorm.
    ```mlir
    %y = graph.rmsnorm %x, %g {epsilon = 1.0e-06 : f64} : tensor<4x8xf32>, tensor<8xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$gamma,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$input `,` $gamma attr-dict `:` type($input) `,` type($gamma)";
}

def Graph_SoftmaxOp : Graph_Op<"softmax", [Graph_Fp32Precision, Graph_ReductionKernel, Pure,
    SameOperandsAndResultType]> {
  let summary = "softmax over the last axis, optionally causal";
  let description = [{
    With `causal`, the last two dimensions are [T, S] with S >= T, and element [..., i, j] is
    excluded (probability 0) when j > i + (S - T).
    ```mlir
    %p = graph.softmax %s causal : tensor<2x4x8x8xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$input, UnitAttr:$causal);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$input (`causal` $causal^)? attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Graph_AttentionOp : Graph_Op<"attention", [Graph_ReducedPrecision, Graph_AttentionKernel,
    Pure, InferTypeOpAdaptor]> {
  let summary = "scaled dot-product attention";
  let description = [{
    softmax(scale * q k^T, causal) v with q [..., T, Dh], k [..., S, Dh], v [..., S, Dv] and equal
    leading dimensions; the result is [..., T, Dv]. `scale` defaults to 1 / sqrt(Dh). One op so
    that a fused kernel can implement it without materialising the T x S scores.
    ```mlir
    %o = graph.attention %q, %k, %v causal scale 0.125
        : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>
    ```
    With `with_lse` the op has a second result, the f32 natural log-sum-exp of each query row's
    scaled, masked scores, [..., T] (a row that sees no key has -inf or NaN). The training step
    keeps it, with the output, for graph.attention_grad (graph-save-attention-lse), so that the
    backward does not compute the forward again.
    ```mlir
    %o, %lse = graph.attention %q, %k, %v causal with_lse
        : tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>
    // %lse : tensor<2x4x8xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$query, Graph_FloatTensor:$key,
                       Graph_FloatTensor:$value, UnitAttr:$causal,
                       OptionalAttr<F64Attr>:$scale, UnitAttr:$with_lse);
  let results = (outs Graph_FloatTensor:$result, Optional<Graph_F32Tensor>:$lse);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`causal` $causal^)? (`scale` $scale^)? (`with_lse` $with_lse^)?
    attr-dict `:` type($query) `,` type($key) `,` type($value)
  }];
  let builders = [
    // The one-result attention.
    OpBuilder<(ins "::mlir::Value":$query, "::mlir::Value":$key, "::mlir::Value":$value,
                   "::mlir::UnitAttr":$causal, "::mlir::FloatAttr":$scale), [{
      build($_builder, $_state, query, key, value, causal, scale, ::mlir::UnitAttr());
    }]>
  ];
  let extraClassDeclaration = [{
    /// The scale applied to q k^T: the attribute, or 1 / sqrt(head dimension).
    double getEffectiveScale();
  }];
}

def Graph_QkvAttentionOp : Graph_Op<"qkv_attention", [Graph_ReducedPrecision,
    Graph_AttentionKernel, Pure, InferTypeOpAdaptor]> {
  let summary = "multi-head self-attention over one packed q, k, v projection";
  let description = [{
    graph.attention for each of `heads` heads, reading q, k and v where one projection wrote
    them side by side: %qkv is [..., T, 3 H Dh], columns [0, H Dh) q, [H Dh, 2 H Dh) k and
    [2 H Dh, 3 H Dh) v, head h at columns h Dh .. h Dh + Dh - 1 of each. The result is
    [..., T, H Dh], head h at columns h Dh .., which is what the output projection reads. It
    equals splitting %qkv in three, reshaping each to [..., T, H, Dh], transposing to
    [..., H, T, Dh], graph.attention, and transposing and reshaping back, without moving q, k, v
    or the result between layouts (graph-pack-qkv-attention forms it from that pattern).
    `scale` defaults to 1 / sqrt(Dh).
    ```mlir
    %o = graph.qkv_attention %qkv heads 4 causal : tensor<2x8x192xbf16>
    // %o : tensor<2x8x64xbf16>, Dh = 16
    ```
    With `with_lse` the second result is the f32 row log-sum-exp of every head, [..., H, T],
    as graph.attention's.
    ```mlir
    %o, %lse = graph.qkv_attention %qkv heads 4 causal with_lse : tensor<2x8x192xbf16>
    // %lse : tensor<2x4x8xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$qkv, ConfinedAttr<I64Attr, [IntPositive]>:$heads,
                       UnitAttr:$causal, OptionalAttr<F64Attr>:$scale, UnitAttr:$with_lse);
  let results = (outs Graph_FloatTensor:$result, Optional<Graph_F32Tensor>:$lse);
  let assemblyFormat = [{
    $qkv `heads` $heads (`causal` $causal^)? (`scale` $scale^)? (`with_lse` $with_lse^)?
    attr-dict `:` type($qkv)
  }];
  let extraClassDeclaration = [{
    /// The dimension of each head: the last dimension / (3 heads).
    int64_t getHeadDim();
    /// The scale applied to q k^T: the attribute, or 1 / sqrt(head dimension).
    double getEffectiveScale();
  }];
}

//===----------------------------------------------------------------------------------------===//
// Convolution, pooling and clipping (images are NCHW)
//===----------------------------------------------------------------------------------------===//

def Graph_Conv2dOp : Graph_Op<"conv2d", [Graph_ReducedPrecision, Graph_ImageKernel, Pure,
    InferTypeOpAdaptor]> {
  let summary = "2-D convolution (a cross-correlation, as PyTorch's conv2d) over NCHW images";
  let description = [{
    x [N, C, H, W] and weight [O, C / groups, KH, KW] give y [N, O, OH, OW] with
    y[n, o, i, j] = sum over c, p, q of w[o, c, p, q] * x[n, g C / groups + c,
    i sh - top + p dh, j sw - left + q dw], where g = o / (O / groups) and x is 0 outside its
    extent. `padding` is [top, left, bottom, right] (ONNX's order; asymmetric padding allowed),
    `strides` and `dilations` are [H, W]. groups = C with O a multiple of C is a depthwise
    convolution. A bias is a graph.add of a [O, 1, 1] tensor. In a mixed-precision model the
    convolution reads and writes the reduced type and accumulates in f32, as autocast's does.
    ```mlir
    %y = graph.conv2d %x, %w strides [2, 2] padding [1, 1, 1, 1]
        : tensor<8x3x32x32xf32>, tensor<16x3x3x3xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$weight,
                       DefaultValuedAttr<DenseI64ArrayAttr, "{1, 1}">:$strides,
                       DefaultValuedAttr<DenseI64ArrayAttr, "{0, 0, 0, 0}">:$padding,
                       DefaultValuedAttr<DenseI64ArrayAttr, "{1, 1}">:$dilations,
                       DefaultValuedAttr<I64Attr, "1">:$groups);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`strides` $strides^)? (`padding` $padding^)? (`dilations` $dilations^)? (`groups` $groups^)?
    attr-dict `:` type($input) `,` type($weight)
  }];
}

def Graph_MaxPool2dOp : Graph_Op<"max_pool2d", [Graph_FollowPrecision, Graph_ImageKernel, Pure,
    InferTypeOpAdaptor]> {
  let summary = "2-D max pooling over NCHW images";
  let description = [{
    The maximum of each window (`kernel_size`, `strides`, `dilations` as [H, W]; `padding` as
    [top, left, bottom, right], each at most half the window; padded positions never win). A NaN
    in a window is its maximum, as in PyTorch. With `ceil_mode` the output extent rounds up, and
    a last window that would start in the padding is dropped. Strides have no default (PyTorch's
    is the kernel size, ONNX's 1).
    ```mlir
    %y = graph.max_pool2d %x kernel_size [3, 3] strides [2, 2] padding [1, 1, 1, 1]
        : tensor<8x16x32x32xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$input, DenseI64ArrayAttr:$kernel_size,
                       DenseI64ArrayAttr:$strides,
                       DefaultValuedAttr<DenseI64ArrayAttr, "{0, 0, 0, 0}">:$padding,
                       DefaultValuedAttr<DenseI64ArrayAttr, "{1, 1}">:$dilations,
                       UnitAttr:$ceil_mode);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $input `kernel_size` $kernel_size `strides` $strides (`padding` $padding^)?
    (`dilations` $dilations^)? (`ceil_mode` $ceil_mode^)? attr-dict `:` type($input)
  }];
}

def Graph_AvgPool2dOp : Graph_Op<"avg_pool2d", [Graph_FollowPrecision, Graph_ImageKernel, Pure,
    InferTypeOpAdaptor]> {
  let summary = "2-D average pooling over NCHW images";
  let description = [{
    The mean of each window (`kernel_size`, `strides` as [H, W], `padding` as [top, left, bottom,
    right], each at most half the window). The divisor is PyTorch's: with `count_include_pad`,
    the window's extent clipped to the padded input (a ceil_mode window hanging past the padding
    counts only what lies inside it); without, the input elements it covers. Global average
    pooling is graph.mean over axes [2, 3].
    ```mlir
    %y = graph.avg_pool2d %x kernel_size [2, 2] strides [2, 2] : tensor<8x16x32x32xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$input, DenseI64ArrayAttr:$kernel_size,
                       DenseI64ArrayAttr:$strides,
                       DefaultValuedAttr<DenseI64ArrayAttr, "{0, 0, 0, 0}">:$padding,
                       UnitAttr:$ceil_mode, UnitAttr:$count_include_pad);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $input `kernel_size` $kernel_size `strides` $strides (`padding` $padding^)?
    (`ceil_mode` $ceil_mode^)? (`count_include_pad` $count_include_pad^)? attr-dict `:` type($input)
  }];
}

def Graph_BatchNormOp : Graph_Op<"batch_norm", [Graph_Fp32Precision, Graph_ImageKernel, Pure,
    InferTypeOpAdaptor]> {
  let summary = "batch normalisation over every axis but the channels (axis 1)";
  let description = [{
    x [N, C, ...]; gamma, beta, running_mean and running_var [C]. While training, each
    channel's mean and biased variance over N and the remaining axes normalise it:
    y = (x - mean) / sqrt(var + epsilon) * gamma + beta. While evaluating, the running
    statistics take their place. graph.update_running_stats updates them. y has the type of x,
    which may be bf16 or f16 with f32 parameters: the op computes in f32 and rounds once as it
    writes, as layernorm.
    ```mlir
    %y = graph.batch_norm %x, %g, %b, %rm, %rv {epsilon = 1.0e-05 : f64}
        : tensor<8x16x32x32xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>,
          tensor<16xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$gamma,
                       Graph_FloatTensor:$beta, Graph_FloatTensor:$running_mean,
                       Graph_FloatTensor:$running_var,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $gamma `,` $beta `,` $running_mean `,` $running_var attr-dict
    `:` type($input) `,` type($gamma) `,` type($beta) `,` type($running_mean) `,`
    type($running_var)
  }];
  let hasVerifier = 1;
}

def Graph_UpdateRunningStatsOp : Graph_Op<"update_running_stats", [Graph_ImageKernel]> {
  let summary = "updates a batch norm's running statistics from a batch, while training";
  let description = [{
    With m = momentum and the batch's per-channel mean and unbiased variance of x [N, C, ...]
    (over N and the remaining axes): mean <- (1 - m) mean + m batch_mean,
    var <- (1 - m) var + m batch_var, and count <- count + 1, as PyTorch's BatchNorm while
    training. mean, var and the optional count name untrained f32 parameters ([C], [C] and a
    scalar). While evaluating it does nothing.
    ```mlir
    graph.update_running_stats %x {momentum = 1.0e-01 : f64, mean = @bn1.running_mean,
                                   var = @bn1.running_var, count = @bn1.num_batches_tracked}
        : tensor<8x16x32x32xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$input, F64Attr:$momentum, FlatSymbolRefAttr:$mean,
                       FlatSymbolRefAttr:$var, OptionalAttr<FlatSymbolRefAttr>:$count);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Graph_ClipOp : Graph_Op<"clip", [Graph_FollowPrecision, Graph_ElementwiseKernel, Pure,
    SameOperandsAndResultType]> {
  let summary = "clamps each element to [min, max]";
  let description = [{
    y = min(max(x, min), max); NaN stays NaN. ReLU6 is `min = 0, max = 6`; an infinite bound is
    no bound. As torch.clamp and ONNX Clip.
    ```mlir
    %y = graph.clip %x {min = 0.0 : f64, max = 6.0 : f64} : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$input, F64Attr:$min, F64Attr:$max);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Graph_CrossEntropyOp : Graph_Op<"cross_entropy", [Graph_Fp32Precision, Graph_StoresFp32,
    Graph_ReductionKernel, Pure, InferTypeOpAdaptor]> {
  let summary = "softmax cross-entropy against integer labels";
  let description = [{
    logits [..., C], labels [...] with values in [0, C) or equal to `ignore_index`; the result is
    the f32 scalar mean (or sum) of -log softmax(logits)[label] over the rows not ignored.
    ```mlir
    %l = graph.cross_entropy %logits, %labels {ignore_index = -100 : i64}
        : tensor<64x256x8192xf32>, tensor<64x256xi32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$logits, Graph_IndexTensor:$labels,
                       DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                       DefaultValuedAttr<Graph_LossReduction,
                                         "::ampc::graph::LossReduction::mean">:$reduction);
  let results = (outs 0DTensorOf<[F32]>:$result);
  let assemblyFormat = "$logits `,` $labels attr-dict `:` type($logits) `,` type($labels)";
}

def Graph_MseLossOp : Graph_Op<"mse_loss", [Graph_Fp32Precision, Graph_StoresFp32,
    Graph_ReductionKernel, Pure, InferTypeOpAdaptor,
    AllTypesMatch<["prediction", "target"]>]> {
  let summary = "mean squared error";
  let description = [{
    The f32 scalar mean of (prediction - target)^2; both operands have the same type.
    ```mlir
    %l = graph.mse_loss %p, %t : tensor<8x2xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$prediction, Graph_FloatTensor:$target);
  let results = (outs 0DTensorOf<[F32]>:$result);
  let assemblyFormat = "$prediction `,` $target attr-dict `:` type($prediction)";
}

include "dialects/Graph/GraphTrainingOps.td"

#endif // AMPC_DIALECTS_GRAPH_GRAPHOPS_TD
