//===- GraphTrainingOps.td - gradient, state and optimizer ops -*- tablegen -*-===//
//
// The ops graph-build-training writes: the gradients of the forward ops that need their own
// kernel (activations, pad, max, embedding, norms, softmax, attention, cross-entropy), the
// persistent f32 training state, and the ops of the optimizer step. Included by GraphOps.td, so
// they are generated with the forward ops.
//
//===----------------------------------------------------------------------------------------===//

#ifndef AMPC_DIALECTS_GRAPH_GRAPHTRAININGOPS_TD
#define AMPC_DIALECTS_GRAPH_GRAPHTRAININGOPS_TD

//===----------------------------------------------------------------------------------------===//
// Gradient ops (written by graph-build-training)
//===----------------------------------------------------------------------------------------===//

// The gradients of the activations (Graph_Activation) are declared with them in GraphOps.td.

def Graph_GeluGradOp : Graph_Op<"gelu_grad", [Graph_FollowPrecision, Graph_ElementwiseKernel,
    Pure, SameOperandsAndResultType]> {
  let summary = "gradient of gelu";
  let description = [{
    dx = dy * gelu'(x), the exact derivative of the chosen approximation.
    ```mlir
    %dx = graph.gelu_grad tanh %x, %dy : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Graph_GeluApproximation:$approximation, Graph_FloatTensor:$input,
                       Graph_FloatTensor:$grad);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$approximation $input `,` $grad attr-dict `:` type($input)";
}

def Graph_ClipGradOp : Graph_Op<"clip_grad", [Graph_FollowPrecision, Graph_ElementwiseKernel,
    Pure, SameOperandsAndResultType]> {
  let summary = "gradient of clip";
  let description = [{
    dx = dy where min <= x <= max, else 0 (torch.clamp's rule: the bounds pass the gradient).
    ```mlir
    %dx = graph.clip_grad %x, %dy {min = 0.0 : f64, max = 6.0 : f64} : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$grad, F64Attr:$min,
                       F64Attr:$max);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$input `,` $grad attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Graph_Conv2dGradInputOp : Graph_Op<"conv2d_grad_input", [Graph_ReducedPrecision,
    Graph_ImageKernel, Pure]> {
  let summary = "gradient of graph.conv2d with respect to its input";
  let description = [{
    From dy [N, O, OH, OW] and the weight: dx [N, C, H, W], the transposed convolution of dy,
    with the forward's attributes. The result type names H and W, which a strided convolution's
    output does not determine; the convolution of the result's shape must give dy's.
    ```mlir
    %dx = graph.conv2d_grad_input %dy, %w strides [2, 2] padding [1, 1, 1, 1]
        : tensor<8x16x16x16xf32>, tensor<16x3x3x3xf32> -> tensor<8x3x32x32xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$grad, Graph_FloatTensor:$weight,
                       DefaultValuedAttr<DenseI64ArrayAttr, "{1, 1}">:$strides,
                       DefaultValuedAttr<DenseI64ArrayAttr, "{0, 0, 0, 0}">:$padding,
                       DefaultValuedAttr<DenseI64ArrayAttr, "{1, 1}">:$dilations,
                       DefaultValuedAttr<I64Attr, "1">:$groups);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `,` $weight (`strides` $strides^)? (`padding` $padding^)? (`dilations` $dilations^)? (`groups` $groups^)?
    attr-dict `:` type($grad) `,` type($weight) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Graph_Conv2dGradWeightOp : Graph_Op<"conv2d_grad_weight", [Graph_ReducedPrecision,
    Graph_ImageKernel, Pure]> {
  let summary = "gradient of graph.conv2d with respect to its weight";
  let description = [{
    From x [N, C, H, W] and dy [N, O, OH, OW]: dw [O, C / groups, KH, KW], the sum over the
    batch and output positions of dy times the input each weight met. The result type names the
    kernel's extent; its element type is the operands' or f32 (mixed precision: the f32
    accumulation is written unrounded, as matmul's `-> f32`).
    ```mlir
    %dw = graph.conv2d_grad_weight %x, %dy strides [2, 2] padding [1, 1, 1, 1]
        : tensor<8x3x32x32xbf16>, tensor<8x16x16x16xbf16> -> tensor<16x3x3x3xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$grad,
                       DefaultValuedAttr<DenseI64ArrayAttr, "{1, 1}">:$strides,
                       DefaultValuedAttr<DenseI64ArrayAttr, "{0, 0, 0, 0}">:$padding,
                       DefaultValuedAttr<DenseI64ArrayAttr, "{1, 1}">:$dilations,
                       DefaultValuedAttr<I64Attr, "1">:$groups);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $grad (`strides` $strides^)? (`padding` $padding^)? (`dilations` $dilations^)? (`groups` $groups^)?
    attr-dict `:` type($input) `,` type($grad) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Graph_BatchNormGradOp : Graph_Op<"batch_norm_grad", [Graph_Fp32Precision,
    Graph_ImageKernel, Pure, InferTypeOpAdaptor, AllTypesMatch<["input", "grad"]>]> {
  let summary = "gradients of graph.batch_norm while training";
  let description = [{
    From x, gamma and dy: dx, dgamma and dbeta, the batch statistics recomputed from x. Per
    channel, over its M = N * (the other extents) elements, with xhat = (x - mean) * rstd:
    dbeta = sum dy, dgamma = sum dy * xhat, dx = gamma * rstd * (dy - dbeta / M - xhat *
    dgamma / M). dx has the type of x and dy, dgamma and dbeta that of gamma.
    ```mlir
    %dx, %dg, %db = graph.batch_norm_grad %x, %g, %dy {epsilon = 1.0e-05 : f64}
        : tensor<8x16x32x32xf32>, tensor<16xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$gamma,
                       Graph_FloatTensor:$grad, DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs Graph_FloatTensor:$input_grad, Graph_FloatTensor:$gamma_grad,
                      Graph_FloatTensor:$beta_grad);
  let assemblyFormat = [{
    $input `,` $gamma `,` $grad attr-dict `:` type($input) `,` type($gamma)
  }];
  let hasVerifier = 1;
}

def Graph_MaxPool2dGradOp : Graph_Op<"max_pool2d_grad", [Graph_FollowPrecision,
    Graph_ImageKernel, Pure, InferTypeOpAdaptor]> {
  let summary = "gradient of graph.max_pool2d";
  let description = [{
    From x and dy: dx, the shape and type of x, where each window's dy goes to the position of
    its maximum (the first in row-major order among equals, the last NaN if any: PyTorch's
    choice), summed where windows overlap.
    ```mlir
    %dx = graph.max_pool2d_grad %x, %dy kernel_size [2, 2] strides [2, 2]
        : tensor<8x16x32x32xf32>, tensor<8x16x16x16xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$grad,
                       DenseI64ArrayAttr:$kernel_size, DenseI64ArrayAttr:$strides,
                       DefaultValuedAttr<DenseI64ArrayAttr, "{0, 0, 0, 0}">:$padding,
                       DefaultValuedAttr<DenseI64ArrayAttr, "{1, 1}">:$dilations,
                       UnitAttr:$ceil_mode);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $grad `kernel_size` $kernel_size `strides` $strides (`padding` $padding^)?
    (`dilations` $dilations^)? (`ceil_mode` $ceil_mode^)? attr-dict `:` type($input) `,` type($grad)
  }];
}

def Graph_AvgPool2dGradOp : Graph_Op<"avg_pool2d_grad", [Graph_FollowPrecision,
    Graph_ImageKernel, Pure]> {
  let summary = "gradient of graph.avg_pool2d";
  let description = [{
    From dy: dx, each window's dy divided by the forward's divisor and spread over the input
    elements the window covers. The result type names the input's shape, which pooling's output
    does not determine.
    ```mlir
    %dx = graph.avg_pool2d_grad %dy kernel_size [2, 2] strides [2, 2]
        : tensor<8x16x16x16xf32> -> tensor<8x16x32x32xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$grad, DenseI64ArrayAttr:$kernel_size,
                       DenseI64ArrayAttr:$strides,
                       DefaultValuedAttr<DenseI64ArrayAttr, "{0, 0, 0, 0}">:$padding,
                       UnitAttr:$ceil_mode, UnitAttr:$count_include_pad);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `kernel_size` $kernel_size `strides` $strides (`padding` $padding^)?
    (`ceil_mode` $ceil_mode^)? (`count_include_pad` $count_include_pad^)? attr-dict
    `:` type($grad) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Graph_PadOp : Graph_Op<"pad", [Graph_FollowPrecision, Graph_DataMovementKernel, Pure,
    InferTypeOpAdaptor]> {
  let summary = "surrounds a tensor with zeros (the gradient of graph.slice)";
  let description = [{
    Adds `low[i]` zeros before and `high[i]` zeros after dimension i.
    ```mlir
    %dx = graph.pad %dy low [0, 8] high [0, 0] : tensor<2x8xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$input, DenseI64ArrayAttr:$low,
                       DenseI64ArrayAttr:$high);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$input `low` $low `high` $high attr-dict `:` type($input)";
}

def Graph_MaxGradOp : Graph_Op<"max_grad", [Graph_Fp32Precision, Graph_ReductionKernel, Pure,
    InferTypeOpAdaptor]> {
  let summary = "gradient of graph.max";
  let description = [{
    Routes each element of dy (shaped like `graph.max %x axes ...`) to the first maximum of its
    group in x (lowest row-major index); every other element of dx is 0.
    ```mlir
    %dx = graph.max_grad %x, %dy axes [1] : tensor<4x8xf32>, tensor<4xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$grad,
                       DenseI64ArrayAttr:$axes, UnitAttr:$keepdims);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $grad `axes` $axes (`keepdims` $keepdims^)? attr-dict `:` type($input) `,`
    type($grad)
  }];
}

def Graph_EmbeddingGradOp : Graph_Op<"embedding_grad", [Graph_Fp32Precision, Graph_StoresFp32,
    Graph_ReductionKernel, Pure]> {
  let summary = "gradient of graph.embedding with respect to the table";
  let description = [{
    Scatter-adds the rows of dy [..., D] into a zero table [V, D] at the rows named by the
    indices [...].
    ```mlir
    %dwte = graph.embedding_grad %tokens, %dx : tensor<4x32xi32>, tensor<4x32x64xf32>
        -> tensor<256x64xf32>
    ```
  }];
  let arguments = (ins Graph_IndexTensor:$indices, Graph_FloatTensor:$grad);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $indices `,` $grad attr-dict `:` type($indices) `,` type($grad) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Graph_LayerNormGradOp : Graph_Op<"layernorm_grad", [Graph_Fp32Precision,
    Graph_ReductionKernel, Pure, InferTypeOpAdaptor,
    AllTypesMatch<["input", "grad"]>]> {
  let summary = "gradients of graph.layernorm";
  let description = [{
    From x, gamma and dy: dx, dgamma and dbeta. With xhat = (x - mean) * rstd and
    g = dy * gamma: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), dgamma = sum of
    dy * xhat over the rows, dbeta = sum of dy over the rows. dx has the type of x and dy (bf16 or
    f16 with an f32 gamma when graph-assign-precision has the op read the reduced residual
    stream; it still computes in f32), dgamma and dbeta that of gamma.
    ```mlir
    %dx, %dg, %db = graph.layernorm_grad %x, %g, %dy {epsilon = 1.0e-05 : f64}
        : tensor<4x8xf32>, tensor<8xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$gamma,
                       Graph_FloatTensor:$grad, DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs Graph_FloatTensor:$input_grad, Graph_FloatTensor:$gamma_grad,
                      Graph_FloatTensor:$beta_grad);
  let assemblyFormat = [{
    $input `,` $gamma `,` $grad attr-dict `:` type($input) `,` type($gamma)
  }];
}

def Graph_RmsNormGradOp : Graph_Op<"rmsnorm_grad", [Graph_Fp32Precision, Graph_ReductionKernel,
    Pure, InferTypeOpAdaptor,
    AllTypesMatch<["input", "grad"]>]> {
  let summary = "gradients of graph.rmsnorm";
  let description = [{
    From x, gamma and dy: dx and dgamma. With r = 1 / sqrt(mean(x^2) + epsilon) and
    g = dy * gamma: dx = r * g - x * r^3 * mean(g * x), dgamma = sum of dy * x * r over the rows.
    Types as for graph.layernorm_grad.
    ```mlir
    %dx, %dg = graph.rmsnorm_grad %x, %g, %dy : tensor<4x8xf32>, tensor<8xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$input, Graph_FloatTensor:$gamma,
                       Graph_FloatTensor:$grad, DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs Graph_FloatTensor:$input_grad, Graph_FloatTensor:$gamma_grad);
  let assemblyFormat = [{
    $input `,` $gamma `,` $grad attr-dict `:` type($input) `,` type($gamma)
  }];
}

def Graph_SoftmaxGradOp : Graph_Op<"softmax_grad", [Graph_Fp32Precision, Graph_ReductionKernel,
    Pure, SameOperandsAndResultType]> {
  let summary = "gradient of graph.softmax from its result";
  let description = [{
    dx = y * (dy - sum(dy * y)) over the last axis, y being the softmax's result (a causal
    softmax has y = 0 where it masks, so the same formula holds).
    ```mlir
    %dx = graph.softmax_grad %y, %dy : tensor<2x4x8x8xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$result_value, Graph_FloatTensor:$grad);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = "$result_value `,` $grad attr-dict `:` type($result_value)";
  let hasVerifier = 1;
}

def Graph_AttentionGradOp : Graph_Op<"attention_grad", [Graph_ReducedPrecision,
    Graph_AttentionKernel, Pure, InferTypeOpAdaptor]> {
  let summary = "gradients of graph.attention";
  let description = [{
    Returns dq, dk, dv for the gradient dy of the attention's result, with
    P = softmax(scale * q k^T, causal): dv = P^T dy, dS = P * (dy v^T - rowsum(dy v^T * P)),
    dq = scale * dS k, dk = scale * dS^T q. `scale` is the forward's (default 1 / sqrt(Dh)).
    ```mlir
    %dq, %dk, %dv = graph.attention_grad %q, %k, %v, %dy causal
        : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>
    ```
    Optionally `saved(%o, %lse)`: the forward's output (the type of dy) and its f32 row
    log-sum-exp [..., T] (graph.attention `with_lse`). A backend then takes P = exp(scale q k^T -
    lse) and rowsum(dy v^T * P) = rowsum(dy * o) from them instead of running the forward again;
    the gradients are the same.
    ```mlir
    %dq, %dk, %dv = graph.attention_grad %q, %k, %v, %dy causal saved(%o, %lse
        : tensor<2x4x8x16xf32>, tensor<2x4x8xf32>)
        : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$query, Graph_FloatTensor:$key,
                       Graph_FloatTensor:$value, Graph_FloatTensor:$grad,
                       Variadic<Graph_FloatTensor>:$saved, UnitAttr:$causal,
                       OptionalAttr<F64Attr>:$scale);
  let results = (outs Graph_FloatTensor:$query_grad, Graph_FloatTensor:$key_grad,
                      Graph_FloatTensor:$value_grad);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $grad (`causal` $causal^)? (`scale` $scale^)?
    (`saved` `(` $saved^ `:` type($saved) `)`)? attr-dict
    `:` type($query) `,` type($key) `,` type($value) `,` type($grad)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The scale applied to q k^T: the attribute, or 1 / sqrt(head dimension).
    double getEffectiveScale();
    /// The forward's saved output and row log-sum-exp, or null without `saved`.
    ::mlir::Value getSavedOutput() { return getSaved().empty() ? nullptr : getSaved()[0]; }
    ::mlir::Value getSavedLse() { return getSaved().size() < 2 ? nullptr : getSaved()[1]; }
  }];
}

def Graph_QkvAttentionGradOp : Graph_Op<"qkv_attention_grad", [Graph_ReducedPrecision,
    Graph_AttentionKernel, Pure, InferTypeOpAdaptor]> {
  let summary = "gradient of graph.qkv_attention with respect to its packed operand";
  let description = [{
    The gradients of graph.attention_grad for every head, for the gradient dy ([..., T, H Dh])
    of a graph.qkv_attention's result, written side by side as the packed operand is: dq in
    columns [0, H Dh), dk in [H Dh, 2 H Dh), dv in [2 H Dh, 3 H Dh).
    ```mlir
    %dqkv = graph.qkv_attention_grad %qkv, %dy heads 4 causal
        : tensor<2x8x192xbf16>, tensor<2x8x64xbf16>
    ```
    Optionally `saved(%o, %lse)`, the forward's two results, as graph.attention_grad's.
    ```mlir
    %dqkv = graph.qkv_attention_grad %qkv, %dy heads 4 causal saved(%o, %lse
        : tensor<2x8x64xbf16>, tensor<2x4x8xf32>) : tensor<2x8x192xbf16>, tensor<2x8x64xbf16>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$qkv, Graph_FloatTensor:$grad,
                       Variadic<Graph_FloatTensor>:$saved,
                       ConfinedAttr<I64Attr, [IntPositive]>:$heads, UnitAttr:$causal,
                       OptionalAttr<F64Attr>:$scale);
  let results = (outs Graph_FloatTensor:$qkv_grad);
  let assemblyFormat = [{
    $qkv `,` $grad `heads` $heads (`causal` $causal^)? (`scale` $scale^)?
    (`saved` `(` $saved^ `:` type($saved) `)`)? attr-dict `:` type($qkv) `,` type($grad)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The scale applied to q k^T: the attribute, or 1 / sqrt(head dimension).
    double getEffectiveScale();
    /// The forward's saved output and row log-sum-exp, or null without `saved`.
    ::mlir::Value getSavedOutput() { return getSaved().empty() ? nullptr : getSaved()[0]; }
    ::mlir::Value getSavedLse() { return getSaved().size() < 2 ? nullptr : getSaved()[1]; }
  }];
}

def Graph_CrossEntropyGradOp : Graph_Op<"cross_entropy_grad", [Graph_Fp32Precision,
    Graph_ReductionKernel, Pure, InferTypeOpAdaptor]> {
  let summary = "gradient of graph.cross_entropy with respect to the logits";
  let description = [{
    dlogits = dloss * (softmax(logits) - onehot(label)) / n for each row not ignored (n = the
    number of such rows for `mean`, 1 for `sum`); ignored rows get 0.
    ```mlir
    %dlogits = graph.cross_entropy_grad %logits, %labels, %dloss {ignore_index = -100 : i64}
        : tensor<64x10xf32>, tensor<64xi32>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$logits, Graph_IndexTensor:$labels,
                       Graph_F32Scalar:$grad,
                       DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                       DefaultValuedAttr<Graph_LossReduction,
                                         "::ampc::graph::LossReduction::mean">:$reduction);
  let results = (outs Graph_FloatTensor:$result);
  let assemblyFormat = [{
    $logits `,` $labels `,` $grad attr-dict `:` type($logits) `,` type($labels)
  }];
}

//===----------------------------------------------------------------------------------------===//
// Training state and the optimizer step (written by graph-build-training)
//===----------------------------------------------------------------------------------------===//

def Graph_StateOp : Graph_Op<"state", [Symbol, HasParent<"ModelOp">]> {
  let summary = "persistent f32 training state: a gradient accumulator or optimizer moment";
  let description = [{
    Zero when training starts; kept across micro-steps and optimizer steps; written in place by
    graph.accumulate_grad and the optimizer ops only.
    ```mlir
    graph.state @wte.grad : tensor<256x64xf32>
    graph.state @wte.adam_m : tensor<256x64xf32>
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttrOf<Graph_F32Tensor>:$type);
  let assemblyFormat = "$sym_name `:` $type attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getType());
    }
  }];
}

def Graph_GradSeedOp : Graph_Op<"grad_seed", [Pure]> {
  let summary = "the gradient of the loss that starts the backward pass";
  let description = [{
    (scale or 1) / accum_steps: each of the accumulation steps' micro-batches contributes its
    loss divided by their number, so that the accumulated gradient is the full batch's. A loss
    scale (fp16 training) enters the backward pass here.
    ```mlir
    %seed = graph.grad_seed accum_steps 4
    %seed = graph.grad_seed scale %s accum_steps 4
    ```
  }];
  let arguments = (ins Optional<Graph_F32Scalar>:$scale, I64Attr:$accum_steps);
  let results = (outs Graph_F32Scalar:$result);
  let assemblyFormat = "(`scale` $scale^)? `accum_steps` $accum_steps attr-dict";
  let hasVerifier = 1;
}

def Graph_AccumulateGradOp : Graph_Op<"accumulate_grad", [Graph_AccumulateKernel, 
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "adds a parameter's gradient into its f32 accumulator";
  let description = [{
    accumulator += grad, in place (grad is converted to f32). With `unscale @scaler` (loss
    scaling) the gradient is divided by the scaler's current scale as it is added, and the
    scaler's non-finite flag is set if any unscaled element is inf or NaN: one pass over the
    data, no synchronisation with the host.
    ```mlir
    graph.accumulate_grad %dw into @w.grad : tensor<4x4xf32>
    graph.accumulate_grad %dw into @w.grad unscale @loss_scale : tensor<4x4xf16>
    ```
  }];
  let arguments = (ins Graph_FloatTensor:$grad, FlatSymbolRefAttr:$accumulator,
                       OptionalAttr<FlatSymbolRefAttr>:$unscale);
  let assemblyFormat = [{
    $grad `into` $accumulator (`unscale` $unscale^)? attr-dict `:` type($grad)
  }];
}

def Graph_GlobalNormOp : Graph_Op<"global_norm", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "the L2 norm of several state tensors taken together";
  let description = [{
    sqrt of the sum of squares of every element of the named states (the gradient norm that
    clipping uses).
    ```mlir
    %norm = graph.global_norm [@w.grad, @b.grad]
    ```
  }];
  let arguments = (ins FlatSymbolRefArrayAttr:$states);
  let results = (outs Graph_F32Scalar:$result);
  let assemblyFormat = "$states attr-dict";
}

def Graph_LrScheduleOp : Graph_Op<"lr_schedule", []> {
  let summary = "the learning rate of the current optimizer step";
  let description = [{
    At optimizer step s (from 0): lr * (s + 1) / warmup_steps while s < warmup_steps; then
    `constant` keeps lr, and `cosine` decays from lr to min_lr over [warmup_steps, decay_steps)
    as min_lr + (lr - min_lr) * (1 + cos(pi * progress)) / 2, staying at min_lr afterwards.
    decay_steps = 0 means the number of steps of the training run.
    ```mlir
    %lr = graph.lr_schedule cosine {lr = 6.0e-04 : f64, min_lr = 6.0e-05 : f64,
                                     warmup_steps = 100 : i64, decay_steps = 0 : i64}
    ```
  }];
  let arguments = (ins Graph_LrSchedule:$kind, F64Attr:$lr,
                       DefaultValuedAttr<F64Attr, "0.0">:$min_lr,
                       DefaultValuedAttr<I64Attr, "0">:$warmup_steps,
                       DefaultValuedAttr<I64Attr, "0">:$decay_steps);
  let results = (outs Graph_F32Scalar:$result);
  let assemblyFormat = "$kind attr-dict";
  let hasVerifier = 1;
}

def Graph_AdamWOp : Graph_Op<"adamw", [Graph_OptimizerKernel,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "one AdamW update of a parameter from its accumulated gradient";
  let description = [{
    With c = min(1, clip_norm / (grad_norm + 1e-6)) (1 when clip_norm is 0), g = c * grad and
    t = step + 1: param *= 1 - lr * weight_decay; m = beta1 m + (1 - beta1) g;
    v = beta2 v + (1 - beta2) g^2; param -= lr / (1 - beta1^t) * m / (sqrt(v / (1 - beta2^t))
    + eps); then the accumulator is zeroed. Everything is f32, in place. `copy @w.bf16`
    refreshes the parameter's reduced-precision copy from the updated weight (once per optimizer
    step). `skip_nonfinite @loss_scale` skips the update (not the zeroing) when the scaler saw a
    non-finite gradient, and then counts t in applied steps only, as torch does.
    ```mlir
    graph.adamw @w grad @w.grad moments @w.adam_m, @w.adam_v lr %lr grad_norm %norm
        {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64,
         clip_norm = 1.0 : f64}
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$param, FlatSymbolRefAttr:$grad,
                       FlatSymbolRefAttr:$first_moment, FlatSymbolRefAttr:$second_moment,
                       Graph_F32Scalar:$lr, Graph_F32Scalar:$grad_norm,
                       F64Attr:$beta1, F64Attr:$beta2, F64Attr:$eps, F64Attr:$weight_decay,
                       F64Attr:$clip_norm, OptionalAttr<FlatSymbolRefAttr>:$copy,
                       OptionalAttr<FlatSymbolRefAttr>:$skip_nonfinite);
  let assemblyFormat = [{
    $param `grad` $grad `moments` $first_moment `,` $second_moment `lr` $lr
    `grad_norm` $grad_norm (`copy` $copy^)? (`skip_nonfinite` $skip_nonfinite^)? attr-dict
  }];
  let hasVerifier = 1;
}

def Graph_SgdOp : Graph_Op<"sgd", [Graph_OptimizerKernel,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "one SGD-with-momentum update of a parameter from its accumulated gradient";
  let description = [{
    torch.optim.SGD semantics: g = c * grad + weight_decay * param (c as in graph.adamw);
    buf = momentum * buf + g; param -= lr * buf; then the accumulator is zeroed. `copy` and
    `skip_nonfinite` as for graph.adamw.
    ```mlir
    graph.sgd @w grad @w.grad momentum_buffer @w.momentum lr %lr grad_norm %norm
        {momentum = 0.9 : f64, weight_decay = 0.0 : f64, clip_norm = 0.0 : f64}
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$param, FlatSymbolRefAttr:$grad,
                       FlatSymbolRefAttr:$momentum_buffer, Graph_F32Scalar:$lr,
                       Graph_F32Scalar:$grad_norm, F64Attr:$momentum, F64Attr:$weight_decay,
                       F64Attr:$clip_norm, OptionalAttr<FlatSymbolRefAttr>:$copy,
                       OptionalAttr<FlatSymbolRefAttr>:$skip_nonfinite);
  let assemblyFormat = [{
    $param `grad` $grad `momentum_buffer` $momentum_buffer `lr` $lr `grad_norm` $grad_norm
    (`copy` $copy^)? (`skip_nonfinite` $skip_nonfinite^)? attr-dict
  }];
  let hasVerifier = 1;
}


//===----------------------------------------------------------------------------------------===//
// Mixed precision and loss scaling (written by graph-assign-precision and
// graph-insert-loss-scaling)
//===----------------------------------------------------------------------------------------===//

def Graph_ParamCopyOp : Graph_Op<"param_copy", [Symbol, HasParent<"ModelOp">,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "the reduced-precision copy of a parameter that the micro step reads";
  let description = [{
    Made from the f32 master weight when training starts and refreshed by the optimizer update
    (`copy` on graph.adamw / graph.sgd), so the conversion happens once per optimizer step rather
    than once per micro step. Read with graph.get_param.
    ```mlir
    graph.param_copy @w.bf16 : tensor<64x192xbf16> of @w
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttrOf<Graph_FloatTensor>:$type,
                       FlatSymbolRefAttr:$source);
  let assemblyFormat = "$sym_name `:` $type `of` $source attr-dict";
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getType());
    }
  }];
}

def Graph_LossScaleOp : Graph_Op<"loss_scale", [Symbol, HasParent<"ModelOp">]> {
  let summary = "the loss scaler: its settings and its state";
  let description = [{
    `dynamic` follows torch.amp.GradScaler: the scale starts at initial_scale, is multiplied by
    backoff_factor (and the optimizer step skipped) when a gradient is inf or NaN, and by
    growth_factor after growth_interval consecutive finite steps; it never falls below
    min_scale (0: no floor). `static` keeps initial_scale (a non-finite step is still skipped).
    The state (scale, finite-step count, non-finite flag, applied steps) lives with the training
    state.
    ```mlir
    graph.loss_scale @loss_scale dynamic {initial_scale = 65536.0 : f64, growth_factor = 2.0 : f64,
        backoff_factor = 0.5 : f64, growth_interval = 2000 : i64, min_scale = 1.0 : f64}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, Graph_LossScaleMode:$mode,
                       DefaultValuedAttr<F64Attr, "65536.0">:$initial_scale,
                       DefaultValuedAttr<F64Attr, "2.0">:$growth_factor,
                       DefaultValuedAttr<F64Attr, "0.5">:$backoff_factor,
                       DefaultValuedAttr<I64Attr, "2000">:$growth_interval,
                       DefaultValuedAttr<F64Attr, "0.0">:$min_scale);
  let assemblyFormat = "$sym_name $mode attr-dict";
  let hasVerifier = 1;
}

def Graph_GetLossScaleOp : Graph_Op<"get_loss_scale", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "reads the scaler's current scale";
  let description = [{
    ```mlir
    %scale = graph.get_loss_scale @loss_scale
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$scaler);
  let results = (outs Graph_F32Scalar:$result);
  let assemblyFormat = "$scaler attr-dict";
}

def Graph_UpdateLossScaleOp : Graph_Op<"update_loss_scale", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "ends an optimizer step: counts it if applied, updates the scale, clears the flag";
  let description = [{
    ```mlir
    graph.update_loss_scale @loss_scale
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$scaler);
  let assemblyFormat = "$scaler attr-dict";
}

#endif // AMPC_DIALECTS_GRAPH_GRAPHTRAININGOPS_TD
