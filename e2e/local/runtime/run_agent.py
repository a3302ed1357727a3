"""Entry point of the runtime agent process (started by `slurmkube_runtime up`).

A script path rather than `python -m`, so the PID file check in
slurmkube_e2e.processes (argv[1] must match) identifies exactly this agent.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]

from slurmkube_runtime.agent import main  # noqa: E402

main()
