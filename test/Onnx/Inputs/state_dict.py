"""state_dict.py write MODEL OUT.safetensors | load MODEL IN.safetensors

write: the state_dict of torch_models.py's MODEL (parameters and buffers, PyTorch's dtypes: a
batch norm's num_batches_tracked is int64) as safetensors, its counts set to 3 and its running
means to 0.5, as a trained module's would be, for `--init-from`.
load: loads an ampc --export-weights file into MODEL with load_state_dict(strict=True) and
prints its first batch norm's num_batches_tracked and running mean.
"""

import os
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "..", "..", "bench"))
import safetensors_io  # noqa: E402
import torch_models  # noqa: E402
from compare_torch import read_safetensors  # noqa: E402

what, name, path = sys.argv[1:4]
model = torch_models.make(name)
if what == "write":
    for key, buffer in model.named_buffers():
        if key.endswith("num_batches_tracked"):
            buffer.fill_(3)
        elif key.endswith("running_mean"):
            buffer.fill_(0.5)
    dtypes = {torch.float32: "F32", torch.int64: "I64"}
    safetensors_io.write(path, {key: (dtypes[value.dtype], tuple(value.shape),
                                      value.contiguous().numpy().tobytes())
                                for key, value in model.state_dict().items()})
else:
    tensors, _ = read_safetensors(path)
    model.load_state_dict(tensors, strict=True)
    buffers = dict(model.named_buffers())
    first = sorted(k for k in buffers if k.endswith("num_batches_tracked"))[0]
    prefix = first[:-len("num_batches_tracked")]
    print("loaded %d tensors; %snum_batches_tracked %d, running_mean[0] %.4f"
          % (len(tensors), prefix, int(buffers[first]), buffers[prefix + "running_mean"][0]))
