# lit.cfg.py: configuration of ampc's lit suite (FileCheck tests on ampc-opt and ampc).
import os

import lit.formats
from lit.llvm import llvm_config

config.name = "ampc"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.ampc_obj_root, "test")
# Inputs hold model files used by RUN lines; unit holds GoogleTest sources.
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "unit", "README.md"]

config.environment["FILECHECK_OPTS"] = "--enable-var-scope --dump-input=fail"
# `ampc compile` keeps the kernels it compiles with NVRTC in one cache for the whole suite, so
# each distinct kernel is compiled once per build tree rather than once per test.
config.environment["AMPC_KERNEL_CACHE"] = os.path.join(config.ampc_obj_root, "test", "kernel-cache")
config.substitutions.append(("%ampc_src_root", config.ampc_src_root))
config.substitutions.append(("%examples", os.path.join(config.ampc_src_root, "examples")))
config.substitutions.append(("%ampc_bin", os.path.join(config.ampc_tools_dir, "ampc")))

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.ampc_tools_dir, append_path=True)
llvm_config.add_tool_substitutions(["ampc-opt", "ampc"], [config.ampc_tools_dir])

if config.ampc_have_cuda:
    config.available_features.add("cuda")
    # The scripted stand-in for libcuda (test/unit/runtime/CudaFakeDriver.cpp): a "GPU" that
    # opens but runs nothing, for the paths where a GPU is there and fails.
    config.substitutions.append(("%fake_cuda_driver", os.path.join(
        config.ampc_obj_root, "test", "unit", "runtime", "libampc_cuda_fake_driver.so")))
    # The recording stand-in for libcuda, cuBLASLt and (one-rank) NCCL of the dry run
    # (test/unit/dryrun): the CUDA path of a training executable, checked without a GPU.
    config.substitutions.append(("%recording_cuda", os.path.join(
        config.ampc_obj_root, "test", "unit", "dryrun", "libampc_recording_cuda.so")))

# A machine with a working NVIDIA GPU: tests of what happens without one do not apply there.
import shutil
import subprocess
nvidia_smi = shutil.which("nvidia-smi")
if nvidia_smi:
    try:
        listing = subprocess.run([nvidia_smi, "-L"], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True, timeout=60).stdout
        if listing.startswith("GPU "):
            config.available_features.add("gpu")
    except (OSError, subprocess.TimeoutExpired):
        pass

# PyTorch (Debian's python3-torch, for the CPU) is the oracle of the tests that compare ampc with
# the reference model the GPU benchmark runs (bench/torch_gpt.py). Debian's interpreter is named
# explicitly: another python3 may come first on PATH without torch.
torch_python = "/usr/bin/python3"


def python_imports(module):
    """Whether Debian's interpreter imports module."""
    try:
        return subprocess.run([torch_python, "-c", "import " + module], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


# torchvision (python3-torchvision) gives the vision models; the ONNX tests export models with
# torch.onnx and write ONNX files with the onnx package's helper API (Debian's python3-onnx).
for module in ("torch", "torchvision", "onnx"):
    if python_imports(module):
        config.available_features.add(module)
config.substitutions.append(("%torch_python", torch_python))
# The Python package, when the build made it (pybind11-dev and python3-dev present).
ampc_python = os.path.join(config.ampc_obj_root, "python")
if os.path.exists(os.path.join(ampc_python, "ampc", "__init__.py")):
    config.available_features.add("ampc-python")
config.substitutions.append(("%ampc_python_path", ampc_python))
# The word "ampc" as an argument (torch_gpt.py --init ampc), past the tool substitution above.
config.substitutions.append(("%word_ampc", "ampc"))

# Open MPI (openmpi-bin) launches the data parallel tests: several ranks of one training executable
# on this machine. --oversubscribe lets 4 ranks share fewer cores; the OMPI_ALLOW_* variables let
# them start as root (CI containers), as --allow-run-as-root would.
mpirun = shutil.which("mpirun")
if mpirun:
    try:
        version = subprocess.run([mpirun, "--version"], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True, timeout=60).stdout
        if "Open MPI" in version:
            config.available_features.add("mpi")
    except (OSError, subprocess.TimeoutExpired):
        pass
config.environment["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
config.environment["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
config.substitutions.append(("%mpirun", "mpirun --oversubscribe --bind-to none"))
