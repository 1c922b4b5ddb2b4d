"""train_module.py CHECK: trains torch modules through `import ampc` and checks them against
PyTorch. CHECK is one of:

  adamw      a torch.nn.Module (an MLP, then the CNN with batch norms) trained 20 steps by
             ampc.compile(...).step in fp32 equals the same module trained by torch.optim.AdamW
             (ampc's defaults: lr 3e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on tensors
             of rank >= 2, gradients clipped to norm 1) on the same batches, within 1e-5; the
             trained weights load back into the module with load_state_dict(strict=True).
  accumulate 4 micro-batches of B (accum_steps=4) train as one batch of 4B does, within 1e-6.
  errors     wrong shapes, dtypes and input counts, a model file that does not exist and a
             module whose forward does not return a scalar raise ampc.Error with the message.
"""

import copy
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Onnx",
                                "Inputs"))
import ampc  # noqa: E402
import torch_models  # noqa: E402

torch.set_num_threads(1)


def batches(model, steps, rows=None):
    generator = torch.Generator().manual_seed(11)
    out = []
    for _ in range(steps):
        batch = model.batch(generator)
        out.append(tuple(batch.values()))
    return out


def torch_adamw(model):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=3e-4, betas=(0.9, 0.95), eps=1e-8)


def adamw(name, steps=20, tolerance=1e-5):
    model = torch_models.make(name)
    reference = copy.deepcopy(model)
    data = batches(model, steps)
    trainer = ampc.compile(model, data[0], precision="fp32")
    optimizer = torch_adamw(reference)
    worst_loss = 0.0
    for inputs in data:
        result = trainer.step(*inputs)
        loss = reference(*inputs)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(reference.parameters()), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        worst_loss = max(worst_loss, abs(result.loss - loss.item()) / abs(loss.item()))
    state = trainer.state_dict()
    expected = reference.state_dict()
    worst = max((state[k].double() - v.double()).abs().max().item() for k, v in expected.items())
    if worst_loss > tolerance or worst > tolerance:
        sys.exit("FAIL: %s: losses %.3g, weights %.3g apart" % (name, worst_loss, worst))
    model.load_state_dict(state, strict=True)
    print("ok: %s: %d AdamW steps, losses within %.2g, %d tensors within %.2g; loaded back"
          % (name, steps, worst_loss, len(state), worst))


def accumulate():
    model = torch_models.make("mlp")
    generator = torch.Generator().manual_seed(3)
    data = [(torch.randn(32, 12, generator=generator),
             torch.randint(0, 5, (32,), generator=generator)) for _ in range(3)]
    micro = ampc.compile(model, tuple(t[:8] for t in data[0]), precision="fp32", accum_steps=4)
    whole = ampc.compile(model, data[0], precision="fp32")
    for inputs in data:
        a, b = micro.step(*inputs), whole.step(*inputs)
        assert abs(a.loss - b.loss) <= 1e-6 * abs(b.loss), (a.loss, b.loss)
    sa, sb = micro.state_dict(), whole.state_dict()
    worst = max((sa[k] - sb[k]).abs().max().item() for k in sa)
    if worst > 1e-6:
        sys.exit("FAIL: accumulation: weights %.3g apart" % worst)
    print("ok: 4 micro-batches of 8 train as a batch of 32: weights within %.2g" % worst)


def errors():
    model = torch_models.make("mlp")
    inputs = tuple(model.batch(torch.Generator().manual_seed(1)).values())
    trainer = ampc.compile(model, inputs, precision="fp32")

    def expect(call, fragment):
        try:
            call()
        except ampc.Error as error:
            assert fragment in str(error), str(error)
            print("error: " + str(error))
            return
        sys.exit("FAIL: no error for " + fragment)

    expect(lambda: trainer.step(torch.zeros(16, 12), inputs[1]),
           "input 'x' takes 8 rows per step (1 micro-batch of [8, 12]), got shape [16, 12]")
    expect(lambda: trainer.micro_step(torch.zeros(8, 11), inputs[1]),
           "input 'x' takes shape [8, 12], got [8, 11]")
    expect(lambda: trainer.micro_step(inputs[0], inputs[1].float()),
           "input 'labels' takes integers (i64), got float32")
    expect(lambda: trainer.step(inputs[0]), "the model takes 2 inputs (x, labels), got 1")
    expect(lambda: ampc.compile("/no/such/model.onnx"), "cannot read")

    class NotALoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(12, 5)

        def forward(self, x):
            return self.fc(x)

    expect(lambda: ampc.compile(NotALoss(), (inputs[0],)), "no scalar output to train")
    expect(lambda: ampc.compile(model, inputs, device="tpu"),
           "device is 'auto', 'cpu' or 'cuda', got 'tpu'")
    # Without a GPU, "auto" trains on the CPU and says why; "cuda" is an error saying why.
    auto = ampc.compile(model, inputs, precision="fp32")
    print("auto: %s (%s)" % (auto.device, auto.note or "no fallback"))
    if auto.device == "cpu":
        expect(lambda: ampc.compile(model, inputs, precision="fp32", device="cuda"), "")


def report():
    model = torch_models.make("cnn-bn")
    inputs = tuple(model.batch(torch.Generator().manual_seed(1)).values())
    trainer = ampc.compile(model, inputs, precision="bf16")
    precision = trainer.report("precision")
    convolutions = [row for row in precision.rows if row["op"] == "conv2d"]
    norms = [row for row in precision.rows if row["op"] == "batch_norm"]
    print("precision: %d rows; conv2d %s/%s/%s (%s), batch_norm %s/%s/%s (%s)" % (
        len(precision.rows), convolutions[0]["compute"], convolutions[0]["accumulate"],
        convolutions[0]["storage"], convolutions[0]["rule"], norms[0]["compute"],
        norms[0]["accumulate"], norms[0]["storage"], norms[0]["rule"]))
    print(str(trainer.report("memory")).splitlines()[0])


{"adamw": lambda: (adamw("mlp"), adamw("cnn-bn")), "accumulate": accumulate,
 "errors": errors, "report": report}[sys.argv[1]]()
