"""torch_models.py: the PyTorch models the ONNX tests export, with their batches.

Each model's forward takes its batch and returns the scalar loss, so the exported ONNX graph's
one output is the loss ampc trains. Shapes are small so that every test runs in seconds on one
core. Run with Debian's /usr/bin/python3 (torch 1.13, CPU).
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Mlp(nn.Module):
    """Two linear layers with ReLU, cross-entropy against class labels (Gemm, Relu,
    SoftmaxCrossEntropyLoss)."""

    def __init__(self, features=12, hidden=32, classes=5):
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x, labels):
        return F.cross_entropy(self.fc2(F.relu(self.fc1(x))), labels)

    @staticmethod
    def batch(generator):
        x = torch.randn(8, 12, generator=generator)
        labels = torch.randint(0, 5, (8,), generator=generator)
        return {"x": x, "labels": labels}


class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads, context, variant):
        super().__init__()
        self.heads, self.variant = heads, variant
        # No bias on q, k, v: the key's bias does not change the softmax, so its gradient is zero
        # up to rounding, and AdamW turns that rounding into full-size steps in random directions
        # (in torch as in ampc), which no weight comparison could check.
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d)
        # A float buffer, as GPT-2 implementations register it: a mask, not a parameter.
        self.register_buffer("mask", torch.tril(torch.ones(context, context)).view(
            1, 1, context, context))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        scale = 1.0 / math.sqrt(C // self.heads)
        if self.variant == "masked":
            # Explicit masked softmax (nanoGPT's slow path).
            att = (q @ k.transpose(-2, -1)) * scale
            att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
        else:
            # baddbmm with an additive -inf upper-triangular bias.
            bias = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
            q3 = q.reshape(B * self.heads, T, -1)
            k3 = k.reshape(B * self.heads, T, -1)
            att = torch.baddbmm(bias.expand(B * self.heads, T, T), q3, k3.transpose(1, 2),
                                alpha=scale)
            y = torch.bmm(F.softmax(att, dim=-1), v.reshape(B * self.heads, T, -1))
            y = y.view(B, self.heads, T, -1)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, d, heads, context, variant, gelu):
        super().__init__()
        self.gelu = gelu
        self.ln1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads, context, variant)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.fc_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate=self.gelu))


class Gpt(nn.Module):
    """A GPT-2-style decoder: token and position embeddings, pre-norm blocks, a final layer norm
    and an output head tied to the token embedding; GELU exact (erf) or its tanh form."""

    def __init__(self, variant="masked", gelu="none", vocab=64, d=32, heads=2, layers=2,
                 context=16):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(context, d)
        self.blocks = nn.ModuleList([Block(d, heads, context, variant, gelu)
                                     for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied
        self.register_buffer("positions", torch.arange(context))

    def forward(self, tokens, targets):
        B, T = tokens.shape
        x = self.wte(tokens) + self.wpe(self.positions[:T])
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    @staticmethod
    def batch(generator):
        tokens = torch.randint(0, 64, (2, 16), generator=generator)
        targets = torch.randint(0, 64, (2, 16), generator=generator)
        return {"tokens": tokens, "targets": targets}


class RmsNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self, d, heads, hidden, rope=False):
        super().__init__()
        self.heads, self.rope = heads, rope
        if rope:
            # A buffer as in Hugging Face's LLaMA: import it with --constant-initializer.
            head = d // heads
            self.register_buffer("inv_freq",
                                 1.0 / (10000 ** (torch.arange(0, head, 2).float() / head)))
        self.norm1 = RmsNorm(d)
        self.wq = nn.Linear(d, d, bias=False)
        self.wk = nn.Linear(d, d, bias=False)
        self.wv = nn.Linear(d, d, bias=False)
        self.wo = nn.Linear(d, d, bias=False)
        self.norm2 = RmsNorm(d)
        self.w1 = nn.Linear(d, hidden, bias=False)
        self.w3 = nn.Linear(d, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        B, T, C = x.shape
        h = self.norm1(x)
        shape = (B, T, self.heads, C // self.heads)
        q = self.wq(h).view(shape).transpose(1, 2)
        k = self.wk(h).view(shape).transpose(1, 2)
        v = self.wv(h).view(shape).transpose(1, 2)
        if self.rope:
            t = torch.arange(T, dtype=torch.float32)
            freqs = t[:, None] * self.inv_freq[None, :]
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos(), emb.sin()
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
        att = q @ k.transpose(-2, -1) / math.sqrt(C // self.heads)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~causal, -1e9)  # a finite fill, as some LLaMA ports write
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.wo(y)
        h = self.norm2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(nn.Module):
    """A LLaMA-style decoder: RMSNorm, SiLU-gated MLP, untied head, no biases; with rope, rotary
    position embeddings from an inv_freq buffer."""

    def __init__(self, vocab=64, d=32, heads=2, layers=2, hidden=64, rope=False):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([LlamaBlock(d, heads, hidden, rope) for _ in range(layers)])
        self.norm = RmsNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, tokens, targets):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    batch = staticmethod(Gpt.batch)


class Activations(nn.Module):
    """Linear layers through the activations torchvision's models use besides ReLU: HardSwish
    and HardSigmoid (MobileNetV3), Sigmoid (EfficientNet's gates, not only SiLU's), and
    Softplus. The first layer's outputs are scaled so that they fall on both sides of every
    kink (-3 and 3)."""

    def __init__(self, features=12, hidden=32, classes=5):
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.gate = nn.Linear(hidden, hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x, labels):
        a = self.fc1(x) * 4.0
        h = F.hardswish(a) * F.hardsigmoid(a) + F.softplus(a)
        h = h * torch.sigmoid(self.gate(h))
        return F.cross_entropy(self.fc2(h), labels)

    @staticmethod
    def batch(generator):
        x = torch.randn(8, 12, generator=generator)
        labels = torch.randint(0, 5, (8,), generator=generator)
        return {"x": x, "labels": labels}


class Cnn(nn.Module):
    """A small convolutional classifier through every window PyTorch's vision models use: a
    strided, padded convolution with bias, ReLU6 (scaled so both bounds clip), a 3x3/2 max pool
    with padding and ceil_mode, a depthwise convolution with a channel multiplier and dilation,
    HardSwish, a grouped 1x1 convolution without bias, a 2x2/2 average pool with ceil_mode, a
    rectangular kernel, global average pooling, flatten and a linear head."""

    def __init__(self, classes=5):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.dw = nn.Conv2d(8, 16, 3, padding=2, dilation=2, groups=8)
        self.pw = nn.Conv2d(16, 12, 1, groups=2, bias=False)
        self.conv3 = nn.Conv2d(12, 10, (3, 2), padding=(1, 0))
        self.fc = nn.Linear(10, classes)

    def forward(self, x, labels):
        x = F.relu6(self.conv1(x) * 6.0)
        x = F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True)
        x = F.hardswish(self.dw(x) * 4.0)
        x = F.avg_pool2d(self.pw(x), 2, stride=2, ceil_mode=True)
        x = F.relu(self.conv3(x))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return F.cross_entropy(self.fc(x), labels)

    @staticmethod
    def batch(generator):
        x = torch.randn(4, 3, 15, 15, generator=generator)
        labels = torch.randint(0, 5, (4,), generator=generator)
        return {"x": x, "labels": labels}


class CnnBn(nn.Module):
    """Batch norms as torchvision's ResNets use them: a conv-BN-ReLU stem, a residual block of
    two conv-BN (one with momentum 0.2) around an identity shortcut, max pooling, global
    pooling and a linear head."""

    def __init__(self, classes=5):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn0 = nn.BatchNorm2d(8)
        self.conv1 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8, momentum=0.2)
        self.fc = nn.Linear(8, classes)

    def forward(self, x, labels):
        x = F.relu(self.bn0(self.stem(x)))
        y = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(x + self.bn2(self.conv2(y)))
        x = F.max_pool2d(x, 2)
        return F.cross_entropy(self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1)), labels)

    @staticmethod
    def batch(generator):
        x = torch.randn(8, 3, 10, 10, generator=generator)
        labels = torch.randint(0, 5, (8,), generator=generator)
        return {"x": x, "labels": labels}


class Encoder(nn.Module):
    """A text classifier on torch.nn.TransformerEncoder, the module PyTorch users reach for:
    token embeddings, two encoder layers (post- or pre-norm, relu or gelu), mean pooling over
    the tokens and a linear head. No dropout, so PyTorch's step and ampc's take the same values.
    With a patch embedding (a strided convolution) instead of tokens it is a small vision
    transformer."""

    def __init__(self, norm_first=False, activation="relu", patches=False, d=32, classes=3,
                 padding_mask=False):
        super().__init__()
        self.patches, self.padding_mask = patches, padding_mask
        if patches:
            self.embed = nn.Conv2d(3, d, 4, stride=4)
            self.position = nn.Parameter(torch.randn(1, 16, d) * 0.02)
        else:
            self.embed = nn.Embedding(50, d)
        layer = nn.TransformerEncoderLayer(d, 4, 2 * d, dropout=0.0, activation=activation,
                                           batch_first=True, norm_first=norm_first)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)
        self.classes = classes

    def forward(self, x, labels, pad=None):
        if self.patches:
            h = self.embed(x).flatten(2).transpose(1, 2) + self.position
        else:
            h = self.embed(x)
        return F.cross_entropy(self.head(self.encoder(h, src_key_padding_mask=pad).mean(1)),
                               labels)

    def batch(self, generator):
        if self.patches:
            x = torch.randn(4, 3, 16, 16, generator=generator)
        else:
            x = torch.randint(0, 50, (4, 10), generator=generator)
        labels = torch.randint(0, self.classes, (4,), generator=generator)
        if not self.padding_mask:
            return {"x": x, "labels": labels}
        # Rows of 10, 8, 6 and 9 tokens: the rest is padding, masked out of attention.
        pad = torch.arange(10).unsqueeze(0) >= torch.tensor([[10], [8], [6], [9]])
        return {"x": x, "labels": labels, "pad": pad}


class Decoder(nn.Module):
    """A sequence-to-sequence model on torch.nn.TransformerDecoder: the source tokens' embeddings
    as the memory, two decoder layers (post- or pre-norm, relu or gelu) with a causal tgt_mask,
    optional key-padding masks (bool inputs) on the targets and the memory, or an additive float
    attention mask given as an input instead of the causal one, and a per-token cross-entropy
    head. No dropout, so PyTorch's step and ampc's take the same values."""

    def __init__(self, norm_first=False, activation="relu", padding_masks=False,
                 float_mask=False, d=32, vocab=40):
        super().__init__()
        self.padding_masks, self.float_mask, self.vocab = padding_masks, float_mask, vocab
        self.source = nn.Embedding(vocab, d)
        self.target = nn.Embedding(vocab, d)
        layer = nn.TransformerDecoderLayer(d, 4, 2 * d, dropout=0.0, activation=activation,
                                           batch_first=True, norm_first=norm_first)
        self.decoder = nn.TransformerDecoder(layer, 2)
        self.head = nn.Linear(d, vocab)

    def forward(self, src, tgt, labels, *masks):
        steps = tgt.shape[1]
        if self.float_mask:
            tgt_mask, pads = masks[0], (None, None)
        else:
            tgt_mask = torch.triu(torch.full((steps, steps), float("-inf")), diagonal=1)
            pads = masks if self.padding_masks else (None, None)
        h = self.decoder(self.target(tgt), self.source(src), tgt_mask=tgt_mask,
                         tgt_key_padding_mask=pads[0], memory_key_padding_mask=pads[1])
        return F.cross_entropy(self.head(h).reshape(-1, self.vocab), labels.reshape(-1))

    def batch(self, generator):
        src = torch.randint(0, self.vocab, (3, 9), generator=generator)
        tgt = torch.randint(0, self.vocab, (3, 7), generator=generator)
        labels = torch.randint(0, self.vocab, (3, 7), generator=generator)
        batch = {"src": src, "tgt": tgt, "labels": labels}
        if self.float_mask:
            # Causal, plus a learned-bias-like additive term: any float mask works.
            bias = torch.randn(7, 7, generator=generator) * 0.5
            batch["mask"] = torch.triu(torch.full((7, 7), -1e9), diagonal=1) + bias
        elif self.padding_masks:
            # Targets of 7, 5 and 6 tokens, sources of 9, 6 and 8 (trailing padding).
            batch["tgt_pad"] = torch.arange(7).unsqueeze(0) >= torch.tensor([[7], [5], [6]])
            batch["src_pad"] = torch.arange(9).unsqueeze(0) >= torch.tensor([[9], [6], [8]])
        return batch


class Vision(nn.Module):
    """A torchvision classifier (ResNet, MobileNet) returning its mean cross-entropy, in train()
    mode so its batch norms use and update batch statistics; small images keep it quick."""

    def __init__(self, arch, classes=10, size=64, batch=4):
        super().__init__()
        import torchvision
        # No dropout, so PyTorch's step and ampc's take the same values.
        options = {} if arch.startswith("resnet") else {"dropout": 0.0}
        self.net = getattr(torchvision.models, arch)(num_classes=classes, **options)
        self.size, self.rows, self.classes = size, batch, classes

    def forward(self, x, labels):
        return F.cross_entropy(self.net(x), labels)

    def batch(self, generator):
        x = torch.randn(self.rows, 3, self.size, self.size, generator=generator)
        labels = torch.randint(0, self.classes, (self.rows,), generator=generator)
        return {"x": x, "labels": labels}


def make(name):
    """The model called name, with deterministic initial values."""
    torch.manual_seed(0)
    if name == "mlp":
        return Mlp()
    if name == "activations":
        return Activations()
    if name == "cnn":
        return Cnn()
    if name == "cnn-bn":
        return CnnBn()
    if name == "encoder":
        return Encoder()
    if name == "encoder-pre-gelu":
        return Encoder(norm_first=True, activation="gelu")
    if name == "encoder-mask":
        return Encoder(padding_mask=True)
    if name == "decoder":
        return Decoder()
    if name == "decoder-pre-gelu":
        return Decoder(norm_first=True, activation="gelu")
    if name == "decoder-masks":
        return Decoder(padding_masks=True)
    if name == "decoder-float-mask":
        return Decoder(norm_first=True, float_mask=True)
    if name == "vit":
        return Encoder(norm_first=True, activation="gelu", patches=True)
    if name in ("resnet18", "mobilenet_v2", "mobilenet_v3_small"):
        return Vision(name)
    if name == "gpt":
        return Gpt("masked")
    if name == "gpt-baddbmm":
        return Gpt("baddbmm")
    if name == "gpt-tanh":
        return Gpt("masked", gelu="tanh")
    if name == "llama":
        return Llama()
    if name == "llama-rope":
        return Llama(rope=True)
    raise SystemExit("unknown model " + name)
