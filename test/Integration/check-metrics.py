# check-metrics.py: checks a training executable's JSONL metrics log.
#
#   check-metrics.py LOG STEPS UNIT PER_STEP [MAX_FINAL_LOSS]
#       LOG has STEPS records, each a JSON object with step = 1..STEPS, finite loss, grad_norm
#       and lr, UNIT ("tokens" or "samples") = step * PER_STEP, UNIT_per_s, elapsed_s and step_ms; the
#       mean loss of the last fifth is below the first loss and, if given, MAX_FINAL_LOSS.
#   check-metrics.py --same-losses LOG1 LOG2
#       the two logs have identical losses and gradient norms (elapsed times may differ).
import json
import math
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def fail(message):
    print(f"check-metrics: {message}")
    sys.exit(1)


if sys.argv[1] == "--same-losses":
    a, b = load(sys.argv[2]), load(sys.argv[3])
    key = lambda r: (r["step"], r["loss"], r["grad_norm"], r["lr"])
    if [key(r) for r in a] != [key(r) for r in b]:
        fail(f"{sys.argv[2]} and {sys.argv[3]} differ")
    sys.exit(0)

path, steps, unit, per_step = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
records = load(path)
if len(records) != steps:
    fail(f"{len(records)} records, expected {steps}")
expected_keys = {"step", "loss", "grad_norm", "lr", unit, unit + "_per_s", "elapsed_s", "step_ms"}
for i, record in enumerate(records):
    if set(record) != expected_keys:
        fail(f"record {i + 1} has keys {sorted(record)}, expected {sorted(expected_keys)}")
    if record["step"] != i + 1 or record[unit] != (i + 1) * per_step:
        fail(f"record {i + 1}: step {record['step']}, {unit} {record[unit]}")
    for key in ("loss", "grad_norm", "lr", unit + "_per_s", "elapsed_s", "step_ms"):
        if not isinstance(record[key], (int, float)) or not math.isfinite(record[key]):
            fail(f"record {i + 1}: {key} is {record[key]}")
    if record["step_ms"] < 0:
        fail(f"record {i + 1}: step_ms is negative")
first = records[0]["loss"]
tail = records[-max(1, steps // 5):]
final = sum(r["loss"] for r in tail) / len(tail)
if not final < first:
    fail(f"the loss did not fall: {first} -> {final}")
if len(sys.argv) > 5 and not final < float(sys.argv[5]):
    fail(f"final loss {final} is not below {sys.argv[5]}")
print(f"ok: {steps} steps, loss {first:.4f} -> {final:.4f}")
