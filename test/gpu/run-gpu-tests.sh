#!/usr/bin/env bash
# run-gpu-tests.sh: run every GPU test binary of a build directory.
#
#   test/gpu/run-gpu-tests.sh BUILD_DIR [--require-gpu] [-- GTEST_ARGS...]
#
# Runs each executable named *_gpu_tests under BUILD_DIR (today
# ampc_gpu_tests, the flash-attention kernels, and ampc_cuda_runtime_gpu_tests,
# the CUDA device layer), prints its output and a summary line per binary, and
# exits non-zero if any binary fails. Without a GPU every test skips and the
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

echo "=== summary"
printf '%s\n' "${summary[@]}"
exit $failed
