// gpt124m.mlir - a GPT-2-style decoder, written by make_gpt.py; do not edit by hand.
//
// L = 12 layers, d = 768, H = 12 heads of Dh = 64, V = 50304, T = 1024, B = 16.
// 124,475,904 parameters (V*d + T*d + L*(12 d^2 + 13 d) + 2d; the output head is wte).
// Same shapes and initialisation as gpt124m in ../shared/bench/torch_baseline.py.
// Regenerate: python3 examples/gpt/make_gpt.py gpt124m

graph.model @gpt124m {
  // Embeddings: token table (also the output head) and learned positions.
  graph.param @wte : tensor<50304x768xf32> init #graph.normal<std = 0.02>
  graph.param @wpe : tensor<1024x768xf32> init #graph.normal<std = 0.02>
  // Layer 0.
  graph.param @h0.ln1.g : tensor<768xf32> init #graph.ones
  graph.param @h0.ln1.b : tensor<768xf32> init #graph.zeros
  graph.param @h0.attn.qkv.w : tensor<768x2304xf32> init #graph.normal<std = 0.02>
  graph.param @h0.attn.qkv.b : tensor<2304xf32> init #graph.zeros
  graph.param @h0.attn.proj.w : tensor<768x768xf32> init #graph.normal<std = 0.02>
  graph.param @h0.attn.proj.b : tensor<768xf32> init #graph.zeros
  graph.param @h0.ln2.g : tensor<768xf32> init #graph.ones
  graph.param @h0.ln2.b : tensor<768xf32> init #graph.zeros
  graph.param @h0.mlp.fc.w : tensor<768x3072xf32> init #graph.normal<std = 0.02>
  graph.param @h0.mlp.fc.b : tensor<3072xf32> init #graph.zeros
  graph.param @h0.mlp.fc2.w : tensor<3072x768xf32> init #graph.normal<std = 0.02>
  graph.param @h0.mlp.fc2.b : tensor<768xf32> init #graph.zeros
  // Layer 1.
  graph.param @h1.ln1.g : tensor<768xf32> init #graph.ones
  graph.param @h1.ln1.b : tensor<768xf32> init #graph.zeros
  graph.param @h1.attn.qkv.w : tensor<768x2304xf32> init #graph.normal<std = 0.02>
  graph.param @h1.attn.qkv.b : tensor<2304xf32> init #graph.zeros
  graph.param @h1.attn.proj.w : tensor<768x768xf32> init #graph.normal<std = 0.02>
  graph.param @h1.attn.proj.b : tensor<768xf32> init #graph.zeros
  graph.param @h1.ln2.g : tensor<768xf32> init #graph.ones
  graph.param @h1.ln2.b : tensor<768xf32> init #graph.zeros
  graph.param @h1.mlp.fc.w : tensor<768x3072xf32> init #graph.normal<std = 0.02>
  graph.param @h1.mlp.fc.b : tensor<3072xf32> init #graph.zeros
  graph.param @h1.mlp.fc2.w : tensor<3072x768xf32> init #graph.normal<std = 0.02>
  graph.param @h1.mlp.fc2.b : tensor<768xf32> init #graph.zeros
  // Layer 2.
  graph.param @h2.ln1.g : tensor<768xf32> init #graph.ones
  graph.param @h2.ln1.b : tensor<768xf32> init #graph.zeros
  graph.param @h2.attn.qkv.w : tensor<768x2304xf32> init #graph.normal<std = 0.02>
  graph.param @h2.attn.qkv.b : tensor<2304xf32> init #graph.zeros
  graph.param @h2.attn.proj.w : tensor<768x768xf32> init #graph.normal<std = 0.02>
  graph.param @h2.attn.proj.b : tensor<768xf32> init #graph.zeros
  graph.param @h2.ln2.g : tensor<768xf32> init #graph.ones
  graph.param @h2.ln2.b : tensor<768xf32> init #graph.zeros
  graph.param @h2.mlp.fc.w : tensor<768x3072xf32> init #graph.normal<std = 0.02>
  graph.param @h2.mlp.fc.b : tensor<3072xf32> init #graph.zeros
  graph.param @h2.mlp.fc2.w : tensor<3072x768xf32> init #graph.normal<std = 0.02>
  graph.param @h2.mlp.fc2.b : tensor<768xf32> init #graph.zeros
  // Layer 3.
  graph.param @h3.ln1.g : tensor<768xf32> init #graph.ones
  graph.param @h3.ln1.b : tensor<768xf32> init #graph.zeros
  graph.param @h3.attn.qkv.w : tensor<768x2304xf32> init #graph.normal<std = 0.02>
  graph.param @h3.attn.qkv.b : tensor<2304xf32> init #graph.zeros
  graph.param @h3.attn.proj.w : tensor<768x768xf32> init #graph.normal<std = 0.02>
  graph.param @h3.attn.proj.b : tensor<768xf32> init #graph.zeros
  graph.param @h3.ln2.g : tensor<768xf32> init #graph.ones
  graph.param @h3.ln2.b : tensor<768xf32> init #graph.zeros
  graph.param @h3.mlp.fc.w : tensor<768x3072xf32> init #graph.normal<std = 0.02>
  graph.param @h3.mlp.fc.b : tensor<3072xf32> init #graph.zeros
  graph.param @h3.mlp.fc2.w : tensor<3072x768xf32> init #graph.normal<std = 0.02>
  graph.param @h3.mlp.fc2.b : tensor<768xf32> init #graph.zeros
  // Layer 4.
  graph.param @h4.ln1.g : tensor<768xf32> init #graph.ones
  graph.param @h4.ln1.b : tensor<768xf32> init #graph.zeros
  graph.param @h4.attn.qkv.w : tensor<768x2304xf32> init #graph.normal<std = 0.02>
  graph.param @h4.attn.qkv.b : tensor<2304xf32> init #graph.zeros
  graph.param @h4.attn.proj.w : tensor<768x768xf32> init #graph.normal<std = 0.02>
  graph.param @h4.attn.proj.b : tensor<768xf32> init #graph.zeros
  graph.param @h4.ln2.g : tensor<768xf32> init #graph.ones
  graph.param @h4.ln2.b : tensor<768xf32> init #graph.zeros
  graph.param @h4.mlp.fc.w : tensor<768x3072xf32> init #graph.normal<std = 0.02>
  graph.param @h4.mlp.fc.b : tensor<3072xf32> init #graph.zeros
  graph.param @h4.mlp.fc2.w : tensor<3072x768xf32> init #graph.normal<std = 0.02>
  graph.param @h4.mlp.fc2.b : tensor<768xf32> init #graph.zeros
  // Layer 5.
  graph.param @h5.ln1.g : tensor<768xf32> init #graph.ones
  graph.param @h5.ln1.b : tensor<768xf32> init #graph.zeros
  graph.param @h5.attn.qkv.w : tensor<768x2304xf32> init #graph.normal<std = 0.02>
  graph.param @h5.attn.qkv.b : tensor<2304xf32> init #graph.zeros
  graph.param @h5.attn.proj.w : tensor<768x768xf32> init #graph.normal<std = 0.02>
  graph.param @h5.attn.proj.b : tensor<768xf32> init #graph.zeros
  graph.param @h5.ln2.g : tensor<768xf32> init #graph.ones
  graph.param @h5.ln2.b : tensor<768xf32> init #graph.zeros
  graph.param @h5.mlp.fc.w : tensor<768x3072xf32> init #graph.normal<std = 0.02>
  graph.param @h5.mlp.fc.b : tensor<3072xf32> init #graph.zeros
  graph.param @h5.mlp.fc2.w : tensor<3072x768xf32> init #graph.normal<std = 0.02>
  graph.param @h5.mlp.fc2.b : tensor<768xf32> init #graph.zeros
  // Layer 6.
  graph.param @h6.ln1.g : tensor<768xf32> init #graph.ones
  graph.param @h6.ln1.b : tensor<768xf32> init #graph.zeros
  graph.param @h6.attn.qkv.w : tensor<768x2304xf32> init #graph.normal<std = 0.02>
  graph.param @h6.attn.qkv.b : tensor<2304xf32> init #graph.zeros
  graph.param @h6.attn.proj.w : tensor<768x768xf32> init #graph.normal<std = 0.02>
  graph.param @h6.attn.proj.b : tensor<768xf32> init #graph.zeros
  graph.param @h6.ln2.g : tensor<768xf32> init #graph.ones
  graph.param @h6.ln2.b : tensor<768xf32> init #graph.zeros
  graph.param @h6.mlp.fc.w : tensor<768x3072xf32> init #graph.normal<std = 0.02>
  graph.param @h6.mlp.fc.b : tensor<3072xf32> init #graph.zeros
  graph.param @h6.mlp.fc2.w : tensor<3072x768xf32> init #graph.normal<std = 0.02>
  graph.param @h6.mlp.fc2.b : tensor<768xf32> init #graph.zeros
  // Layer 7.
  graph.param @h7.ln1.g : tensor<768xf32> init #graph.ones
  graph.param @h7.ln1.b : tensor<768xf32> init #graph.zeros
  graph.param @h7.attn.qkv.w : tensor<768x2304xf32> init #graph.normal<std = 0.02>
  graph.param @h7.attn.qkv.b : tensor<2304xf32> init #graph.zeros
  graph.param @h7.attn.proj.w : tensor<768x768xf32> init #graph.normal<std = 0.02>
  graph.param @h7.attn.proj.b : tensor<768xf32> init #graph.zeros
  graph.param @h7.ln2.g : tensor<768xf32> init #graph.ones
  graph.param @h7.ln2.b : tensor<768xf32> init #graph.zeros
  graph.param @h7.mlp.fc.w : tensor<768x3072xf32> init #graph.normal<std = 0.02>
  graph.param @h7.mlp.fc.b : tensor<3072xf32> init #graph.zeros
  graph.param @h7.mlp.fc2.w : tensor<3072x768xf32> init #graph.normal<std = 0.02>
  graph.param @h7.mlp.fc2.b : tensor<768xf32> init #graph.zeros
  // Layer 8.
  graph.param @h8.ln1.g : tensor<768xf32> init #graph.ones
  graph.param @h8.ln1.b : tensor<768xf32> init #graph.zeros
  graph.param @h8.attn.qkv.w : tensor<768x2304xf32> init #graph.normal<std = 0.02>
  graph.param @h8.attn.qkv.b : tensor<2304xf32> init #graph.zeros
  graph.param @h8.attn.proj.w : tensor<768x768xf32> init #graph.normal<std = 0.02>
  graph.param @h8.attn.proj.b : tensor<768xf32> init #graph.zeros
  graph.param @h8.ln2.g : tensor<768xf32> init #graph.ones
  graph.param @h8.ln2.b : tensor<768xf32> init #graph.zeros
  graph.param @h8.mlp.fc.w : tensor<768x3072xf32> init #graph.normal<std = 0.02>
  graph.param @h8.mlp.fc.b : tensor<3072xf32> init #graph.zeros
  graph.param @h8.mlp.fc2.w : tensor<3072x768xf32> init #graph.normal<std = 0.02>
  graph.param @h8.mlp.fc2.b : tensor<768xf32> init #graph.zeros
  // Layer 9.
  graph.param @h9.ln1.g : tensor<768xf32> init #graph.ones
  graph.param @h9.ln1.b : tensor<768xf32> init #graph.zeros
  graph.param @h9.attn.qkv.w : tensor<768x2304xf32> init #graph.normal<std = 0.02>
  graph.param @h9.attn.qkv.b : tensor<2304xf32> init #graph.zeros
  graph.param @h9.attn.proj.w : tensor<768x768xf32> init #graph.normal<std = 0.02>
  graph.param @h9.attn.proj.b : tensor<768xf32> init #graph.zeros
  graph.param @h9.ln2.g : tensor<768xf32> init #graph.ones
  graph.param @h9.ln2.b : tensor<768xf32> init #graph.zeros
  graph.param @h9.mlp.fc.w : tensor<768x3072xf32> init #graph.normal<std = 0.02>
  graph.param @h9.mlp.fc.b : tensor<3072xf32> init #graph.zeros
  graph.param @h9.mlp.fc2.w : tensor<3072x768xf32> init #graph.normal<std = 0.02>
  graph.param @h9.mlp.fc2.b : tensor<768xf32> init #graph.zeros
  // Layer 10.
  graph.param @h10.ln1.g : tensor<768xf32> init #graph.ones
  graph.param @h10.ln1.b : tensor<768xf32> init #graph.zeros
  graph.param @h10.attn.qkv.w : tensor<768x2304xf32> init #graph.normal<std = 0.02>
  graph.param @h10.attn.qkv.b : tensor<2304xf32> init #graph.zeros
  graph.param @h10.attn.proj.w : tensor<768x768xf32> init #graph.normal<std = 0.02>
  graph.param @h10.attn.proj.b : tensor<768xf32> init #graph.zeros
  graph.param @h10.ln2.g : tensor<768xf32> init #graph.ones
  graph.param @h10.ln2.b : tensor<768xf32> init #graph.zeros
  graph.param @h10.mlp.fc.w : tensor<768x3072xf32> init #graph.normal<std = 0.02>
  graph.param @h10.mlp.fc.b : tensor<3072xf32> init #graph.zeros
  graph.param @h10.mlp.fc2.w : tensor<3072x768xf32> init #graph.normal<std = 0.02>
  graph.param @h10.mlp.fc2.b : tensor<768xf32> init #graph.zeros
  // Layer 11.
  graph.param @h11.ln1.g : tensor<768xf32> init #graph.ones
  graph.param @h11.ln1.b : tensor<768xf32> init #graph.zeros
  graph.param @h11.attn.qkv.w : tensor<768x2304xf32> init #graph.normal<std = 0.02>
  graph.param @h11.attn.qkv.b : tensor<2304xf32> init #graph.zeros
  graph.param @h11.attn.proj.w : tensor<768x768xf32> init #graph.normal<std = 0.02>
  graph.param @h11.attn.proj.b : tensor<768xf32> init #graph.zeros
  graph.param @h11.ln2.g : tensor<768xf32> init #graph.ones
  graph.param @h11.ln2.b : tensor<768xf32> init #graph.zeros
  graph.param @h11.mlp.fc.w : tensor<768x3072xf32> init #graph.normal<std = 0.02>
  graph.param @h11.mlp.fc.b : tensor<3072xf32> init #graph.zeros
  graph.param @h11.mlp.fc2.w : tensor<3072x768xf32> init #graph.normal<std = 0.02>
  graph.param @h11.mlp.fc2.b : tensor<768xf32> init #graph.zeros
  // Final LayerNorm.
  graph.param @ln_f.g : tensor<768xf32> init #graph.ones
  graph.param @ln_f.b : tensor<768xf32> init #graph.zeros

  // A batch of token ids and, for each position, the id of the token that follows.
  graph.input @tokens : tensor<16x1024xi32>
  graph.input @targets : tensor<16x1024xi32>

  // One pre-LayerNorm transformer block, called once per layer with that layer's
  // parameters. Attention runs on heads [B, H, T, Dh]: q, k, v are split from one
  // matmul, and each head reads its own slice of Dh features.
  func.func private @block(%x: tensor<16x1024x768xf32>,
                           %ln1.g: tensor<768xf32>, %ln1.b: tensor<768xf32>,
                           %attn.qkv.w: tensor<768x2304xf32>, %attn.qkv.b: tensor<2304xf32>,
                           %attn.proj.w: tensor<768x768xf32>, %attn.proj.b: tensor<768xf32>,
                           %ln2.g: tensor<768xf32>, %ln2.b: tensor<768xf32>,
                           %mlp.fc.w: tensor<768x3072xf32>, %mlp.fc.b: tensor<3072xf32>,
                           %mlp.fc2.w: tensor<3072x768xf32>, %mlp.fc2.b: tensor<768xf32>)
      -> tensor<16x1024x768xf32> {
    // Attention sub-layer.
    %a = graph.layernorm %x, %ln1.g, %ln1.b
        : tensor<16x1024x768xf32>, tensor<768xf32>, tensor<768xf32>
    %qkv0 = graph.matmul %a, %attn.qkv.w : tensor<16x1024x768xf32>, tensor<768x2304xf32>
    %qkv = graph.add %qkv0, %attn.qkv.b : tensor<16x1024x2304xf32>, tensor<2304xf32>
    %q0, %k0, %v0 = graph.split %qkv axis 2 sizes [768, 768, 768] : tensor<16x1024x2304xf32>
    %q1 = graph.reshape %q0 : tensor<16x1024x768xf32> -> tensor<16x1024x12x64xf32>
    %q = graph.transpose %q1 [0, 2, 1, 3] : tensor<16x1024x12x64xf32>
    %k1 = graph.reshape %k0 : tensor<16x1024x768xf32> -> tensor<16x1024x12x64xf32>
    %k = graph.transpose %k1 [0, 2, 1, 3] : tensor<16x1024x12x64xf32>
    %v1 = graph.reshape %v0 : tensor<16x1024x768xf32> -> tensor<16x1024x12x64xf32>
    %v = graph.transpose %v1 [0, 2, 1, 3] : tensor<16x1024x12x64xf32>
    %y0 = graph.attention %q, %k, %v causal
        : tensor<16x12x1024x64xf32>, tensor<16x12x1024x64xf32>, tensor<16x12x1024x64xf32>
    // Heads back side by side, output projection, residual.
    %y1 = graph.transpose %y0 [0, 2, 1, 3] : tensor<16x12x1024x64xf32>
    %y2 = graph.reshape %y1 : tensor<16x1024x12x64xf32> -> tensor<16x1024x768xf32>
    %y3 = graph.matmul %y2, %attn.proj.w : tensor<16x1024x768xf32>, tensor<768x768xf32>
    %y = graph.add %y3, %attn.proj.b : tensor<16x1024x768xf32>, tensor<768xf32>
    %x1 = graph.add %x, %y : tensor<16x1024x768xf32>, tensor<16x1024x768xf32>

    // MLP sub-layer: d -> 4d -> d with tanh-approximated GELU, residual.
    %m = graph.layernorm %x1, %ln2.g, %ln2.b
        : tensor<16x1024x768xf32>, tensor<768xf32>, tensor<768xf32>
    %f0 = graph.matmul %m, %mlp.fc.w : tensor<16x1024x768xf32>, tensor<768x3072xf32>
    %f1 = graph.add %f0, %mlp.fc.b : tensor<16x1024x3072xf32>, tensor<3072xf32>
    %f = graph.gelu tanh %f1 : tensor<16x1024x3072xf32>
    %g0 = graph.matmul %f, %mlp.fc2.w : tensor<16x1024x3072xf32>, tensor<3072x768xf32>
    %g = graph.add %g0, %mlp.fc2.b : tensor<16x1024x768xf32>, tensor<768xf32>
    %x2 = graph.add %x1, %g : tensor<16x1024x768xf32>, tensor<16x1024x768xf32>
    return %x2 : tensor<16x1024x768xf32>
  }

  func.func @forward() {
    %tokens = graph.get_input @tokens : tensor<16x1024xi32>
    %targets = graph.get_input @targets : tensor<16x1024xi32>

    // Token plus position embedding; wpe [T, d] broadcasts over the batch.
    %wte = graph.get_param @wte : tensor<50304x768xf32>
    %wpe = graph.get_param @wpe : tensor<1024x768xf32>
    %tok = graph.embedding %wte[%tokens] : tensor<50304x768xf32>, tensor<16x1024xi32>
    %x0 = graph.add %tok, %wpe : tensor<16x1024x768xf32>, tensor<1024x768xf32>

    // Layer 0.
    %h0.ln1.g = graph.get_param @h0.ln1.g : tensor<768xf32>
    %h0.ln1.b = graph.get_param @h0.ln1.b : tensor<768xf32>
    %h0.attn.qkv.w = graph.get_param @h0.attn.qkv.w : tensor<768x2304xf32>
    %h0.attn.qkv.b = graph.get_param @h0.attn.qkv.b : tensor<2304xf32>
    %h0.attn.proj.w = graph.get_param @h0.attn.proj.w : tensor<768x768xf32>
    %h0.attn.proj.b = graph.get_param @h0.attn.proj.b : tensor<768xf32>
    %h0.ln2.g = graph.get_param @h0.ln2.g : tensor<768xf32>
    %h0.ln2.b = graph.get_param @h0.ln2.b : tensor<768xf32>
    %h0.mlp.fc.w = graph.get_param @h0.mlp.fc.w : tensor<768x3072xf32>
    %h0.mlp.fc.b = graph.get_param @h0.mlp.fc.b : tensor<3072xf32>
    %h0.mlp.fc2.w = graph.get_param @h0.mlp.fc2.w : tensor<3072x768xf32>
    %h0.mlp.fc2.b = graph.get_param @h0.mlp.fc2.b : tensor<768xf32>
    %x1 = func.call @block(%x0,
        %h0.ln1.g, %h0.ln1.b, %h0.attn.qkv.w, %h0.attn.qkv.b,
        %h0.attn.proj.w, %h0.attn.proj.b, %h0.ln2.g, %h0.ln2.b,
        %h0.mlp.fc.w, %h0.mlp.fc.b, %h0.mlp.fc2.w, %h0.mlp.fc2.b)
        : (tensor<16x1024x768xf32>,
           tensor<768xf32>, tensor<768xf32>, tensor<768x2304xf32>, tensor<2304xf32>,
           tensor<768x768xf32>, tensor<768xf32>, tensor<768xf32>, tensor<768xf32>,
           tensor<768x3072xf32>, tensor<3072xf32>, tensor<3072x768xf32>, tensor<768xf32>)
        -> tensor<16x1024x768xf32>

    // Layer 1.
    %h1.ln1.g = graph.get_param @h1.ln1.g : tensor<768xf32>
    %h1.ln1.b = graph.get_param @h1.ln1.b : tensor<768xf32>
    %h1.attn.qkv.w = graph.get_param @h1.attn.qkv.w : tensor<768x2304xf32>
    %h1.attn.qkv.b = graph.get_param @h1.attn.qkv.b : tensor<2304xf32>
    %h1.attn.proj.w = graph.get_param @h1.attn.proj.w : tensor<768x768xf32>
    %h1.attn.proj.b = graph.get_param @h1.attn.proj.b : tensor<768xf32>
    %h1.ln2.g = graph.get_param @h1.ln2.g : tensor<768xf32>
    %h1.ln2.b = graph.get_param @h1.ln2.b : tensor<768xf32>
    %h1.mlp.fc.w = graph.get_param @h1.mlp.fc.w : tensor<768x3072xf32>
    %h1.mlp.fc.b = graph.get_param @h1.mlp.fc.b : tensor<3072xf32>
    %h1.mlp.fc2.w = graph.get_param @h1.mlp.fc2.w : tensor<3072x768xf32>
    %h1.mlp.fc2.b = graph.get_param @h1.mlp.fc2.b : tensor<768xf32>
    %x2 = func.call @block(%x1,
        %h1.ln1.g, %h1.ln1.b, %h1.attn.qkv.w, %h1.attn.qkv.b,
        %h1.attn.proj.w, %h1.attn.proj.b, %h1.ln2.g, %h1.ln2.b,
        %h1.mlp.fc.w, %h1.mlp.fc.b, %h1.mlp.fc2.w, %h1.mlp.fc2.b)
        : (tensor<16x1024x768xf32>,
           tensor<768xf32>, tensor<768xf32>, tensor<768x2304xf32>, tensor<2304xf32>,
           tensor<768x768xf32>, tensor<768xf32>, tensor<768xf32>, tensor<768xf32>,
           tensor<768x3072xf32>, tensor<3072xf32>, tensor<3072x768xf32>, tensor<768xf32>)
        -> tensor<16x1024x768xf32>

    // Layer 2.
    %h2.ln1.g = graph.get_param @h2.ln1.g : tensor<768xf32>
    %h2.ln1.b = graph.get_param @h2.ln1.b : tensor<768xf32>
    %h2.attn.qkv.w = graph.get_param @h2.attn.qkv.w : tensor<768x2304xf32>
    %h2.attn.qkv.b = graph.get_param @h2.attn.qkv.b : tensor<2304xf32>
    %h2.attn.proj.w = graph.get_param @h2.attn.proj.w : tensor<768x768xf32>
    %h2.attn.proj.b = graph.get_param @h2.attn.proj.b : tensor<768xf32>
    %h2.ln2.g = graph.get_param @h2.ln2.g : tensor<768xf32>
    %h2.ln2.b = graph.get_param @h2.ln2.b : tensor<768xf32>
    %h2.mlp.fc.w = graph.get_param @h2.mlp.fc.w : tensor<768x3072xf32>
    %h2.mlp.fc.b = graph.get_param @h2.mlp.fc.b : tensor<3072xf32>
    %h2.mlp.fc2.w = graph.get_param @h2.mlp.fc2.w : tensor<3072x768xf32>
    %h2.mlp.fc2.b = graph.get_param @h2.mlp.fc2.b : tensor<768xf32>
    %x3 = func.call @block(%x2,
        %h2.ln1.g, %h2.ln1.b, %h2.attn.qkv.w, %h2.attn.qkv.b,
        %h2.attn.proj.w, %h2.attn.proj.b, %h2.ln2.g, %h2.ln2.b,
        %h2.mlp.fc.w, %h2.mlp.fc.b, %h2.mlp.fc2.w, %h2.mlp.fc2.b)
        : (tensor<16x1024x768xf32>,
           tensor<768xf32>, tensor<768xf32>, tensor<768x2304xf32>, tensor<2304xf32>,
           tensor<768x768xf32>, tensor<768xf32>, tensor<768xf32>, tensor<768xf32>,
           tensor<768x3072xf32>, tensor<3072xf32>, tensor<3072x768xf32>, tensor<768xf32>)
        -> tensor<16x1024x768xf32>

    // Layer 3.
    %h3.ln1.g = graph.get_param @h3.ln1.g : tensor<768xf32>
    %h3.ln1.b = graph.get_param @h3.ln1.b : tensor<768xf32>
    %h3.attn.qkv.w = graph.get_param @h3.attn.qkv.w : tensor<768x2304xf32>
    %h3.attn.qkv.b = graph.get_param @h3.attn.qkv.b : tensor<2304xf32>
    %h3.attn.proj.w = graph.get_param @h3.attn.proj.w : tensor<768x768xf32>
    %h3.attn.proj.b = graph.get_param @h3.attn.proj.b : tensor<768xf32>
    %h3.ln2.g = graph.get_param @h3.ln2.g : tensor<768xf32>
    %h3.ln2.b = graph.get_param @h3.ln2.b : tensor<768xf32>
    %h3.mlp.fc.w = graph.get_param @h3.mlp.fc.w : tensor<768x3072xf32>
    %h3.mlp.fc.b = graph.get_param @h3.mlp.fc.b : tensor<3072xf32>
    %h3.mlp.fc2.w = graph.get_param @h3.mlp.fc2.w : tensor<3072x768xf32>
    %h3.mlp.fc2.b = graph.get_param @h3.mlp.fc2.b : tensor<768xf32>
    %x4 = func.call @block(%x3,
        %h3.ln1.g, %h3.ln1.b, %h3.attn.qkv.w, %h3.attn.qkv.b,
        %h3.attn.proj.w, %h3.attn.proj.b, %h3.ln2.g, %h3.ln2.b,
        %h3.mlp.fc.w, %h3.mlp.fc.b, %h3.mlp.fc2.w, %h3.mlp.fc2.b)
        : (tensor<16x1024x768xf32>,
           tensor<768xf32>, tensor<768xf32>, tensor<768x2304xf32>, tensor<2304xf32>,
           tensor<768x768xf32>, tensor<768xf32>, tensor<768xf32>, tensor<768xf32>,
           tensor<768x3072xf32>, tensor<3072xf32>, tensor<3072x768xf32>, tensor<768xf32>)
        -> tensor<16x1024x768xf32>

    // Layer 4.
    %h4.ln1.g = graph.get_param @h4.ln1.g : tensor<768xf32>
    %h4.ln1.b = graph.get_param @h4.ln1.b : tensor<768xf32>
    %h4.attn.qkv.w = graph.get_param @h4.attn.qkv.w : tensor<768x2304xf32>
    %h4.attn.qkv.b = graph.get_param @h4.attn.qkv.b : tensor<2304xf32>
    %h4.attn.proj.w = graph.get_param @h4.attn.proj.w : tensor<768x768xf32>
    %h4.attn.proj.b = graph.get_param @h4.attn.proj.b : tensor<768xf32>
    %h4.ln2.g = graph.get_param @h4.ln2.g : tensor<768xf32>
    %h4.ln2.b = graph.get_param @h4.ln2.b : tensor<768xf32>
    %h4.mlp.fc.w = graph.get_param @h4.mlp.fc.w : tensor<768x3072xf32>
    %h4.mlp.fc.b = graph.get_param @h4.mlp.fc.b : tensor<3072xf32>
    %h4.mlp.fc2.w = graph.get_param @h4.mlp.fc2.w : tensor<3072x768xf32>
    %h4.mlp.fc2.b = graph.get_param @h4.mlp.fc2.b : tensor<768xf32>
    %x5 = func.call @block(%x4,
        %h4.ln1.g, %h4.ln1.b, %h4.attn.qkv.w, %h4.attn.qkv.b,
        %h4.attn.proj.w, %h4.attn.proj.b, %h4.ln2.g, %h4.ln2.b,
        %h4.mlp.fc.w, %h4.mlp.fc.b, %h4.mlp.fc2.w, %h4.mlp.fc2.b)
        : (tensor<16x1024x768xf32>,
           tensor<768xf32>, tensor<768xf32>, tensor<768x2304xf32>, tensor<2304xf32>,
           tensor<768x768xf32>, tensor<768xf32>, tensor<768xf32>, tensor<768xf32>,
           tensor<768x3072xf32>, tensor<3072xf32>, tensor<3072x768xf32>, tensor<768xf32>)
        -> tensor<16x1024x768xf32>

    // Layer 5.
    %h5.ln1.g = graph.get_param @h5.ln1.g : tensor<768xf32>
    %h5.ln1.b = graph.get_param @h5.ln1.b : tensor<768xf32>
    %h5.attn.qkv.w = graph.get_param @h5.attn.qkv.w : tensor<768x2304xf32>
    %h5.attn.qkv.b = graph.get_param @h5.attn.qkv.b : tensor<2304xf32>
    %h5.attn.proj.w = graph.get_param @h5.attn.proj.w : tensor<768x768xf32>
    %h5.attn.proj.b = graph.get_param @h5.attn.proj.b : tensor<768xf32>
    %h5.ln2.g = graph.get_param @h5.ln2.g : tensor<768xf32>
    %h5.ln2.b = graph.get_param @h5.ln2.b : tensor<768xf32>
    %h5.mlp.fc.w = graph.get_param @h5.mlp.fc.w : tensor<768x3072xf32>
    %h5.mlp.fc.b = graph.get_param @h5.mlp.fc.b : tensor<3072xf32>
    %h5.mlp.fc2.w = graph.get_param @h5.mlp.fc2.w : tensor<3072x768xf32>
    %h5.mlp.fc2.b = graph.get_param @h5.mlp.fc2.b : tensor<768xf32>
    %x6 = func.call @block(%x5,
        %h5.ln1.g, %h5.ln1.b, %h5.attn.qkv.w, %h5.attn.qkv.b,
        %h5.attn.proj.w, %h5.attn.proj.b, %h5.ln2.g, %h5.ln2.b,
        %h5.mlp.fc.w, %h5.mlp.fc.b, %h5.mlp.fc2.w, %h5.mlp.fc2.b)
        : (tensor<16x1024x768xf32>,
           tensor<768xf32>, tensor<768xf32>, tensor<768x2304xf32>, tensor<2304xf32>,
           tensor<768x768xf32>, tensor<768xf32>, tensor<768xf32>, tensor<768xf32>,
           tensor<768x3072xf32>, tensor<3072xf32>, tensor<3072x768xf32>, tensor<768xf32>)
        -> tensor<16x1024x768xf32>

    // Layer 6.
    %h6.ln1.g = graph.get_param @h6.ln1.g : tensor<768xf32>
    %h6.ln1.b = graph.get_param @h6.ln1.b : tensor<768xf32>
    %h6.attn.qkv.w = graph.get_param @h6.attn.qkv.w : tensor<768x2304xf32>
    %h6.attn.qkv.b = graph.get_param @h6.attn.qkv.b : tensor<2304xf32>
    %h6.attn.proj.w = graph.get_param @h6.attn.proj.w : tensor<768x768xf32>
    %h6.attn.proj.b = graph.get_param @h6.attn.proj.b : tensor<768xf32>
    %h6.ln2.g = graph.get_param @h6.ln2.g : tensor<768xf32>
    %h6.ln2.b = graph.get_param @h6.ln2.b : tensor<768xf32>
    %h6.mlp.fc.w = graph.get_param @h6.mlp.fc.w : tensor<768x3072xf32>
    %h6.mlp.fc.b = graph.get_param @h6.mlp.fc.b : tensor<3072xf32>
    %h6.mlp.fc2.w = graph.get_param @h6.mlp.fc2.w : tensor<3072x768xf32>
    %h6.mlp.fc2.b = graph.get_param @h6.mlp.fc2.b : tensor<768xf32>
    %x7 = func.call @block(%x6,
        %h6.ln1.g, %h6.ln1.b, %h6.attn.qkv.w, %h6.attn.qkv.b,
        %h6.attn.proj.w, %h6.attn.proj.b, %h6.ln2.g, %h6.ln2.b,
        %h6.mlp.fc.w, %h6.mlp.fc.b, %h6.mlp.fc2.w, %h6.mlp.fc2.b)
        : (tensor<16x1024x768xf32>,
           tensor<768xf32>, tensor<768xf32>, tensor<768x2304xf32>, tensor<2304xf32>,
           tensor<768x768xf32>, tensor<768xf32>, tensor<768xf32>, tensor<768xf32>,
           tensor<768x3072xf32>, tensor<3072xf32>, tensor<3072x768xf32>, tensor<768xf32>)
        -> tensor<16x1024x768xf32>

    // Layer 7.
    %h7.ln1.g = graph.get_param @h7.ln1.g : tensor<768xf32>
    %h7.ln1.b = graph.get_param @h7.ln1.b : tensor<768xf32>
    %h7.attn.qkv.w = graph.get_param @h7.attn.qkv.w : tensor<768x2304xf32>
    %h7.attn.qkv.b = graph.get_param @h7.attn.qkv.b : tensor<2304xf32>
    %h7.attn.proj.w = graph.get_param @h7.attn.proj.w : tensor<768x768xf32>
    %h7.attn.proj.b = graph.get_param @h7.attn.proj.b : tensor<768xf32>
    %h7.ln2.g = graph.get_param @h7.ln2.g : tensor<768xf32>
    %h7.ln2.b = graph.get_param @h7.ln2.b : tensor<768xf32>
    %h7.mlp.fc.w = graph.get_param @h7.mlp.fc.w : tensor<768x3072xf32>
    %h7.mlp.fc.b = graph.get_param @h7.mlp.fc.b : tensor<3072xf32>
    %h7.mlp.fc2.w = graph.get_param @h7.mlp.fc2.w : tensor<3072x768xf32>
    %h7.mlp.fc2.b = graph.get_param @h7.mlp.fc2.b : tensor<768xf32>
    %x8 = func.call @block(%x7,
        %h7.ln1.g, %h7.ln1.b, %h7.attn.qkv.w, %h7.attn.qkv.b,
        %h7.attn.proj.w, %h7.attn.proj.b, %h7.ln2.g, %h7.ln2.b,
        %h7.mlp.fc.w, %h7.mlp.fc.b, %h7.mlp.fc2.w, %h7.mlp.fc2.b)
        : (tensor<16x1024x768xf32>,
           tensor<768xf32>, tensor<768xf32>, tensor<768x2304xf32>, tensor<2304xf32>,
           tensor<768x768xf32>, tensor<768xf32>, tensor<768xf32>, tensor<768xf32>,
           tensor<768x3072xf32>, tensor<3072xf32>, tensor<3072x768xf32>, tensor<768xf32>)
        -> tensor<16x1024x768xf32>

    // Layer 8.
    %h8.ln1.g = graph.get_param @h8.ln1.g : tensor<768xf32>
    %h8.ln1.b = graph.get_param @h8.ln1.b : tensor<768xf32>
    %h8.attn.qkv.w = graph.get_param @h8.attn.qkv.w : tensor<768x2304xf32>
    %h8.attn.qkv.b = graph.get_param @h8.attn.qkv.b : tensor<2304xf32>
    %h8.attn.proj.w = graph.get_param @h8.attn.proj.w : tensor<768x768xf32>
    %h8.attn.proj.b = graph.get_param @h8.attn.proj.b : tensor<768xf32>
    %h8.ln2.g = graph.get_param @h8.ln2.g : tensor<768xf32>
    %h8.ln2.b = graph.get_param @h8.ln2.b : tensor<768xf32>
    %h8.mlp.fc.w = graph.get_param @h8.mlp.fc.w : tensor<768x3072xf32>
    %h8.mlp.fc.b = graph.get_param @h8.mlp.fc.b : tensor<3072xf32>
    %h8.mlp.fc2.w = graph.get_param @h8.mlp.fc2.w : tensor<3072x768xf32>
    %h8.mlp.fc2.b = graph.get_param @h8.mlp.fc2.b : tensor<768xf32>
    %x9 = func.call @block(%x8,
        %h8.ln1.g, %h8.ln1.b, %h8.attn.qkv.w, %h8.attn.qkv.b,
        %h8.attn.proj.w, %h8.attn.proj.b, %h8.ln2.g, %h8.ln2.b,
        %h8.mlp.fc.w, %h8.mlp.fc.b, %h8.mlp.fc2.w, %h8.mlp.fc2.b)
        : (tensor<16x1024x768xf32>,
           tensor<768xf32>, tensor<768xf32>, tensor<768x2304xf32>, tensor<2304xf32>,
           tensor<768x768xf32>, tensor<768xf32>, tensor<768xf32>, tensor<768xf32>,
           tensor<768x3072xf32>, tensor<3072xf32>, tensor<3072x768xf32>, tensor<768xf32>)
        -> tensor<16x1024x768xf32>

    // Layer 9.
    %h9.ln1.g = graph.get_param @h9.ln1.g : tensor<768xf32>
    %h9.ln1.b = graph.get_param @h9.ln1.b : tensor<768xf32>
    %h9.attn.qkv.w = graph.get_param @h9.attn.qkv.w : tensor<768x2304xf32>
    %h9.attn.qkv.b = graph.get_param @h9.attn.qkv.b : tensor<2304xf32>
    %h9.attn.proj.w = graph.get_param @h9.attn.proj.w : tensor<768x768xf32>
    %h9.attn.proj.b = graph.get_param @h9.attn.proj.b : tensor<768xf32>
    %h9.ln2.g = graph.get_param @h9.ln2.g : tensor<768xf32>
    %h9.ln2.b = graph.get_param @h9.ln2.b : tensor<768xf32>
    %h9.mlp.fc.w = graph.get_param @h9.mlp.fc.w : tensor<768x3072xf32>
    %h9.mlp.fc.b = graph.get_param @h9.mlp.fc.b : tensor<3072xf32>
    %h9.mlp.fc2.w = graph.get_param @h9.mlp.fc2.w : tensor<3072x768xf32>
    %h9.mlp.fc2.b = graph.get_param @h9.mlp.fc2.b : tensor<768xf32>
    %x10 = func.call @block(%x9,
        %h9.ln1.g, %h9.ln1.b, %h9.attn.qkv.w, %h9.attn.qkv.b,
        %h9.attn.proj.w, %h9.attn.proj.b, %h9.ln2.g, %h9.ln2.b,
        %h9.mlp.fc.w, %h9.mlp.fc.b, %h9.mlp.fc2.w, %h9.mlp.fc2.b)
        : (tensor<16x1024x768xf32>,
           tensor<768xf32>, tensor<768xf32>, tensor<768x2304xf32>, tensor<2304xf32>,
           tensor<768x768xf32>, tensor<768xf32>, tensor<768xf32>, tensor<768xf32>,
           tensor<768x3072xf32>, tensor<3072xf32>, tensor<3072x768xf32>, tensor<768xf32>)
        -> tensor<16x1024x768xf32>

    // Layer 10.
    %h10.ln1.g = graph.get_param @h10.ln1.g : tensor<768xf32>
    %h10.ln1.b = graph.get_param @h10.ln1.b : tensor<768xf32>
    %h10.attn.qkv.w = graph.get_param @h10.attn.qkv.w : tensor<768x2304xf32>
    %h10.attn.qkv.b = graph.get_param @h10.attn.qkv.b : tensor<2304xf32>
    %h10.attn.proj.w = graph.get_param @h10.attn.proj.w : tensor<768x768xf32>
    %h10.attn.proj.b = graph.get_param @h10.attn.proj.b : tensor<768xf32>
    %h10.ln2.g = graph.get_param @h10.ln2.g : tensor<768xf32>
    %h10.ln2.b = graph.get_param @h10.ln2.b : tensor<768xf32>
    %h10.mlp.fc.w = graph.get_param @h10.mlp.fc.w : tensor<768x3072xf32>
    %h10.mlp.fc.b = graph.get_param @h10.mlp.fc.b : tensor<3072xf32>
    %h10.mlp.fc2.w = graph.get_param @h10.mlp.fc2.w : tensor<3072x768xf32>
    %h10.mlp.fc2.b = graph.get_param @h10.mlp.fc2.b : tensor<768xf32>
    %x11 = func.call @block(%x10,
        %h10.ln1.g, %h10.ln1.b, %h10.attn.qkv.w, %h10.attn.qkv.b,
        %h10.attn.proj.w, %h10.attn.proj.b, %h10.ln2.g, %h10.ln2.b,
        %h10.mlp.fc.w, %h10.mlp.fc.b, %h10.mlp.fc2.w, %h10.mlp.fc2.b)
        : (tensor<16x1024x768xf32>,
           tensor<768xf32>, tensor<768xf32>, tensor<768x2304xf32>, tensor<2304xf32>,
           tensor<768x768xf32>, tensor<768xf32>, tensor<768xf32>, tensor<768xf32>,
           tensor<768x3072xf32>, tensor<3072xf32>, tensor<3072x768xf32>, tensor<768xf32>)
        -> tensor<16x1024x768xf32>

    // Layer 11.
    %h11.ln1.g = graph.get_param @h11.ln1.g : tensor<768xf32>
    %h11.ln1.b = graph.get_param @h11.ln1.b : tensor<768xf32>
    %h11.attn.qkv.w = graph.get_param @h11.attn.qkv.w : tensor<768x2304xf32>
    %h11.attn.qkv.b = graph.get_param @h11.attn.qkv.b : tensor<2304xf32>
    %h11.attn.proj.w = graph.get_param @h11.attn.proj.w : tensor<768x768xf32>
    %h11.attn.proj.b = graph.get_param @h11.attn.proj.b : tensor<768xf32>
    %h11.ln2.g = graph.get_param @h11.ln2.g : tensor<768xf32>
    %h11.ln2.b = graph.get_param @h11.ln2.b : tensor<768xf32>
    %h11.mlp.fc.w = graph.get_param @h11.mlp.fc.w : tensor<768x3072xf32>
    %h11.mlp.fc.b = graph.get_param @h11.mlp.fc.b : tensor<3072xf32>
    %h11.mlp.fc2.w = graph.get_param @h11.mlp.fc2.w : tensor<3072x768xf32>
    %h11.mlp.fc2.b = graph.get_param @h11.mlp.fc2.b : tensor<768xf32>
    %x12 = func.call @block(%x11,
        %h11.ln1.g, %h11.ln1.b, %h11.attn.qkv.w, %h11.attn.qkv.b,
        %h11.attn.proj.w, %h11.attn.proj.b, %h11.ln2.g, %h11.ln2.b,
        %h11.mlp.fc.w, %h11.mlp.fc.b, %h11.mlp.fc2.w, %h11.mlp.fc2.b)
        : (tensor<16x1024x768xf32>,
           tensor<768xf32>, tensor<768xf32>, tensor<768x2304xf32>, tensor<2304xf32>,
           tensor<768x768xf32>, tensor<768xf32>, tensor<768xf32>, tensor<768xf32>,
           tensor<768x3072xf32>, tensor<3072xf32>, tensor<3072x768xf32>, tensor<768xf32>)
        -> tensor<16x1024x768xf32>

    // Final LayerNorm; the output head is wte itself: logits = h @ wte^T.
    %ln_f.g = graph.get_param @ln_f.g : tensor<768xf32>
    %ln_f.b = graph.get_param @ln_f.b : tensor<768xf32>
    %h = graph.layernorm %x12, %ln_f.g, %ln_f.b
        : tensor<16x1024x768xf32>, tensor<768xf32>, tensor<768xf32>
    %logits = graph.matmul %h, %wte transpose_rhs : tensor<16x1024x768xf32>, tensor<50304x768xf32>
    %loss = graph.cross_entropy %logits, %targets : tensor<16x1024x50304xf32>, tensor<16x1024xi32>
    graph.loss %loss : tensor<f32>
    return
  }
}
