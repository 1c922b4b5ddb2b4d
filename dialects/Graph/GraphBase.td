//===- GraphBase.td - graph dialect, its types and attributes ---*- tablegen -*-===//
//
// The `graph` dialect describes a model's forward computation on statically shaped tensors with
// value semantics. This file holds the dialect definition, the tensor type constraints shared by
// the ops, the enums, and the parameter initializer attributes.
//
//===----------------------------------------------------------------------------------------===//

#ifndef AMPC_DIALECTS_GRAPH_GRAPHBASE_TD
#define AMPC_DIALECTS_GRAPH_GRAPHBASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Graph_Dialect : Dialect {
  let name = "graph";
  let summary = "Tensor graphs of models for mixed-precision training";
  let description = [{
    A model is a `graph.model` holding named trainable parameters (`graph.param`), named inputs
    (`graph.input`) and functions. The entry function reads parameters and inputs with
    `graph.get_param` / `graph.get_input`, computes, and marks exactly one scalar loss with
    `graph.loss`. Other functions (a transformer block written once) are called with `func.call`.
    Every tensor is ranked and statically shaped; element types are f32, bf16, f16 for values and
    i32, i64 for indices (token ids, labels).
  }];
  let cppNamespace = "::ampc::graph";
  let useDefaultAttributePrinterParser = 1;
  let dependentDialects = ["::mlir::func::FuncDialect"];
  // Discardable attributes that passes leave for later stages are `graph.`-prefixed, declared
  // here and checked by the dialect (GraphDialect::verifyOperationAttribute).
  let hasOperationAttrVerify = 1;
  let extraClassDeclaration = [{
    /// `graph.remat`: what graph-plan-remat decided (a #graph.remat on micro_step).
    static constexpr ::llvm::StringLiteral kRematAttrName = "graph.remat";
    /// `graph.recomputed`: a forward op graph-plan-remat cloned into the backward pass.
    static constexpr ::llvm::StringLiteral kRecomputedAttrName = "graph.recomputed";
    /// `graph.precision`: the dtypes graph-assign-precision chose for an op (#graph.precision).
    static constexpr ::llvm::StringLiteral kPrecisionAttrName = "graph.precision";
    /// `graph.precision_mode`: the mode the model was assigned ("bf16", "fp16", "fp32").
    static constexpr ::llvm::StringLiteral kPrecisionModeAttrName = "graph.precision_mode";
    /// `graph.debug_nonfinite`: the plan names the first op whose result became inf/NaN.
    static constexpr ::llvm::StringLiteral kDebugNonfiniteAttrName = "graph.debug_nonfinite";
    /// `graph.fusion`: the fused group an op belongs to and what the group becomes
    /// (#graph.fusion, set by graph-fuse on every op of a step function).
    static constexpr ::llvm::StringLiteral kFusionAttrName = "graph.fusion";
    /// `graph.fusion_schedule`: the order a function's fused groups run in (graph-fuse).
    static constexpr ::llvm::StringLiteral kFusionScheduleAttrName = "graph.fusion_schedule";
    /// `graph.arena_offsets`: per result, its byte offset in the function's arena, or -1 for a
    /// result that is never stored (graph-plan-memory).
    static constexpr ::llvm::StringLiteral kArenaOffsetsAttrName = "graph.arena_offsets";
    /// `graph.arena`: a function's arena (#graph.arena, graph-plan-memory).
    static constexpr ::llvm::StringLiteral kArenaAttrName = "graph.arena";
    /// `keep_fp32`: a unit attribute the model file puts on an op to keep it, and its gradient
    /// ops, in f32 whatever the policy (graph-assign-precision; graph-build-training copies it).
    /// Unprefixed, since users write it.
    static constexpr ::llvm::StringLiteral kKeepFp32AttrName = "keep_fp32";
  }];
}

//===----------------------------------------------------------------------------------------===//
// Op classes: what the passes know of an op, declared once with the op
//===----------------------------------------------------------------------------------------===//

class Graph_OpClass<string name> : NativeOpTrait<name> {
  let cppNamespace = "::ampc::graph";
}

// graph-assign-precision's default policy (passes/PrecisionPolicy.h): the op computes in the
// reduced type with f32 accumulation, in f32, or in the type of its inputs; and, orthogonal to
// those, its result is stored in f32.
def Graph_ReducedPrecision : Graph_OpClass<"ReducedPrecision">;
def Graph_Fp32Precision : Graph_OpClass<"Fp32Precision">;
def Graph_FollowPrecision : Graph_OpClass<"FollowPrecision">;
def Graph_StoresFp32 : Graph_OpClass<"StoresFp32">;

