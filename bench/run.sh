#!/usr/bin/env bash
# run.sh: validate and benchmark ampc on this machine's GPU, from a GPU bundle
# (bench/gpu-bundle.sh writes the bundle and copies this script to its root).
#
#   ./run.sh RESULTS_DIR [PHASE...]
#
# Phases (default: all, in this order):
#   tests      every GPU test binary (gtest JSON in RESULTS_DIR/tests)
#   attention  the flash-attention kernels (fp32-FMA and tensor-core) and cuDNN's
#              fused attention timed at GPT-124M's shapes, their outputs compared at
#              that size, and PyTorch's scaled_dot_product_attention timed at the same
#              shapes
#   agree      the example models trained on the GPU against the CPU backend's
#              loss curves from the same seed (bench/agree.py), the end-to-end
#              tiny GPT, and fp16 loss scaling under injected overflows
#   sanitizer  compute-sanitizer memcheck of the tiny GPT's training
#   lifecycle  a run's lifecycle on the GPU against the CPU: validation loss,
#              moving average, exported weights, --init-from (bf16 copies) and
#              resuming from a checkpoint the GPU wrote
#   profile    --profile of gpt124m, and of gpt10m in bf16 and fp16: where a step's time goes
#   kernels    Nsight Compute's counters (ncu) of the kernels furthest from their floors:
#              the attention kernels at GPT-124M's shape and gpt124m's classifier, layer
#              norms and AdamW (not in the default list: run it by name)
#   bench      ampc and PyTorch side by side (bench/bench.py): the table
#   curves     GPT-10M on real text, 2000 steps, fp32/bf16/fp16, ampc and PyTorch
# BENCH_ARGS and CURVES_ARGS add flags to bench.py in those phases, to fit a short visit:
#   BENCH_ARGS="--models gpt124m --torch-variants bf16-flash,bf16-compile" ./run.sh R bench
# Logs and JSON go to RESULTS_DIR; a one-screen summary to stdout. Exit status 0
# when every phase passed, 1 when one failed, 2 when there is no GPU.
set -u
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || { echo "usage: $0 RESULTS_DIR [PHASE...]" >&2; exit 2; }
results=$1
shift
phases=("$@")
[ ${#phases[@]} -gt 0 ] || phases=(tests attention agree sanitizer lifecycle profile bench curves)
mkdir -p "$results"
results=$(cd "$results" && pwd)

# Libraries: the toolkit's, else a PyTorch wheel's nvidia/* folders.
for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$dir" ] && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$dir
done
python=${PYTHON:-python3}
if wheel_libs=$("$python" -c 'import nvidia, os; p = nvidia.__path__[0]; print(":".join(
    os.path.join(p, d, "lib") for d in sorted(os.listdir(p))
    if os.path.isdir(os.path.join(p, d, "lib"))))' 2>/dev/null) && [ -n "$wheel_libs" ]; then
  export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$wheel_libs
fi

if ! nvidia-smi -L >"$results/gpu.txt" 2>&1 || ! grep -q '^GPU ' "$results/gpu.txt"; then
  echo "run.sh: no NVIDIA GPU here (nvidia-smi -L finds none); nothing to run"
  exit 2
fi
nvidia-smi >>"$results/gpu.txt" 2>&1
gpu=$(sed -n '1s/^GPU 0: \(.*\) (UUID.*/\1/p' "$results/gpu.txt")
echo "run.sh: $gpu, $(date -u +%Y-%m-%dT%H:%MZ), results in $results"

summary=()
failed=0
note() { # PHASE STATUS TEXT
  summary+=("$(printf '%-10s %-5s %s' "$1" "$2" "$3")")
  [ "$2" = ok ] || failed=1
}

phase_tests() {
  mkdir -p "$results/tests"
  for binary in "$here"/tests/*_gpu_tests; do
    local name
    name=$(basename "$binary")
    timeout 600 "$binary" \
      --gtest_output="json:$results/tests/$name.json" >"$results/tests/$name.log" 2>&1
    local status=$?
    local passed skipped failures
    passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\{0,1\}\..*/\1/p' "$results/tests/$name.log")
    skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\{0,1\},.*/\1/p' "$results/tests/$name.log")
    failures=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) tests\{0,1\},.*/\1/p' "$results/tests/$name.log")
    local text="${passed:-0} passed, ${skipped:-0} skipped, ${failures:-0} failed"
    if [ $status -eq 0 ] && [ "${skipped:-0}" -eq 0 ]; then
      note tests ok "$name: $text"
    else
      note tests FAIL "$name: $text (exit $status; tests/$name.log)"
      grep -E '^\[  FAILED  \] [A-Za-z]' "$results/tests/$name.log" | head -n 8 |
        sed 's/^/             /' >>"$results/tests/failed.txt"
    fi
  done
}

