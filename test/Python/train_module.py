"""train_module.py CHECK: trains torch modules through `import ampc` and checks them against
PyTorch. CHECK is one of:

  adamw      a torch.nn.Module (an MLP, then the CNN with batch norms) trained 20 steps by
             ampc.compile(...).step in fp32 equals the same module trained by torch.optim.AdamW
             (ampc's defaults: lr 3e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on tensors
             of rank >= 2, gradients clipped to norm 1) on the same batches, within 1e-5; the
             trained weights load back into the module with load_state_dict(strict=True).
  accumulate 4 micro-batches of B (accum_steps=4) train as one batch of 4B does, within 1e-6.
  bf16       the MLP and the CNN with batch norms trained 20 steps in bf16 follow torch's
             autocast(bfloat16) + AdamW within 2% of the loss (the executables' bf16 tolerance).
  scaler     fp16 with GradScaler's knobs set (init_scale 2^12, growth_factor 3, backoff_factor
             0.25, growth_interval 3) and non-finite inputs at chosen steps: exactly those steps
             are skipped, and the scale follows torch.cuda.amp.GradScaler's update rule
             (torch._amp_update_scale_, written out below) step for step, exactly.
  resume     Trainer.save after 4 steps, ampc.load, 4 more steps: the losses, loss scales and
             every tensor equal those of the run that went on without stopping, bit for bit
             (fp16 with dropout and a skipped step; bf16 with batch norms' running statistics).
  errors     wrong shapes, dtypes and input counts, a model file that does not exist and a
             module whose forward does not return a scalar raise ampc.Error with the message.
"""

import copy
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Onnx",
                                "Inputs"))
import ampc  # noqa: E402
import torch_models  # noqa: E402

torch.set_num_threads(1)


def worst_of(values):
    """The largest of values, NaN when any is (max() would drop a NaN after the first)."""
    values = list(values)
    return float("nan") if any(v != v for v in values) else max(values)


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


