"""`python -m slurmkube.sim --scenario reference --seed N --jobs J --out DIR`."""

import sys

from slurmkube.sim.cli import main

sys.exit(main())
