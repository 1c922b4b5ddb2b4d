# check-loss-scale.py LOG SCALES SKIPPED: the training log's per-step loss scales equal SCALES
# (comma-separated) and exactly the steps in SKIPPED (1-based, comma-separated) were skipped.
import json
import sys

records = [json.loads(line) for line in open(sys.argv[1])]
scales = [float(s) for s in sys.argv[2].split(",")]
skipped = {int(s) for s in sys.argv[3].split(",") if s}
got_scales = [r["loss_scale"] for r in records]
got_skipped = {r["step"] for r in records if r["skipped"]}
if got_scales != scales:
    sys.exit(f"check-loss-scale: scales {got_scales}, expected {scales}")
if got_skipped != skipped:
    sys.exit(f"check-loss-scale: skipped steps {sorted(got_skipped)}, expected {sorted(skipped)}")
print(f"ok: {len(records)} steps, skipped {sorted(got_skipped)}")
