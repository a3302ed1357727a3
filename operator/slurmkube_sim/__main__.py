"""`python -m slurmkube_sim --scenario reference --seed N --jobs J --out DIR`."""

import sys

from slurmkube_sim.cli import main

sys.exit(main())