phase_agree() {
  "$python" "$here/bench/agree.py" check --bundle "$here" --out "$results/agree" \
    >"$results/agree.log" 2>&1
  local status=$?
  while IFS= read -r line; do
    summary+=("           $line")
  done < <(grep -E '^(ok|FAIL|not compared)' "$results/agree.log" | head -n 30)
  if [ $status -eq 0 ]; then note agree ok "GPU and CPU curves agree (agree.log)"
  else note agree FAIL "see agree.log"; fi
}

phase_sanitizer() {
  if ! command -v compute-sanitizer >/dev/null; then
    note sanitizer ok "skipped: no compute-sanitizer on this machine"
    return
  fi
  # ampc's own kernels (--attention ampc): cuDNN's are its own, and timing it against ours
  # under memcheck would only cost minutes.
  timeout 600 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 3 \
    "$here/train/tiny_bf16" --device cuda --steps 4 --quiet --attention ampc \
    >"$results/memcheck.log" 2>&1
  local status=$?
  local errors
  errors=$(sed -n 's/^========= ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$results/memcheck.log")
  if [ $status -eq 0 ] && [ "${errors:-x}" = 0 ]; then
    note sanitizer ok "memcheck of tiny_bf16 (4 steps): 0 errors"
  else
    note sanitizer FAIL "memcheck: ${errors:-?} errors, exit $status (memcheck.log)"
  fi
}

phase_lifecycle() {
  local dir="$results/lifecycle" status=0
  mkdir -p "$dir"
  local log="$dir/lifecycle.log"
  : >"$log"
  # The tiny GPT (vocabulary 256) reads the token files' bytes as text.
  local common=(--steps 20 --seed 3 --data "$here/data/kjv_train.bin" --data-format text
                --val-data "$here/data/kjv_val.bin" --eval-every 5 --eval-batches 4
                --ema-decay 0.9 --quiet)
  local device
  for device in cpu cuda; do
    rm -rf "$dir/ckpt-$device"
    "$here/train/tiny_fp32" "${common[@]}" --device "$device" --log "$dir/$device.jsonl" \
      --export-weights "$dir/$device.safetensors" --export-ema "$dir/$device-ema.safetensors" \
      --checkpoint-dir "$dir/ckpt-$device" --checkpoint-every 10 >>"$log" 2>&1 || status=1
  done
  # Training and validation losses, trained weights and moving average: GPU against CPU.
  "$python" "$here/bench/agree.py" curves "$dir/cpu.jsonl" "$dir/cuda.jsonl" --tolerance 1e-4 \
    >>"$log" 2>&1 || status=1
  "$python" "$here/bench/agree.py" weights "$dir/cpu.safetensors" "$dir/cuda.safetensors" \
    --tolerance 1e-4 >>"$log" 2>&1 || status=1
  "$python" "$here/bench/agree.py" weights "$dir/cpu-ema.safetensors" \
    "$dir/cuda-ema.safetensors" --tolerance 1e-4 >>"$log" 2>&1 || status=1
  # Resumed on the GPU from its step-10 checkpoint: the uninterrupted GPU run's last 10 steps
  # (not bit for bit: the GPU sums the loss with atomics).
  cp "$dir/cuda.jsonl" "$dir/resumed.jsonl"
  rm -rf "$dir/resume"
  "$here/train/tiny_fp32" "${common[@]}" --device cuda --log "$dir/resumed.jsonl" \
    --resume "$dir/ckpt-cuda/step-000010.ckpt" --checkpoint-dir "$dir/resume" >>"$log" 2>&1 ||
    status=1
  "$python" "$here/bench/agree.py" curves "$dir/cuda.jsonl" "$dir/resumed.jsonl" \
    --tolerance 1e-5 >>"$log" 2>&1 || status=1
  # bf16 from given weights: the parameters and their bf16 copies uploaded.
  for device in cpu cuda; do
    "$here/train/tiny_bf16" --steps 10 --seed 3 --data "$here/data/kjv_train.bin" \
      --data-format text --init-from "$dir/cpu.safetensors" --device "$device" --quiet \
      --log "$dir/init-$device.jsonl" >>"$log" 2>&1 || status=1
  done
  "$python" "$here/bench/agree.py" curves "$dir/init-cpu.jsonl" "$dir/init-cuda.jsonl" \
    --tolerance 2e-2 >>"$log" 2>&1 || status=1
  while IFS= read -r line; do
    summary+=("           $line")
  done < <(grep -E '^(ok|FAIL)' "$log")
  if [ $status -eq 0 ]; then note lifecycle ok "validation, EMA, weights, resume (lifecycle/)"
  else note lifecycle FAIL "see lifecycle/lifecycle.log"; fi
}

phase_attention() {
  "$here/tests/ampc_attention_bench" --json "$results/attention.json" \
    >"$results/attention.txt" 2>&1
  local status=$?
  # PyTorch's SDPA at the same shapes, beside it (the floor the kernels are measured against).
  echo "--- PyTorch scaled_dot_product_attention, same shapes" >>"$results/attention.txt"
  "$python" "$here/bench/attention_torch.py" --json "$results/attention_torch.json" \
    >>"$results/attention.txt" 2>&1 || echo "(PyTorch side failed)" >>"$results/attention.txt"
  if [ $status -eq 0 ]; then note attention ok "attention.txt (kernels timed at GPT shapes)"
  else note attention FAIL "exit $status (attention.txt)"; fi
}

phase_profile() {
  timeout 600 "$here/train/gpt124m_bf16" --device cuda --steps 8 --profile=3 --profile-top 80 \
    --data "$here/data/kjv_train.bin" --quiet >"$results/profile_gpt124m.txt" 2>&1
  local status=$?
  # GPT-10M in bf16 and fp16 side by side: where fp16's extra time goes (loss scaling's
  # unscaling accumulates, the f16 conversions, the scale's reads).
  local precision
  for precision in bf16 fp16; do
    timeout 120 "$here/train/gpt10m_$precision" --device cuda --steps 8 --profile=3 \
      --profile-top 60 --data "$here/data/kjv_train.bin" --quiet \
      >"$results/profile_gpt10m_$precision.txt" 2>&1 || status=$?
  done
  if [ $status -eq 0 ]; then note profile ok "profile_gpt124m.txt, profile_gpt10m_{bf16,fp16}.txt"
  else note profile FAIL "exit $status (profile_gpt*.txt)"; fi
}

phase_kernels() {
  local ncu
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null |
    head -1)
  if [ -z "$ncu" ]; then note kernels FAIL "no ncu on this machine"; return; fi
  # Throughput against the chip's peaks, occupancy, where warps stall, the pipes' use and the
  # memory traffic; the clocks left as they are (--clock-control none).
  local sections=(--clock-control none --section SpeedOfLight --section Occupancy
    --section LaunchStats --section WarpStateStats --section SchedulerStats
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section InstructionStats)
  local status=0
  # The tensor-core kernels alone at GPT-124M's causal shape (--mma-only): each launched 4 times
  # (3 warm-up, 1 timed), every launch of the forward, dq, dk/dv and the variants profiled.
  timeout 240 "$ncu" "${sections[@]}" --launch-count 40 \
    --kernel-name 'regex:(fwd|bwd_dq|bwd_dkdv)_bf16_d64_causal$|ampc_bench_' \
    "$here/tests/ampc_attention_bench" --iterations 1 --mma-only \
    >"$results/ncu_attention.txt" 2>&1 || status=1
  # One family at a time (a launch count over all of them would spend it on the first layers):
  # the first two launches of each, from one eager step of gpt124m (with ampc's attention: no
  # family here is attention, and choosing cuDNN's would only add its start-up under ncu).
  : >"$results/ncu_gpt124m.txt"
  local family
  for family in 'cross_entropy_loss_grad' 'reduction_layernorm_[0-9a-f]+$' \
    'layernorm_grad_[0-9a-f]+$' 'layernorm_grad_params' 'sum_columns' 'adamw'; do
    echo "=== $family" >>"$results/ncu_gpt124m.txt"
    timeout 90 "$ncu" "${sections[@]}" --launch-count 2 --kernel-name "regex:$family" \
      "$here/train/gpt124m_bf16" --device cuda --steps 2 --profile=1 --attention ampc \
      --data "$here/data/kjv_train.bin" --quiet >>"$results/ncu_gpt124m.txt" 2>&1 || status=1
  done
  if [ $status -eq 0 ]; then note kernels ok "ncu_attention.txt, ncu_gpt124m.txt"
  else note kernels FAIL "see ncu_attention.txt, ncu_gpt124m.txt"; fi
}

