"""Checks that `ampc compile` has a flag for every option of the training pipeline, by the same
name: the options listed under --ampc-training-pipeline in `ampc-opt --help` must each be an
option in `ampc compile --help` (argv: the two help texts)."""
import re
import sys

pipeline_help, compile_help = (open(path).read().splitlines() for path in sys.argv[1:3])

# The pipeline's options are the lines indented below its own entry.
names, indent = [], None
for line in pipeline_help:
    entry = re.match(r"( *)--([a-z0-9-]+)", line)
    if indent is None:
        if entry and entry.group(2) == "ampc-training-pipeline":
            indent = len(entry.group(1))
        continue
    if not entry or len(entry.group(1)) <= indent:
        break
    names.append(entry.group(2))

flags = {m.group(1) for m in (re.match(r" *--?([a-z0-9-]+)", line) for line in compile_help) if m}
missing = [name for name in names if name not in flags]
if not names or missing:
    print(f"pipeline options: {names}; not flags of ampc compile: {missing}")
    sys.exit(1)
print(f"{len(names)} pipeline options, all flags of ampc compile")
