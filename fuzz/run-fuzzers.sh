#!/usr/bin/env bash
# run-fuzzers.sh FUZZ_BUILD [--regression] [--time SECONDS] [TARGET...]: runs the fuzz targets
# built in FUZZ_BUILD (make fuzz-build), all of them unless TARGETs (model, onnx, plan,
# checkpoint, safetensors, tokens, numpy) are named.
#   --regression      run each target once over every file of its corpus, fuzz/corpus/TARGET/
#   --time SECONDS    then fuzz each target for SECONDS, starting from its corpus (0: skip)
# New inputs, crash artifacts and logs go to FUZZ_BUILD/fuzz-runs/TARGET/, never into the
# repository. One line per target says what it did; any crash, sanitizer report, leak, timeout
# or out-of-memory fails the script with the log's last lines and the artifact's path. Add such
# an artifact to fuzz/corpus/TARGET/ (as crash-WHAT) once the defect is fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: run-fuzzers.sh FUZZ_BUILD [--regression] [--time SECONDS] [TARGET...]}
shift
regression=0
seconds=0
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --regression) regression=1 ;;
    --time) seconds=${2:?--time needs seconds}; shift ;;
    *) targets+=("$1") ;;
  esac
  shift
done
[ ${#targets[@]} -gt 0 ] || targets=(model onnx plan checkpoint safetensors tokens numpy)

# Limits for every run: one input may take 25 s (the model pipeline under ASan takes well under
# a second on the corpus) and the process 2 GiB; a single allocation over that is reported as
# well (libFuzzer's malloc limit defaults to the RSS limit). ONNX import may hold an import-time
# constant of 2^26 elements (512 MiB as doubles) and its copy, so fuzz_onnx gets 4 GiB.
memory() { [ "$1" = onnx ] && echo 4096 || echo 2048; }
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

failed=0
fail() { # TARGET LOG WHAT
  echo "FAIL: fuzz_$1 $3; log: $2" >&2
  grep -E "ERROR|SUMMARY|runtime error|Test unit written" "$2" | head -20 >&2 || true
  tail -5 "$2" >&2
  failed=1
}

for target in "${targets[@]}"; do
  binary="$build/fuzz/fuzz_$target"
  corpus="fuzz/corpus/$target"
  work="$build/fuzz-runs/$target"
  [ -x "$binary" ] || { echo "error: $binary is not built (make fuzz-build)" >&2; exit 1; }
  mkdir -p "$work/new" "$work/artifacts"
  limits=(-timeout=25 -rss_limit_mb="$(memory "$target")")
  dict=()
  [ -f "fuzz/$target.dict" ] && dict=(-dict="fuzz/$target.dict")
  if [ "$regression" = 1 ]; then
    files=("$corpus"/*)
    start=$SECONDS
    if "$binary" "${limits[@]}" "${files[@]}" > "$work/regression.log" 2>&1; then
      echo "fuzz_$target: ${#files[@]} corpus files, no failure ($((SECONDS - start)) s)"
    else
      fail "$target" "$work/regression.log" "failed on its corpus"
    fi
  fi
  if [ "$seconds" -gt 0 ]; then
    log="$work/fuzz.log"
    if "$binary" "${limits[@]}" "${dict[@]}" -max_total_time="$seconds" -print_final_stats=1 \
         -artifact_prefix="$work/artifacts/" "$work/new" "$corpus" > "$log" 2>&1; then
      runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
      echo "fuzz_$target: ${runs:-?} executions in $seconds s, no failure" \
           "($(ls "$work/new" | wc -l) inputs beyond the corpus in $work/new)"
    else
      fail "$target" "$log" "failed while fuzzing (artifact in $work/artifacts/)"
    fi
  fi
done
exit $failed