phase_bench() {
  # shellcheck disable=SC2086  # BENCH_ARGS is a list of flags
  "$python" "$here/bench/bench.py" --bundle "$here" --out "$results/bench" ${BENCH_ARGS:-} \
    >"$results/bench.txt" 2>"$results/bench.log"
  local status=$?
  if [ $status -eq 0 ]; then note bench ok "bench.txt, bench/bench.json"
  else note bench FAIL "exit $status (bench.log)"; fi
}

phase_curves() {
  # shellcheck disable=SC2086  # CURVES_ARGS is a list of flags
  "$python" "$here/bench/bench.py" --bundle "$here" --out "$results/curves" --curves \
    ${CURVES_ARGS:-} >"$results/curves.txt" 2>"$results/curves.log"
  local status=$?
  if [ $status -eq 0 ]; then note curves ok "curves.txt"
  else note curves FAIL "exit $status (curves.log)"; fi
}

for phase in "${phases[@]}"; do
  case $phase in
    tests|attention|agree|sanitizer|lifecycle|profile|kernels|bench|curves)
      start=$(date +%s)
      "phase_$phase"
      echo "run.sh: $phase took $(( $(date +%s) - start )) s" >&2 ;;
    *) echo "run.sh: unknown phase '$phase'" >&2; exit 2 ;;
  esac
done

echo "=== summary ($gpu)"
printf '%s\n' "${summary[@]}"
[ -f "$results/tests/failed.txt" ] && cat "$results/tests/failed.txt"
for table in attention.txt bench.txt curves.txt; do
  [ -s "$results/$table" ] && cat "$results/$table"
done
exit $failed
