#!/usr/bin/env bash
# run-gpu-tests.sh: run every GPU test binary of a build directory.
#
#   test/gpu/run-gpu-tests.sh BUILD_DIR [--require-gpu] [-- GTEST_ARGS...]
#
# Builds nothing. Runs each executable named *_gpu_tests under BUILD_DIR
# (ampc_gpu_tests, the flash-attention kernels; ampc_cuda_runtime_gpu_tests,
# the CUDA device layer; ampc_cuda_executor_gpu_tests, the CUDA backend
# against the CPU backend on the example models), then an end-to-end run:
# BUILD_DIR/compiler/ampc compiles examples/gpt/tiny.mlir and the binary
# trains 50 steps with --device cuda, whose loss must fall. Prints its output
# and a summary line per binary, and exits non-zero if anything fails. Without a GPU every test skips and the
# script passes; on a GPU machine pass --require-gpu so that skipped tests (no
# driver found, no device) count as failures instead of passing silently.
# Arguments after -- go to every binary (e.g. --gtest_filter=CudaMatmul*).
set -u

usage() {
  echo "usage: $0 BUILD_DIR [--require-gpu] [-- GTEST_ARGS...]" >&2
  exit 2
}

[ $# -ge 1 ] || usage
build_dir=$1
shift
require_gpu=0
gtest_args=()
while [ $# -gt 0 ]; do
  case $1 in
    --require-gpu) require_gpu=1 ;;
    --) shift; gtest_args=("$@"); break ;;
    *) usage ;;
  esac
  shift
done

if [ ! -d "$build_dir" ]; then
  echo "run-gpu-tests: no build directory '$build_dir'" >&2
  exit 2
fi

mapfile -t binaries < <(find "$build_dir" -type f -perm -u+x -name '*_gpu_tests' | sort)
if [ ${#binaries[@]} -eq 0 ]; then
  echo "run-gpu-tests: no *_gpu_tests executables under '$build_dir' (build them first," \
       "with the CUDA toolkit present)" >&2
  exit 2
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed=0
summary=()
for binary in "${binaries[@]}"; do
  name=$(basename "$binary")
  echo "=== $name"
  "$binary" "${gtest_args[@]}" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  # gtest's closing summary: "[  PASSED  ] N tests." and "[  SKIPPED ] N tests, listed below:".
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\{0,1\}\..*/\1/p' "$log" | tail -n 1)
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\{0,1\}, listed below:.*/\1/p' "$log" | tail -n 1)
  passed=${passed:-0}
  skipped=${skipped:-0}
  if [ "$status" -ne 0 ]; then
    verdict="FAIL (exit status $status)"
    failed=1
  elif [ "$require_gpu" -eq 1 ] && [ "$skipped" -gt 0 ]; then
    verdict="FAIL ($skipped skipped with --require-gpu)"
    failed=1
  else
    verdict="ok"
  fi
  summary+=("$name: $verdict; $passed passed, $skipped skipped")
done

# End to end: compile the tiny GPT and train it on the GPU.
repo_root=$(cd "$(dirname "$0")/../.." && pwd)
ampc="$build_dir/compiler/ampc"
work=$(mktemp -d)
trap 'rm -f "$log"; rm -rf "$work"' EXIT
echo "=== end to end: ampc compile examples/gpt/tiny.mlir --lr 1e-3, --steps 50 --device cuda"
if [ ! -x "$ampc" ]; then
  verdict="FAIL (no $ampc)"
  failed=1
elif ! AMPC_KERNEL_CACHE="$work/cache" "$ampc" compile "$repo_root/examples/gpt/tiny.mlir" \
       --lr 1e-3 -o "$work/train_tiny" 2>&1 | tee "$log"; then
  verdict="FAIL (ampc compile)"
  failed=1
else
  "$work/train_tiny" --steps 50 --device cuda --log "$work/tiny.jsonl" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  if [ "$status" -ne 0 ] && grep -q -e "no NVIDIA driver found" -e "no CUDA GPU found" "$log" \
       && [ "$require_gpu" -eq 0 ]; then
    verdict="skipped (no GPU)"
  elif [ "$status" -ne 0 ]; then
    verdict="FAIL (exit status $status)"
    failed=1
  else
    # The first loss and the mean of the last ten.
    losses=$(sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$work/tiny.jsonl")
    first=$(echo "$losses" | head -n 1)
    last=$(echo "$losses" | tail -n 10 | awk '{ s += $1 } END { if (NR) printf "%.4f", s / NR }')
    if grep -q '"device": "cuda"' "$work/tiny.jsonl" &&
       awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }'; then
      verdict="ok; loss $first -> $last"
    else
      verdict="FAIL (loss $first -> $last, or the log does not say cuda)"
      failed=1
    fi
  fi
fi
summary+=("end-to-end tiny GPT on cuda: $verdict")

echo "=== summary"
printf '%s\n' "${summary[@]}"
exit $failed
