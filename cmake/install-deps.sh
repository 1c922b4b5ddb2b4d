#!/usr/bin/env bash
# install-deps.sh: installs the Debian 12 packages ampc builds with, if any is missing.
# The CUDA toolkit is optional and never installed here (see README).
set -euo pipefail

# python3-torch (PyTorch 1.13 for the CPU) is the tests' oracle for the benchmark's reference model;
# python3-torchvision (0.14) gives the tests their vision models (ResNet, MobileNet).
# cairo draws the plots of `ampc plot` and `ampc report memory --plot` (found with pkg-config);
# nlohmann-json parses the metrics logs `ampc plot` reads. libonnx-dev (with libprotobuf-dev) reads
# ONNX files for `ampc import`; python3-onnx writes the tests' ONNX files.
# pybind11-dev and python3-dev build the Python package (python/).
# libminizip-dev reads the zip archives of NumPy's .npz files (--data FILE.npz).
# Open MPI launches data parallel runs (mpirun) and the tests of them; training executables open
# its libmpi.so.40 at run time only when mpirun or srun started them, so they link no MPI.
# clang-19 and libfuzzer-19-dev build the fuzz targets (fuzz/, `make fuzz`); libclang-rt-19-dev
# holds the sanitizers' and libFuzzer's runtimes (only recommended by clang, so named here).
packages=(cmake ninja-build g++ make python3 llvm-19-dev libmlir-19-dev mlir-19-tools
          llvm-19-tools libboost-graph-dev googletest libgtest-dev zlib1g-dev python3-torch
          python3-torchvision pkg-config libcairo2-dev nlohmann-json3-dev libonnx-dev
          libprotobuf-dev python3-onnx openmpi-bin libopenmpi-dev libminizip-dev
          pybind11-dev python3-dev clang-19 libfuzzer-19-dev
          libclang-rt-19-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "Installing missing packages: ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
  apt_get=(apt-get)
elif command -v sudo >/dev/null; then
  apt_get=(sudo apt-get)
else
  echo "error: these packages are missing and installing them needs root: ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${apt_get[@]}" update -qq
"${apt_get[@]}" install -y -qq --no-install-recommends "${missing[@]}"
