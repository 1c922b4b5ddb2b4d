# expect-status.py: runs a command and succeeds only if it exits with the given status (a crash
# or any other status fails). Usage: expect-status.py STATUS COMMAND [ARGS...]
import subprocess
import sys

expected = int(sys.argv[1])
status = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
if status != expected:
    print(f"expected exit status {expected}, got {status}: {' '.join(sys.argv[2:])}")
    sys.exit(1)