def train_both(name, precision, steps=20):
    """Trains torch_models' \p name through ampc (\p precision) and with torch.optim.AdamW
    (under autocast(bfloat16) for bf16) on the same batches; returns the largest relative loss
    difference, ampc's trainer, the torch module and the untouched module."""
    model = torch_models.make(name)
    reference = copy.deepcopy(model)
    data = batches(model, steps)
    trainer = ampc.compile(model, data[0], precision=precision)
    optimizer = torch_adamw(reference)
    worst = 0.0
    for inputs in data:
        result = trainer.step(*inputs)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = reference(*inputs)
        loss.float().backward()
        torch.nn.utils.clip_grad_norm_(list(reference.parameters()), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        worst = worst_of([worst, abs(result.loss - loss.item()) / abs(loss.item())])
    return worst, trainer, reference, model


def adamw(name, steps=20, tolerance=1e-5):
    worst_loss, trainer, reference, model = train_both(name, "fp32", steps)
    state = trainer.state_dict()
    expected = reference.state_dict()
    worst = worst_of((state[k].double() - v.double()).abs().max().item()
                     for k, v in expected.items())
    if not (worst_loss <= tolerance and worst <= tolerance):  # NaN fails
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
        assert abs(a.loss - b.loss) <= 1e-6 * abs(b.loss), (a.loss, b.loss)  # NaN fails
    sa, sb = micro.state_dict(), whole.state_dict()
    worst = worst_of((sa[k] - sb[k]).abs().max().item() for k in sa)
    if not worst <= 1e-6:
        sys.exit("FAIL: accumulation: weights %.3g apart" % worst)
    print("ok: 4 micro-batches of 8 train as a batch of 32: weights within %.2g" % worst)


def bf16(name, steps=20, tolerance=0.02):
    worst = train_both(name, "bf16", steps)[0]
    if not worst <= tolerance:
        sys.exit("FAIL: %s bf16: losses %.3g apart (tolerance %g)" % (name, worst, tolerance))
    print("ok: %s: %d bf16 steps follow torch autocast(bfloat16), losses within %.2g"
          % (name, steps, worst))


def torch_update_scale(scale, tracker, found_inf, growth, backoff, interval):
    """torch.cuda.amp.GradScaler.update's rule (torch._amp_update_scale_): back off and reset on
    a non-finite gradient; else count, and grow after `interval` finite steps in a row (unless
    the grown scale would not be finite)."""
    if found_inf:
        return scale * backoff, 0
    tracker += 1
    if tracker == interval:
        grown = scale * growth
        return (grown if grown != float("inf") else scale), 0
    return scale, tracker


def scaler():
    model = torch_models.make("mlp")
    data = batches(model, 16)
    overflow = {2, 3, 9}
    trainer = ampc.compile(model, data[0], precision="fp16", loss_scaling="dynamic",
                           init_scale=4096, growth_factor=3.0, backoff_factor=0.25,
                           growth_interval=3)
    scale, tracker = 4096.0, 0
    for step, (x, labels) in enumerate(data):
        if step in overflow:
            x = x.clone()
            x[0, 0] = float("inf")
        result = trainer.step(x, labels)
        if result.loss_scale != scale or result.skipped != (step in overflow):
            sys.exit("FAIL: step %d: scale %g skipped %s, GradScaler: %g skipped %s" % (
                step, result.loss_scale, result.skipped, scale, step in overflow))
        scale, tracker = torch_update_scale(scale, tracker, step in overflow, 3.0, 0.25, 3)
    print("ok: 16 fp16 steps, overflows at steps 2, 3, 9 skipped; scales as GradScaler's, "
          "ending at %g" % scale)


class DropoutMlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(12, 32)
        self.drop = torch.nn.Dropout(0.25)
        self.fc2 = torch.nn.Linear(32, 5)

    def forward(self, x, labels):
        return torch.nn.functional.cross_entropy(self.fc2(self.drop(torch.relu(self.fc1(x)))),
                                                 labels)


def resume(work):
    # name, model, batches, options, the step given a non-finite input (fp16: skipped)
    cases = [("dropout-mlp fp16", DropoutMlp, torch_models.make("mlp").batch,
              dict(precision="fp16", growth_interval=2), 2),
             ("cnn-bn bf16", lambda: torch_models.make("cnn-bn"), None, dict(precision="bf16"),
              None)]
    for name, make, batch, options, overflow in cases:
        torch.manual_seed(0)
        model = make()
        generator = torch.Generator().manual_seed(5)
        data = [tuple((batch or model.batch)(generator).values()) for _ in range(8)]
        if overflow is not None:
            data[overflow] = (torch.full_like(data[overflow][0], float("inf")),) + \
                data[overflow][1:]
        whole = ampc.compile(model, data[0], seed=7, **options)
        first = [whole.step(*inputs) for inputs in data[:4]]
        folder = os.path.join(work, name.split()[0])
        saved = whole.save(folder)
        rest = [whole.step(*inputs) for inputs in data[4:]]
        loaded = ampc.load(folder)
        again = [loaded.step(*inputs) for inputs in data[4:]]
        if [(r.loss, r.loss_scale, r.skipped) for r in rest] != \
                [(r.loss, r.loss_scale, r.skipped) for r in again]:
            sys.exit("FAIL: %s: resumed losses %s, unbroken %s" % (
                name, [r.loss for r in again], [r.loss for r in rest]))
        a, b = whole.state_dict(), loaded.state_dict()
        if any(not torch.equal(a[k], b[k]) for k in a):
            sys.exit("FAIL: %s: the resumed tensors differ" % name)
        print("ok: %s: saved %s after step %d (skipped: %s), 4 steps after ampc.load equal the "
              "unbroken run's bit for bit (%d tensors)" % (
                  name, os.path.basename(saved), loaded.steps_done - 4,
                  [r.skipped for r in first], len(a)))
    # Mistakes: saving mid-step, a folder without checkpoints, another plan's checkpoint.
    model = torch_models.make("mlp")
    inputs = tuple(model.batch(torch.Generator().manual_seed(1)).values())
    trainer = ampc.compile(model, inputs, precision="fp32", accum_steps=2)
    trainer.micro_step(*inputs)
    expect(lambda: trainer.save(os.path.join(work, "mid")), "save after the step's last")
    os.makedirs(os.path.join(work, "empty"), exist_ok=True)
    expect(lambda: ampc.load(os.path.join(work, "empty")), "no checkpoint")
    shutil.copy(os.path.join(work, "cnn-bn", "model.plan"), os.path.join(work, "dropout-mlp"))
    expect(lambda: ampc.load(os.path.join(work, "dropout-mlp")), "was written by a plan with hash")


def expect(call, fragment):
    try:
        call()
    except ampc.Error as error:
        assert fragment in str(error), str(error)
        print("error: " + str(error))
        return
    sys.exit("FAIL: no error for " + fragment)


def errors():
    model = torch_models.make("mlp")
    inputs = tuple(model.batch(torch.Generator().manual_seed(1)).values())
    trainer = ampc.compile(model, inputs, precision="fp32")
    # Any layout and numeric dtype trains as the tensors do (C-ordered float32 and int64 arrays
    # are read in place, others converted).
    import numpy
    x, labels = inputs[0].numpy(), inputs[1].numpy()
    layouts = [(x, labels), (x.astype(">f4"), labels.astype(">i8")),
               (numpy.asfortranarray(x.astype(numpy.float64)), labels.astype(numpy.int32))]
    losses = [ampc.compile(model, inputs, precision="fp32").step(*arrays).loss
              for arrays in layouts]
    assert len(set(losses)) == 1, losses
    print("layouts: %d give loss %.6f" % (len(losses), losses[0]))
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
 "bf16": lambda: (bf16("mlp"), bf16("cnn-bn")), "scaler": scaler,
 "resume": lambda: resume(sys.argv[2]), "errors": errors, "report": report}[sys.argv[1]]()
