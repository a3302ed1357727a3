"""`slurmkube operator`: the operator itself, every controller under kopf.

The entry point installs what the controllers read (`controllers/memory.py`):
the settings read from the environment once, and the Slurm clients made with
them. The controllers are imported only when the operator runs: importing one
registers its kopf handlers, which no other subcommand wants.
"""

from __future__ import annotations

import argparse
import os
from typing import Any


def add_parser(sub: Any) -> None:
    operator = sub.add_parser("operator", help="run the operator (kopf)")
    scope = operator.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace", default=os.environ.get("SLURMKUBE_WATCH_NAMESPACE", "default")
    )
    scope.add_argument("--all-namespaces", action="store_true")
    operator.add_argument(
        "--health-port", type=int, default=8080, help="kopf liveness /healthz port (0: off)"
    )
    operator.add_argument(
        "--metrics-port", type=int, default=0, help="Prometheus /metrics port (0: off)"
    )
    operator.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    import kopf

    # Importing registers the handlers: the SlurmCluster reconciler, the Kueue check,
    # node health, the allocation policy, the live goodput exporter.
    import slurmkube.controllers.goodput
    import slurmkube.controllers.handlers
    import slurmkube.controllers.health
    import slurmkube.controllers.key_rotation
    import slurmkube.controllers.lending
    import slurmkube.controllers.memory
    import slurmkube.controllers.policy
    from slurmkube import metrics
    from slurmkube.controllers import failpoints, heap
    from slurmkube.controllers.clients import SlurmClients
    from slurmkube.controllers.settings import Settings

    logging.basicConfig(
        # The chart's values say `info`; logging knows only `INFO`.
        level=os.environ.get("SLURMKUBE_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    if logging.getLogger().level > logging.DEBUG:
        # "Handler ... succeeded" for every Node event: at 10,000
        # Nodes most of the log, and a measurable share of the operator's CPU.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    namespaces: list[str] = [] if args.all_namespaces else [str(args.namespace)]
    # The environment is read here, once; the controllers receive what it says.
    settings = Settings.from_environment(os.environ, os.getpid())
    failpoints.arm(settings.failpoint)
    slurmkube.controllers.memory.State.settings = settings
    slurmkube.controllers.memory.State.clients = SlurmClients(settings)
    metrics.serve(args.metrics_port)
    heap.tune_collector()
    asyncio.run(
        kopf.operator(
            namespaces=namespaces,
            clusterwide=bool(args.all_namespaces),
            # Port 0 means off: "http://0.0.0.0:0" would parse as port 80.
            liveness_endpoint=(
                f"http://0.0.0.0:{args.health_port}/healthz" if args.health_port else None
            ),
            standalone=True,
        )
    )
    return 0
