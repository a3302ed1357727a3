"""`python -m slurmkube_runtime`: see slurmkube_runtime.cli."""

import sys

from slurmkube_runtime.cli import main

sys.exit(main())
