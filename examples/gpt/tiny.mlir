// tiny.mlir - a GPT-2-style decoder, written by make_gpt.py; do not edit by hand.
//
// L = 2 layers, d = 64, H = 4 heads of Dh = 16, V = 256, T = 32, B = 4.
// 118,528 parameters (V*d + T*d + L*(12 d^2 + 13 d) + 2d; the output head is wte).
// The GPT of ../shared/bench/torch_baseline.py, at a size of its own.
// Regenerate: python3 examples/gpt/make_gpt.py tiny

graph.model @tiny {
  // Embeddings: token table (also the output head) and learned positions.
  graph.param @wte : tensor<256x64xf32> init #graph.normal<std = 0.02>
  graph.param @wpe : tensor<32x64xf32> init #graph.normal<std = 0.02>
  // Layer 0.
  graph.param @h0.ln1.g : tensor<64xf32> init #graph.ones
  graph.param @h0.ln1.b : tensor<64xf32> init #graph.zeros
  graph.param @h0.attn.qkv.w : tensor<64x192xf32> init #graph.normal<std = 0.02>
  graph.param @h0.attn.qkv.b : tensor<192xf32> init #graph.zeros
  graph.param @h0.attn.proj.w : tensor<64x64xf32> init #graph.normal<std = 0.02>
  graph.param @h0.attn.proj.b : tensor<64xf32> init #graph.zeros
  graph.param @h0.ln2.g : tensor<64xf32> init #graph.ones
  graph.param @h0.ln2.b : tensor<64xf32> init #graph.zeros
  graph.param @h0.mlp.fc.w : tensor<64x256xf32> init #graph.normal<std = 0.02>
  graph.param @h0.mlp.fc.b : tensor<256xf32> init #graph.zeros
  graph.param @h0.mlp.fc2.w : tensor<256x64xf32> init #graph.normal<std = 0.02>
  graph.param @h0.mlp.fc2.b : tensor<64xf32> init #graph.zeros
  // Layer 1.
  graph.param @h1.ln1.g : tensor<64xf32> init #graph.ones
  graph.param @h1.ln1.b : tensor<64xf32> init #graph.zeros
  graph.param @h1.attn.qkv.w : tensor<64x192xf32> init #graph.normal<std = 0.02>
  graph.param @h1.attn.qkv.b : tensor<192xf32> init #graph.zeros
  graph.param @h1.attn.proj.w : tensor<64x64xf32> init #graph.normal<std = 0.02>
  graph.param @h1.attn.proj.b : tensor<64xf32> init #graph.zeros
  graph.param @h1.ln2.g : tensor<64xf32> init #graph.ones
  graph.param @h1.ln2.b : tensor<64xf32> init #graph.zeros
  graph.param @h1.mlp.fc.w : tensor<64x256xf32> init #graph.normal<std = 0.02>
  graph.param @h1.mlp.fc.b : tensor<256xf32> init #graph.zeros
  graph.param @h1.mlp.fc2.w : tensor<256x64xf32> init #graph.normal<std = 0.02>
  graph.param @h1.mlp.fc2.b : tensor<64xf32> init #graph.zeros
  // Final LayerNorm.
  graph.param @ln_f.g : tensor<64xf32> init #graph.ones
  graph.param @ln_f.b : tensor<64xf32> init #graph.zeros

  // A batch of token ids and, for each position, the id of the token that follows.
  graph.input @tokens : tensor<4x32xi32>
  graph.input @targets : tensor<4x32xi32>

  // One pre-LayerNorm transformer block, called once per layer with that layer's
  // parameters. Attention runs on heads [B, H, T, Dh]: q, k, v are split from one
  // matmul, and each head reads its own slice of Dh features.
  func.func private @block(%x: tensor<4x32x64xf32>,
                           %ln1.g: tensor<64xf32>, %ln1.b: tensor<64xf32>,
                           %attn.qkv.w: tensor<64x192xf32>, %attn.qkv.b: tensor<192xf32>,
                           %attn.proj.w: tensor<64x64xf32>, %attn.proj.b: tensor<64xf32>,
                           %ln2.g: tensor<64xf32>, %ln2.b: tensor<64xf32>,
                           %mlp.fc.w: tensor<64x256xf32>, %mlp.fc.b: tensor<256xf32>,
                           %mlp.fc2.w: tensor<256x64xf32>, %mlp.fc2.b: tensor<64xf32>)
      -> tensor<4x32x64xf32> {
    // Attention sub-layer.
    %a = graph.layernorm %x, %ln1.g, %ln1.b : tensor<4x32x64xf32>, tensor<64xf32>, tensor<64xf32>
    %qkv0 = graph.matmul %a, %attn.qkv.w : tensor<4x32x64xf32>, tensor<64x192xf32>
    %qkv = graph.add %qkv0, %attn.qkv.b : tensor<4x32x192xf32>, tensor<192xf32>
    %q0, %k0, %v0 = graph.split %qkv axis 2 sizes [64, 64, 64] : tensor<4x32x192xf32>
    %q1 = graph.reshape %q0 : tensor<4x32x64xf32> -> tensor<4x32x4x16xf32>
    %q = graph.transpose %q1 [0, 2, 1, 3] : tensor<4x32x4x16xf32>
    %k1 = graph.reshape %k0 : tensor<4x32x64xf32> -> tensor<4x32x4x16xf32>
    %k = graph.transpose %k1 [0, 2, 1, 3] : tensor<4x32x4x16xf32>
    %v1 = graph.reshape %v0 : tensor<4x32x64xf32> -> tensor<4x32x4x16xf32>
    %v = graph.transpose %v1 [0, 2, 1, 3] : tensor<4x32x4x16xf32>
    %y0 = graph.attention %q, %k, %v causal
        : tensor<4x4x32x16xf32>, tensor<4x4x32x16xf32>, tensor<4x4x32x16xf32>
    // Heads back side by side, output projection, residual.
    %y1 = graph.transpose %y0 [0, 2, 1, 3] : tensor<4x4x32x16xf32>
    %y2 = graph.reshape %y1 : tensor<4x32x4x16xf32> -> tensor<4x32x64xf32>
    %y3 = graph.matmul %y2, %attn.proj.w : tensor<4x32x64xf32>, tensor<64x64xf32>
    %y = graph.add %y3, %attn.proj.b : tensor<4x32x64xf32>, tensor<64xf32>
    %x1 = graph.add %x, %y : tensor<4x32x64xf32>, tensor<4x32x64xf32>

    // MLP sub-layer: d -> 4d -> d with tanh-approximated GELU, residual.
    %m = graph.layernorm %x1, %ln2.g, %ln2.b : tensor<4x32x64xf32>, tensor<64xf32>, tensor<64xf32>
    %f0 = graph.matmul %m, %mlp.fc.w : tensor<4x32x64xf32>, tensor<64x256xf32>
    %f1 = graph.add %f0, %mlp.fc.b : tensor<4x32x256xf32>, tensor<256xf32>
    %f = graph.gelu tanh %f1 : tensor<4x32x256xf32>
    %g0 = graph.matmul %f, %mlp.fc2.w : tensor<4x32x256xf32>, tensor<256x64xf32>
    %g = graph.add %g0, %mlp.fc2.b : tensor<4x32x64xf32>, tensor<64xf32>
    %x2 = graph.add %x1, %g : tensor<4x32x64xf32>, tensor<4x32x64xf32>
    return %x2 : tensor<4x32x64xf32>
  }

  func.func @forward() {
    %tokens = graph.get_input @tokens : tensor<4x32xi32>
    %targets = graph.get_input @targets : tensor<4x32xi32>

    // Token plus position embedding; wpe [T, d] broadcasts over the batch.
    %wte = graph.get_param @wte : tensor<256x64xf32>
    %wpe = graph.get_param @wpe : tensor<32x64xf32>
    %tok = graph.embedding %wte[%tokens] : tensor<256x64xf32>, tensor<4x32xi32>
    %x0 = graph.add %tok, %wpe : tensor<4x32x64xf32>, tensor<32x64xf32>

    // Layer 0.
    %h0.ln1.g = graph.get_param @h0.ln1.g : tensor<64xf32>
    %h0.ln1.b = graph.get_param @h0.ln1.b : tensor<64xf32>
    %h0.attn.qkv.w = graph.get_param @h0.attn.qkv.w : tensor<64x192xf32>
    %h0.attn.qkv.b = graph.get_param @h0.attn.qkv.b : tensor<192xf32>
    %h0.attn.proj.w = graph.get_param @h0.attn.proj.w : tensor<64x64xf32>
    %h0.attn.proj.b = graph.get_param @h0.attn.proj.b : tensor<64xf32>
    %h0.ln2.g = graph.get_param @h0.ln2.g : tensor<64xf32>
    %h0.ln2.b = graph.get_param @h0.ln2.b : tensor<64xf32>
    %h0.mlp.fc.w = graph.get_param @h0.mlp.fc.w : tensor<64x256xf32>
    %h0.mlp.fc.b = graph.get_param @h0.mlp.fc.b : tensor<256xf32>
    %h0.mlp.fc2.w = graph.get_param @h0.mlp.fc2.w : tensor<256x64xf32>
    %h0.mlp.fc2.b = graph.get_param @h0.mlp.fc2.b : tensor<64xf32>
    %x1 = func.call @block(%x0,
        %h0.ln1.g, %h0.ln1.b, %h0.attn.qkv.w, %h0.attn.qkv.b,
        %h0.attn.proj.w, %h0.attn.proj.b, %h0.ln2.g, %h0.ln2.b,
        %h0.mlp.fc.w, %h0.mlp.fc.b, %h0.mlp.fc2.w, %h0.mlp.fc2.b)
        : (tensor<4x32x64xf32>,
           tensor<64xf32>, tensor<64xf32>, tensor<64x192xf32>, tensor<192xf32>,
           tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>,
           tensor<64x256xf32>, tensor<256xf32>, tensor<256x64xf32>, tensor<64xf32>)
        -> tensor<4x32x64xf32>

    // Layer 1.
    %h1.ln1.g = graph.get_param @h1.ln1.g : tensor<64xf32>
    %h1.ln1.b = graph.get_param @h1.ln1.b : tensor<64xf32>
    %h1.attn.qkv.w = graph.get_param @h1.attn.qkv.w : tensor<64x192xf32>
    %h1.attn.qkv.b = graph.get_param @h1.attn.qkv.b : tensor<192xf32>
    %h1.attn.proj.w = graph.get_param @h1.attn.proj.w : tensor<64x64xf32>
    %h1.attn.proj.b = graph.get_param @h1.attn.proj.b : tensor<64xf32>
    %h1.ln2.g = graph.get_param @h1.ln2.g : tensor<64xf32>
    %h1.ln2.b = graph.get_param @h1.ln2.b : tensor<64xf32>
    %h1.mlp.fc.w = graph.get_param @h1.mlp.fc.w : tensor<64x256xf32>
    %h1.mlp.fc.b = graph.get_param @h1.mlp.fc.b : tensor<256xf32>
    %h1.mlp.fc2.w = graph.get_param @h1.mlp.fc2.w : tensor<256x64xf32>
    %h1.mlp.fc2.b = graph.get_param @h1.mlp.fc2.b : tensor<64xf32>
    %x2 = func.call @block(%x1,
        %h1.ln1.g, %h1.ln1.b, %h1.attn.qkv.w, %h1.attn.qkv.b,
        %h1.attn.proj.w, %h1.attn.proj.b, %h1.ln2.g, %h1.ln2.b,
        %h1.mlp.fc.w, %h1.mlp.fc.b, %h1.mlp.fc2.w, %h1.mlp.fc2.b)
        : (tensor<4x32x64xf32>,
           tensor<64xf32>, tensor<64xf32>, tensor<64x192xf32>, tensor<192xf32>,
           tensor<64x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>,
           tensor<64x256xf32>, tensor<256xf32>, tensor<256x64xf32>, tensor<64xf32>)
        -> tensor<4x32x64xf32>

    // Final LayerNorm; the output head is wte itself: logits = h @ wte^T.
    %ln_f.g = graph.get_param @ln_f.g : tensor<64xf32>
    %ln_f.b = graph.get_param @ln_f.b : tensor<64xf32>
    %h = graph.layernorm %x2, %ln_f.g, %ln_f.b : tensor<4x32x64xf32>, tensor<64xf32>, tensor<64xf32>
    %logits = graph.matmul %h, %wte transpose_rhs : tensor<4x32x64xf32>, tensor<256x64xf32>
    %loss = graph.cross_entropy %logits, %targets : tensor<4x32x256xf32>, tensor<4x32xi32>
    graph.loss %loss : tensor<f32>
    return
  }
}
