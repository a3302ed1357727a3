"""One slurmrestd client and one scontrol client per SlurmCluster, kept across reconciles.

A client is made again only when what it was made from changed (the URL, the
JWT key, the controller's address) or after `MAX_AGE_SECONDS`, so that a
slurmrestd upgraded in place is asked its data_parser versions again; a
reconcile and a bridge round reuse its HTTP connections and what it learnt
from `/openapi/v3`. The last node and job lists (slurm/incremental.py) are
kept per cluster, not per client: a client made again asks with their time
and reads in full only what changed. Clients are closed, and the lists
dropped, when their SlurmCluster goes and when the operator stops.
"""

from __future__ import annotations

import logging
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from slurmkube.api import well_known as wk
from slurmkube.api.models import SlurmCluster
from slurmkube.build.names import deployment_context, names_of
from slurmkube.build.slurmrestd import CA_CERT, tls_secret_name
from slurmkube.controllers.queue import Key
from slurmkube.controllers.settings import Settings
from slurmkube.kube.client import Kube
from slurmkube.render.config import TOPOLOGY_PLUGINS
from slurmkube.slurm.accounting import SacctmgrClient, accounting_client_config
from slurmkube.slurm.cli import CliClient
from slurmkube.slurm.incremental import SlurmLists
from slurmkube.slurm.jwt_cli import client_config, jwt_cli_client, write_client_config
from slurmkube.slurm.rest import RestClient
from slurmkube.slurm.tokens import JwtMinter

log = logging.getLogger(__name__)
MAX_AGE_SECONDS = 600.0


def jwt_key(kube: Kube, cluster: SlurmCluster) -> bytes | None:
    names = names_of(cluster)
    secret = cluster.spec.auth.jwt_key_secret or names.auth
    return kube.secret_value(names.namespace, secret, "jwt.key")


@dataclass
class _Kept:
    made_from: tuple[object, ...]
    made_at: float
    rest: RestClient | None = None
    scontrol: CliClient | None = None
    sacctmgr: SacctmgrClient | None = None


class SlurmClients:
    def __init__(self, settings: Settings, clock: Callable[[], float] = time.monotonic) -> None:
        self._settings = settings
        self._clock = clock
        self._lock = threading.Lock()
        self._rest: dict[Key, _Kept] = {}
        self._scontrol: dict[Key, _Kept] = {}
        self._sacctmgr: dict[Key, _Kept] = {}
        self._lists: dict[Key, SlurmLists] = {}

    def rest(self, kube: Kube, cluster: SlurmCluster) -> RestClient | None:
        """slurmrestd of this cluster, with JWTs minted from its key, reservation
        writes and requeues through its scontrol where the data_parser cannot do
        them (24.11); None while slurmrestd is off or has no key."""
        key = jwt_key(kube, cluster)
        if not key or not cluster.spec.rest_api.replicas:
            return None
        url = self._settings.endpoints.restapi_url(kube, cluster)
        if url is None:
            return None
        names = names_of(cluster)
        tls = tls_secret_name(cluster)
        ca = kube.secret_value(names.namespace, tls, CA_CERT) if tls else None
        writer = self.scontrol(kube, cluster)
        kept = self._kept(self._rest, cluster, (url, key, id(writer), ca))
        if kept.rest is None:
            with self._lock:
                lists = self._lists.setdefault(_key(cluster), SlurmLists())
            try:
                ssl.create_default_context(cadata=ca.decode() if ca else None)
            except (ssl.SSLError, UnicodeDecodeError) as err:
                log.warning("Secret %s/%s key %s: %s", names.namespace, tls, CA_CERT, err)
                return None
            kept.rest = RestClient(
                url,
                jwt_key=key,
                user="slurm",
                timeout=5.0,
                attempts=2,
                reservations=writer,
                lists=lists,
                ca_pem=ca,
                server_name=names.restapi_dns_names[-1] if tls else None,
            )
        return kept.rest

    def scontrol(self, kube: Kube, cluster: SlurmCluster) -> CliClient | None:
        """scontrol authenticated by a JWT (`slurmkube.slurm.jwt_cli`): the reservation
        writes and requeues 24.11's slurmrestd cannot do, and the topology/config reads."""
        key = jwt_key(kube, cluster)
        if not key:
            return None
        address = self._settings.endpoints.controller_address(kube, cluster)
        if not address:
            return None
        names = names_of(cluster)
        plugin = TOPOLOGY_PLUGINS[cluster.spec.topology.plugin]
        kept = self._kept(self._scontrol, cluster, (address, key, plugin))
        if kept.scontrol is None:
            prefix = self._settings.slurm_prefix
            config = client_config(
                cluster.slurm_cluster_name,
                names.controller_pod,
                address,
                wk.SLURMCTLD_PORT,
                plugin,
            )
            kept.scontrol = jwt_cli_client(
                config=config,
                config_dir=_config_dir(cluster),
                jwt_key=key,
                user=deployment_context(cluster).slurm_user,
                bin_dir=Path(prefix) / "bin" if prefix else None,
            )
        return kept.scontrol

    def sacctmgr(self, kube: Kube, cluster: SlurmCluster) -> SacctmgrClient | None:
        """sacctmgr authenticated by a JWT (`slurmkube.slurm.accounting`): the
        allocation policy's accounts, associations and QOS in slurmdbd; None
        without accounting, a jwt.key or slurmdbd's address."""
        key = jwt_key(kube, cluster)
        if not key or not cluster.spec.accounting.enabled:
            return None
        address = self._settings.endpoints.slurmdbd_address(kube, cluster)
        if not address:
            return None
        kept = self._kept(self._sacctmgr, cluster, (address, key))
        if kept.sacctmgr is None:
            config = accounting_client_config(cluster.slurm_cluster_name, address, wk.SLURMDBD_PORT)
            path = write_client_config(_config_dir(cluster) / "accounting", config)
            prefix = self._settings.slurm_prefix
            kept.sacctmgr = SacctmgrClient(
                config_path=path,
                jwt=JwtMinter(key, deployment_context(cluster).slurm_user, lifespan=600),
                bin_dir=Path(prefix) / "bin" if prefix else None,
            )
        return kept.sacctmgr

    def _kept(
        self, store: dict[Key, _Kept], cluster: SlurmCluster, made_from: tuple[object, ...]
    ) -> _Kept:
        key = _key(cluster)
        now = self._clock()
        with self._lock:
            kept = store.get(key)
            if kept is None or kept.made_from != made_from or now - kept.made_at >= MAX_AGE_SECONDS:
                # A replaced client is not closed: another thread (the bridge, a
                # reconcile) may be in a request with it; it goes with its last user.
                kept = store[key] = _Kept(made_from, now)
            return kept

    def close(self, namespace: str, name: str) -> None:
        """The SlurmCluster is gone: its clients go with it."""
        with self._lock:
            kept = self._rest.pop((namespace, name), None)
            self._scontrol.pop((namespace, name), None)
            self._sacctmgr.pop((namespace, name), None)
            self._lists.pop((namespace, name), None)
        if kept is not None and kept.rest is not None:
            kept.rest.close()

    def close_all(self) -> None:
        for namespace, name in list(self._rest):
            self.close(namespace, name)


def _key(cluster: SlurmCluster) -> Key:
    names = names_of(cluster)
    return (names.namespace, names.cluster)


def _config_dir(cluster: SlurmCluster) -> Path:
    names = names_of(cluster)
    return Path(tempfile.gettempdir()) / "slurmkube" / f"{names.namespace}-{cluster.metadata.name}"
