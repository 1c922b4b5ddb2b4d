"""time_model.py PROFILE REPORT: how far `ampc report time` is from a measured `--profile`.

PROFILE is a training executable's `--profile` output (bench/results/*/profile_*.txt), REPORT
the output of `ampc report time` for the same model and options, both run from the repository
root (so their source locations read alike). Rows are matched by kind, function, source
locations (call sites aside) and per-group GB and GFLOP; a profile lists its slowest rows only,
so the kinds are compared over the matched rows, and the whole step against the profile's
totals. Prints, per matched row, the measured and predicted ms and their ratio; per kind the
same over its matched rows; then the step. Exits 1 when no row matches.

    ./build/compiler/ampc report time examples/gpt/gpt124m.mlir > report.txt
    python3 bench/time_model.py bench/results/2026-11-26-h200/profile_gpt124m.txt report.txt
"""

import collections
import re
import sys

ROW = re.compile(r"\s+([\d.]+)\s+[\d.]+%\s+(\S+)\s+(\S+)\s+(\d+)\s+([\d.]+)\s+(.*)$")


def strip_call_sites(where):
    return re.sub(r" \(called from [^)]*\)", "", where).strip()


def parse_profile(path):
    """(kind, function, where, GB per group, GFLOP per group) -> [ms per step, groups]."""
    rows = collections.defaultdict(lambda: [0.0, 0])
    totals = {}
    # Between GB and the locations: TB/s, "%floor" (newer profiles), GFLOP, TFLOP/s.
    columns = 3
    for line in open(path):
        if line.split()[:2] == ["ms/step", "share"]:
            columns = 4 if "%floor" in line else 3
            continue
        match = ROW.match(line)
        if match:
            ms, kind, function, n, gb, rest = match.groups()
            fields = rest.split()
            gflop = float(fields[columns - 2])
            where = " ".join(fields[columns:])
            n = int(n)
            key = (kind, function, strip_call_sites(where), round(float(gb) / n, 3),
                   round(gflop / n, 1))
            rows[key][0] += float(ms)
            rows[key][1] += n
        for name in ("matmuls", "attention", "memory-bound groups"):
            found = re.match(r"%s\s+(\d+) groups\s+([\d.]+) ms" % re.escape(name), line)
            if found:
                totals[name] = float(found.group(2))
        found = re.search(r": ([\d.]+) ms of group time per step", line)
        if found:
            totals["step"] = float(found.group(1))
    return rows, totals


def parse_report(path):
    rows = {}
    kinds, step = {}, None
    for line in open(path):
        match = re.match(r"\s+([\d.]+)\s+[\d.]+%\s+(\S+)\s+(\S+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+"
                         r"(\S+)\s+([\d.]+)\s+(.*)$", line)
        if match:
            ms, kind, function, n, gb, gflop, _, _, where = match.groups()
            n = int(n)
            rows[(kind, function, where.strip(), round(float(gb) / n, 3),
                  round(float(gflop) / n, 1))] = [float(ms), n]
            continue
        found = re.match(r"\s+(\S+)\s+(\d+) groups\s+([\d.]+) ms", line)
        if found:
            kinds[found.group(1)] = float(found.group(3))
        found = re.match(r"step: ([\d.]+) ms predicted", line)
        if found:
            step = float(found.group(1))
    return rows, kinds, step


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    measured, totals = parse_profile(sys.argv[1])
    predicted, kinds, step = parse_report(sys.argv[2])
    matched = [(key, measured[key], predicted[key]) for key in measured if key in predicted]
    if not matched:
        sys.exit("time_model: no row of the profile matches one of the report")
    print("%9s %9s %6s  %-18s %-15s %s" % ("measured", "model", "ratio", "kind", "function",
                                             "where"))
    by_kind = collections.defaultdict(lambda: [0.0, 0.0])
    for key, (ms, _), (model, _) in sorted(matched, key=lambda m: -m[1][0]):
        print("%9.3f %9.3f %6.2f  %-18s %-15s %s" % (ms, model, model / ms, key[0], key[1],
                                                    key[2][:70]))
        by_kind[key[0]][0] += ms
        by_kind[key[0]][1] += model
    print("by kind, over the matched rows:")
    for kind, (ms, model) in sorted(by_kind.items(), key=lambda item: -item[1][0]):
        print("  %-18s measured %8.3f ms, model %8.3f ms: %+6.1f%%" % (
            kind, ms, model, 100 * (model / ms - 1)))
    unmatched = sum(ms for key, (ms, _) in measured.items() if key not in predicted)
    print("matched %d of %d profile rows (%.3f ms of %.3f listed; unmatched: %.3f ms)" % (
        len(matched), len(measured), sum(m[1][0] for m in matched),
        sum(ms for ms, _ in measured.values()), unmatched))
    if "step" in totals and step is not None:
        print("step: measured %.3f ms of group time, model %.3f ms: %+.1f%%" % (
            totals["step"], step, 100 * (step / totals["step"] - 1)))
        groups = {"matmuls": ("matmul", "matmul_epilogue", "matmul_accumulate", "bias_grad"),
                  "attention": ("attention",)}
        for name, members in groups.items():
            if name in totals:
                model = sum(kinds.get(kind, 0.0) for kind in members)
                print("  %-20s measured %8.3f ms, model %8.3f ms: %+6.1f%%" % (
                    name, totals[name], model, 100 * (model / totals[name] - 1)))
        if "memory-bound groups" in totals:
            compute = set(sum(groups.values(), ()))
            model = sum(ms for kind, ms in kinds.items() if kind not in compute)
            print("  %-20s measured %8.3f ms, model %8.3f ms: %+6.1f%%" % (
                "memory-bound groups", totals["memory-bound groups"], model,
                100 * (model / totals["memory-bound groups"] - 1)))


if __name__ == "__main__":
    main()