// graph-fuse's classes (passes/FusionGrouping.h, FusionOpClass): the kind of kernel the op
// becomes part of. An op with none of them has no kernel of its own and is never fused.
def Graph_ElementwiseKernel : Graph_OpClass<"ElementwiseKernel">;
def Graph_DataMovementKernel : Graph_OpClass<"DataMovementKernel">;
def Graph_ReductionKernel : Graph_OpClass<"ReductionKernel">;
def Graph_MatmulKernel : Graph_OpClass<"MatmulKernel">;
def Graph_AttentionKernel : Graph_OpClass<"AttentionKernel">;
def Graph_AccumulateKernel : Graph_OpClass<"AccumulateKernel">;
def Graph_OptimizerKernel : Graph_OpClass<"OptimizerKernel">;
// Convolution, pooling and batch normalisation over [N, C, ...] images: kernels of their own,
// never fused.
def Graph_ImageKernel : Graph_OpClass<"ImageKernel">;

//===----------------------------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------------------------===//

def Graph_FloatElement : AnyTypeOf<[F32, BF16, F16], "f32, bf16 or f16">;
def Graph_IndexElement : AnyTypeOf<[I32, I64], "i32 or i64">;

def Graph_FloatTensor : StaticShapeTensorOf<[F32, BF16, F16]>;
def Graph_IndexTensor : StaticShapeTensorOf<[I32, I64]>;
def Graph_Tensor : StaticShapeTensorOf<[F32, BF16, F16, I32, I64]>;
def Graph_ScalarFloatTensor : 0DTensorOf<[F32, BF16, F16]>;
/// The f32 scalars of the training step (loss seed, gradient norm, learning rate, loss scale);
/// buildable, so the textual form need not spell the type.
def Graph_F32Scalar : 0DTensorOf<[F32]>,
    BuildableType<"::mlir::RankedTensorType::get({}, $_builder.getF32Type())">;
/// Training state (gradient accumulators, optimizer moments) is always f32.
def Graph_F32Tensor : StaticShapeTensorOf<[F32]>;

//===----------------------------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------------------------===//

def Graph_GeluApproximation : I32EnumAttr<"GeluApproximation",
    "how gelu evaluates the Gaussian CDF", [
      I32EnumAttrCase<"erf", 0>,
      I32EnumAttrCase<"tanh", 1>
    ]> {
  let cppNamespace = "::ampc::graph";
}

def Graph_LrSchedule : I32EnumAttr<"LrSchedule",
    "how the learning rate changes over the optimizer steps", [
      I32EnumAttrCase<"constant", 0>,
      I32EnumAttrCase<"cosine", 1>
    ]> {
  let cppNamespace = "::ampc::graph";
}

def Graph_LossReduction : I32EnumAttr<"LossReduction",
    "how a per-example loss is reduced to a scalar", [
      I32EnumAttrCase<"mean", 0>,
      I32EnumAttrCase<"sum", 1>
    ]> {
  let cppNamespace = "::ampc::graph";
}

//===----------------------------------------------------------------------------------------===//
// Parameter initializers
//===----------------------------------------------------------------------------------------===//

class Graph_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Graph_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def Graph_ZerosInitAttr : Graph_Attr<"ZerosInit", "zeros"> {
  let summary = "initialise every element to 0";
}

def Graph_OnesInitAttr : Graph_Attr<"OnesInit", "ones"> {
  let summary = "initialise every element to 1";
}

def Graph_GivenInitAttr : Graph_Attr<"GivenInit", "given"> {
  let summary = "initial values given with the model (an imported model's weights)";
  let description = [{
    The values come from the file the enclosing graph.model's `weights` attribute names (a
    safetensors file, relative to the model file, holding one tensor per parameter, keyed by the
    parameter's name); plan emission embeds them in the plan, so the seed does not change them.
  }];
}

