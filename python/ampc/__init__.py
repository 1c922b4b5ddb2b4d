"""ampc from Python: compile a model, train it from your own loop, get its weights back.

    import ampc
    trainer = ampc.compile(model, (x, y), precision="fp32", accum_steps=4, lr=3e-4)
    for batch in loader:
        result = trainer.step(*batch)          # one optimizer step; result.loss
    model.load_state_dict(trainer.state_dict())
    trainer.save("run")                        # resume later with ampc.load("run")

`model` is a torch.nn.Module whose forward returns the loss (exported here with torch.onnx in
training mode, constant folding off), an ONNX file or a graph-dialect model file. Compilation
runs the `ampc` tool (`ampc plan --train`, the options of `ampc compile` under Python names);
training runs the plan in this process through the runtime (`_ampc`, no MLIR), on the GPU or
the CPU as the training executables choose.
Failures raise ampc.Error with ampc's one-line message.
"""

import atexit
import dataclasses
import glob
import os
import re
import shutil
import subprocess
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Union

from . import _ampc

Error = _ampc.Error

__all__ = ["compile", "load", "Trainer", "StepResult", "Report", "Error"]


def _tool():
    """The `ampc` executable: $AMPC, else the build tree's, else the one on PATH."""
    if os.environ.get("AMPC"):
        return os.environ["AMPC"]
    here = os.path.dirname(os.path.abspath(__file__))
    built = os.path.join(here, "..", "..", "compiler", "ampc")
    if os.path.exists(built):
        return os.path.normpath(built)
    found = shutil.which("ampc")
    if not found:
        raise Error("cannot find the ampc tool: set AMPC to its path")
    return found


def _numpy(value):
    """value as a NumPy array without a copy where its layout allows (CPU torch tensors too)."""
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach()
        if value.dtype.is_floating_point and str(value.dtype) != "torch.float32":
            value = value.float()
        if str(value.dtype) == "torch.bool":
            value = value.float()
        return value.cpu().numpy()
    import numpy
    return numpy.asarray(value)


def _export(module, example_inputs, path, input_names):
    """Exports module (its forward returning the loss) as torch.onnx does for training: train()
    mode, no constant folding, its buffers as they were (the export runs the module once)."""
    import inspect
    import torch
    if input_names is None:
        parameters = list(inspect.signature(module.forward).parameters)
        input_names = parameters[:len(example_inputs)]
    buffers = {name: value.clone() for name, value in module.named_buffers()}
    was_training = module.training
    module.train()
    torch.onnx.export(module, tuple(example_inputs), path, input_names=list(input_names),
                      output_names=["loss"], opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    with torch.no_grad():
        for name, value in module.named_buffers():
            value.copy_(buffers[name])
    module.train(was_training)
    if buffers:
        import onnx
        from onnx import numpy_helper
        exported = onnx.load(path)
        for initializer in exported.graph.initializer:
            if initializer.name in buffers:
                initializer.CopyFrom(numpy_helper.from_array(buffers[initializer.name].numpy(),
                                                             initializer.name))
        onnx.save(exported, path)
    return list(input_names)


@dataclasses.dataclass
class StepResult:
    """What one optimizer step did."""
    loss: float
    grad_norm: float
    lr: float
    #: The loss scale the step used (fp16), 0 without loss scaling.
    loss_scale: float
    #: Whether an overflow made the step skip its update (fp16).
    skipped: bool


@dataclasses.dataclass
class Report:
    """An `ampc report`: its text, and its table's rows as dicts (the precision report's: op,
    location, compute, accumulate, storage, rule)."""
    text: str
    rows: list

    def __str__(self):
        return self.text


class Trainer:
    """A compiled model in training: step() takes a whole batch, micro_step() one micro-batch."""

    def __init__(self, plan_path: str, seed: int = 0, total_steps: int = 0,
                 device: str = "auto", report_args: Optional[tuple] = None) -> None:
        self._plan = _ampc.PlanTrainer(plan_path, seed, device)
        #: "cpu" or "cuda"; with device="auto", note says why it is the CPU.
        self.device = self._plan.device
        self.note = self._plan.note
        self._inputs = self._plan.inputs()
        self._pending = 0
        self._step = 0
        self._micro = 0
        self._total_steps = total_steps
        self._report_args = report_args
        self.accum_steps = self._plan.accumulation_steps

    @property
    def input_names(self) -> List[str]:
        return [name for name, _, _ in self._inputs]

    def _arrays(self, inputs, rows=None):
        if len(inputs) != len(self._inputs):
            raise Error("the model takes %d inputs (%s), got %d" % (
                len(self._inputs), ", ".join(self.input_names), len(inputs)))
        return {name: _numpy(value) for (name, _, _), value in zip(self._inputs, inputs)}

    def micro_step(self, *inputs: Any) -> Optional[StepResult]:
        """Runs one micro-batch forward and backward into the gradient accumulators; the
        optimizer step follows the accum_steps-th. Returns its StepResult then, else None."""
        self._plan.micro_step(self._arrays(inputs), self._micro, self._total_steps)
        self._micro += 1
        self._pending += 1
        if self._pending < self.accum_steps:
            return None
        self._pending = 0
        metrics = self._plan.optimizer_step(self._step, self._total_steps)
        self._step += 1
        return StepResult(metrics["loss"], metrics["grad_norm"], metrics["lr"],
                          metrics["loss_scale"], bool(metrics["skipped"]))

    def step(self, *inputs: Any) -> StepResult:
        """One optimizer step on one batch: each input holds accum_steps x the micro-batch rows,
        split into micro-batches in order."""
        if self._pending:
            raise Error("%d micro-batches of this step were given with micro_step(); finish the "
                        "step with micro_step()" % self._pending)
        arrays = [_numpy(value) for value in inputs]
        if len(arrays) != len(self._inputs):
            raise Error("the model takes %d inputs (%s), got %d" % (
                len(self._inputs), ", ".join(self.input_names), len(arrays)))
        result = None
        for k in range(self.accum_steps):
            parts = []
            for (name, _, shape), array in zip(self._inputs, arrays):
                rows = shape[0]
                if array.ndim != len(shape) or array.shape[0] != rows * self.accum_steps:
                    raise Error("input '%s' takes %d rows per step (%d micro-batch%s of %s), "
                                "got shape %s" % (name, rows * self.accum_steps, self.accum_steps,
                                                  "" if self.accum_steps == 1 else "es",
                                                  list(shape), list(array.shape)))
                parts.append(array[k * rows:(k + 1) * rows])
            result = self.micro_step(*parts)
        return result

    def evaluate(self, *inputs: Any) -> float:
        """The loss of one micro-batch, forward only, in evaluation mode (running statistics)."""
        return self._plan.evaluate(self._arrays(inputs))

    def report(self, kind: str = "precision") -> Report:
        """`ampc report KIND` of the compiled model ("precision" or "memory"), as a Report: its
        text, and for precision its rows (op, location, compute, accumulate, storage, rule)."""
        if kind not in ("precision", "memory"):
            raise Error("report is 'precision' or 'memory', got '%s'" % kind)
        if self._report_args is None:
            raise Error("this trainer was not made by ampc.compile, so it has no model to report")
        source, options = self._report_args
        run = subprocess.run([_tool(), "report", kind, source] + options, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        if run.returncode != 0:
            raise Error((run.stderr.strip().splitlines() or ["ampc report failed"])[0])
        rows = []
        if kind == "precision":
            header = None
            for line in run.stdout.splitlines():
                fields = line.split()
                if fields[:2] == ["op", "location"]:
                    header = fields
                elif header and len(fields) == len(header):
                    rows.append(dict(zip(header, fields)))
                elif header and not fields:
                    header = None
        return Report(run.stdout, rows)

    def state_dict(self) -> Dict[str, Any]:
        """Parameters (fp32 master weights) and running statistics under the model's names, as
        torch tensors when torch is importable (module.load_state_dict takes them)."""
        state = self._plan.state_dict()
        try:
            import torch
        except ImportError:
            return state
        return {name: torch.from_numpy(value) for name, value in state.items()}

    @property
    def steps_done(self) -> int:
        """The optimizer steps taken (counting those a loaded checkpoint had taken)."""
        return self._step

    def save(self, path: Union[str, os.PathLike]) -> str:
        """Writes the training state to the folder path, as the training executables' checkpoints
        (docs/checkpoint-format.md): model.plan and step-NNNNNN.ckpt, each written atomically.
        ampc.load(path) continues bit for bit. Only between optimizer steps (not with micro-batches
        of a step pending). Returns the checkpoint's path."""
        if self._pending:
            raise Error("%d micro-batches of step %d were given with micro_step(); save after the "
                        "step's last" % (self._pending, self._step + 1))
        meta = {"micro_step": str(self._micro), "total_steps": str(self._total_steps),
                "saved_by": "ampc python"}
        if self._report_args is not None:
            meta["source"] = self._report_args[0]
            meta["compile_options"] = " ".join(self._report_args[1])
        return self._plan.save(os.fspath(path), self._step, meta)

    def load_state_dict(self, state: Dict[str, Any], strict: bool = True) -> None:
        """Sets parameters and running statistics from a state_dict (PyTorch's names)."""
        self._plan.load_state_dict({name: _numpy(value) for name, value in state.items()},
                                   strict)


def load(path: Union[str, os.PathLike], device: str = "auto") -> Trainer:
    """The Trainer that Trainer.save wrote to the folder path (its newest checkpoint), or to the
    checkpoint file path (model.plan beside it), ready to continue bit for bit: weights,
    optimizer moments, loss scale, step counts and seed as they were. device as compile's; the
    checkpoint must come from the same backend (the numerics of the CPU's and the GPU's differ).
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        found = []
        for name in glob.glob(os.path.join(path, "step-*.ckpt")):
            match = re.fullmatch(r"step-(\d+)\.ckpt", os.path.basename(name))
            if match:
                found.append((int(match.group(1)), name))
        if not found:
            raise Error("%s: no checkpoint (step-NNNNNN.ckpt) to load" % path)
        checkpoint = max(found)[1]
        folder = path
    else:
        checkpoint = path
        folder = os.path.dirname(path) or "."
        if not os.path.exists(path):
            raise Error("%s: no such checkpoint" % path)
    plan = os.path.join(folder, "model.plan")
    if not os.path.exists(plan):
        raise Error("%s: no model.plan beside the checkpoint (Trainer.save writes both)" % folder)
    trainer = Trainer(plan, device=device)
    meta = trainer._plan.restore(checkpoint)
    trainer._step = int(meta["step"])
    trainer._micro = int(meta.get("micro_step", trainer._step * trainer.accum_steps))
    trainer._total_steps = int(meta.get("total_steps", "0"))
    if "source" in meta and os.path.exists(meta["source"]):
        trainer._report_args = (meta["source"], meta.get("compile_options", "").split())
    return trainer


def compile(model: Any, example_inputs: Optional[Sequence[Any]] = None, *,
            precision: str = "bf16", accum_steps: int = 1, lr: Optional[float] = None,
            optimizer: Optional[str] = None, weight_decay: Optional[float] = None,
            momentum: Optional[float] = None, clip_norm: Optional[float] = None,
            memory_budget: Optional[str] = None, loss_scaling: Optional[str] = None,
            init_scale: Optional[float] = None, growth_factor: Optional[float] = None,
            backoff_factor: Optional[float] = None, growth_interval: Optional[int] = None,
            input_names: Optional[Sequence[str]] = None, seed: int = 0, total_steps: int = 0,
            device: str = "auto", extra_args: Sequence[str] = ()) -> Trainer:
    """Compiles model for training and returns its Trainer.

    model: a torch.nn.Module whose forward returns the scalar loss (with example_inputs, the
    batch of one micro step), an ONNX file or a graph-dialect model file. The options are
    `ampc compile`'s: precision ("bf16", "fp16", "fp32"), accum_steps, lr, optimizer ("adamw",
    "sgd"), weight_decay, momentum, clip_norm, memory_budget ("50%"), and loss scaling as
    GradScaler's (loss_scaling "auto", "dynamic", "none" or "static=S"; init_scale,
    growth_factor, backoff_factor, growth_interval); extra_args passes others. device is the
    executables' --device: "auto" (the GPU when there is one and the plan has GPU code, else the
    CPU: Trainer.note says why), "cpu" or "cuda" (the GPU, or ampc.Error saying why not).
    The parameters start from the module's (or the file's) values.
    """
    work = tempfile.mkdtemp(prefix="ampc-")
    if isinstance(model, (str, os.PathLike)):
        source = os.fspath(model)
    else:
        if example_inputs is None:
            raise Error("compiling a torch module needs example_inputs, the batch of one micro "
                        "step")
        # The export stays (for Trainer.report) until the process ends.
        exports = tempfile.mkdtemp(prefix="ampc-model-")
        atexit.register(shutil.rmtree, exports, ignore_errors=True)
        source = os.path.join(exports, "model.onnx")
        _export(model, example_inputs, source, input_names)
    options = ["--precision", precision, "--accum-steps", str(accum_steps)]
    for flag, value in [("--lr", lr), ("--optimizer", optimizer), ("--weight-decay", weight_decay),
                        ("--momentum", momentum), ("--clip-norm", clip_norm),
                        ("--memory-budget", memory_budget), ("--loss-scaling", loss_scaling),
                        ("--initial-loss-scale", init_scale),
                        ("--loss-scale-growth-factor", growth_factor),
                        ("--loss-scale-backoff-factor", backoff_factor),
                        ("--loss-scale-growth-interval", growth_interval)]:
        if value is not None:
            options += [flag, str(value)]
    options += list(extra_args)
    args = [_tool(), "plan", source, "--train", "-o", os.path.join(work, "model.plan")] + options
    try:
        run = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if run.returncode != 0:
            lines = [line for line in run.stderr.splitlines() if "error" in line] or \
                run.stderr.splitlines() or ["ampc exited with status %d" % run.returncode]
            raise Error(lines[0])
        # The trainer holds the plan once loaded; the files go.
        return Trainer(os.path.join(work, "model.plan"), seed=seed, total_steps=total_steps,
                       device=device, report_args=(source, options))
    finally:
        shutil.rmtree(work, ignore_errors=True)