def Graph_NormalInitAttr : Graph_Attr<"NormalInit", "normal"> {
  let summary = "initialise from a normal distribution";
  let description = [{
    `#graph.normal<std = 0.02>` or `#graph.normal<mean = 0.0, std = 0.02>`; the mean defaults
    to 0. Values come from the counter-based generator keyed by (seed, parameter, element).
  }];
  let parameters = (ins APFloatParameter<"mean">:$mean, APFloatParameter<"standard deviation">:$std);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

def Graph_UniformInitAttr : Graph_Attr<"UniformInit", "uniform"> {
  let summary = "initialise from a uniform distribution on [low, high)";
  let description = [{ `#graph.uniform<low = -0.1, high = 0.1>`. }];
  let parameters = (ins APFloatParameter<"lower bound">:$low, APFloatParameter<"upper bound">:$high);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

//===----------------------------------------------------------------------------------------===//
// Precision
//===----------------------------------------------------------------------------------------===//

def Graph_PrecisionAttr : Graph_Attr<"Precision", "precision"> {
  let summary = "the dtypes an op runs in, set by graph-assign-precision";
  let description = [{
    `compute`: the element type the op reads its float operands in; `accumulate`: the type of its
    sums (matmul and attention accumulate in f32 whatever they read); `storage`: the type its
    result is stored in; `rule`: the policy rule that decided it (for `ampc report precision`).
    ```mlir
    %y = graph.matmul %x, %w {graph.precision = #graph.precision<compute = bf16, accumulate = f32,
                                                          storage = bf16, rule = "reduced">}
    ```
  }];
  let parameters = (ins "::mlir::Type":$compute, "::mlir::Type":$accumulate,
                        "::mlir::Type":$storage, StringRefParameter<"policy rule">:$rule);
  let assemblyFormat = "`<` struct(params) `>`";
}

//===----------------------------------------------------------------------------------------===//
// Stage results
//===----------------------------------------------------------------------------------------===//

def Graph_RematAttr : Graph_Attr<"Remat", "remat"> {
  let summary = "what graph-plan-remat decided for a memory budget";
  let description = [{
    Set by graph-plan-remat on `micro_step` as the discardable attribute `graph.remat`, and read
    by the driver's summary, by graph-plan-memory (which checks that the arenas it places keep
    the step within the budget) and the tests. Bytes are of the whole training step (persistent
    buffers and the matmul workspace included) except `live_bytes`, the micro step's own values
    at its busiest op, and `persistent_bytes`, everything outside the arenas (parameters,
    training state, inputs, constants, the matmul workspace); FLOPs are per micro step.
    ```mlir
    func.func @micro_step() attributes {graph.remat = #graph.remat<budget_bytes = 9800,
        peak_bytes = 9712, no_remat_peak_bytes = 10512, live_bytes = 4576,
        extra_flops = 256, step_flops = 33536, persistent_bytes = 5136>}
    ```
    The peak is within the budget, and no size or FLOP count is negative.
  }];
  let parameters = (ins "int64_t":$budget_bytes, "int64_t":$peak_bytes,
                        "int64_t":$no_remat_peak_bytes, "int64_t":$live_bytes,
                        "int64_t":$extra_flops, "int64_t":$step_flops,
                        "int64_t":$persistent_bytes);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Graph_GroupKind : I32EnumAttr<"GroupKind", "what a fused group becomes on the device", [
      I32EnumAttrCase<"none", 0>,
      I32EnumAttrCase<"view", 1>,
      I32EnumAttrCase<"elementwise", 2>,
      I32EnumAttrCase<"copy", 3>,
      I32EnumAttrCase<"reduction", 4>,
      I32EnumAttrCase<"cross_entropy", 5>,
      I32EnumAttrCase<"matmul", 6>,
      I32EnumAttrCase<"matmul_epilogue", 7>,
      I32EnumAttrCase<"bias_grad", 8>,
      I32EnumAttrCase<"attention", 9>,
      I32EnumAttrCase<"accumulate", 10>,
      I32EnumAttrCase<"optimizer", 11>,
      I32EnumAttrCase<"matmul_accumulate", 12>
    ]> {
  let cppNamespace = "::ampc::graph";
  let genSpecializedAttr = 0;
}

def Graph_FusionAttr : Graph_Attr<"Fusion", "fusion"> {
  let summary = "the fused group an op belongs to, set by graph-fuse";
  let description = [{
    Every op of a fused step function carries `graph.fusion`: the number of its group and the
    group's kind (what the group becomes on the device: a generated kernel of some shape, a
    cuBLASLt matmul, flash attention, nothing). The function's `graph.fusion_schedule` lists the
    groups in the order they run.
    ```mlir
    %h = graph.matmul %x, %w {graph.fusion = #graph.fusion<group = 4, kind = matmul_epilogue>}
    ```
  }];
  let parameters = (ins "int64_t":$group, EnumParameter<Graph_GroupKind>:$kind);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Graph_ArenaAttr : Graph_Attr<"Arena", "arena"> {
  let summary = "a step function's arena, placed by graph-plan-memory";
  let description = [{
    The bytes the function's intermediate values need when each is placed at its
    `graph.arena_offsets` (the device allocates exactly this), the largest sum of bytes live at
    one point of the schedule (no placement can need less), and the alignment of every offset.
    ```mlir
    func.func @micro_step() attributes {graph.arena = #graph.arena<bytes = 3072,
        peak_live_bytes = 3072, alignment = 256>}
    ```
  }];
  let parameters = (ins "int64_t":$bytes, "int64_t":$peak_live_bytes, "int64_t":$alignment);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Graph_LossScaleMode : I32EnumAttr<"LossScaleMode",
    "how the loss is scaled before the backward pass", [
      I32EnumAttrCase<"static_scale", 0, "static">,
      I32EnumAttrCase<"dynamic", 1>
    ]> {
  let cppNamespace = "::ampc::graph";
}

def Graph_InitializerAttr : AnyAttrOf<[Graph_ZerosInitAttr, Graph_OnesInitAttr,
                                       Graph_NormalInitAttr, Graph_UniformInitAttr,
                                       Graph_GivenInitAttr]>;

#endif // AMPC_DIALECTS_GRAPH_GRAPHBASE_TD
