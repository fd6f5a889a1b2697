"""The controller manager: every controller over one set of shared informers, under leader election.

Its component (`controllers.service`) is started by `nodeagent server` / `up` after the apiserver is
ready (it reads the admin kubeconfig the apiserver writes under the data dir). With several servers
only the holder of the `nodeagent-controller-manager` Lease runs controllers.
"""

from __future__ import annotations

import asyncio
import logging
import socket

from nodeagent.client.events import EventRecorder
from nodeagent.client.informer import SharedInformers
from nodeagent.client.rest import Client, ClientError
from nodeagent.controllers.base import Controller
from nodeagent.controllers.clusterroleaggregation_controller import ClusterRoleAggregationController
from nodeagent.controllers.cronjob_controller import CronJobController
from nodeagent.controllers.csrapproving_controller import CSRApprovingController
from nodeagent.controllers.csrsigning_controller import CSRSigningController
from nodeagent.controllers.daemonset_controller import DaemonSetController
from nodeagent.controllers.deployment_controller import DeploymentController
from nodeagent.controllers.disruption_controller import DisruptionController
from nodeagent.controllers.endpoints_controller import EndpointsController
from nodeagent.controllers.ephemeral_controller import EphemeralVolumeController
from nodeagent.controllers.gc_controller import GarbageCollector
from nodeagent.controllers.hpa_controller import HorizontalPodAutoscalerController
from nodeagent.controllers.job_controller import JobController
from nodeagent.controllers.nodeipam_controller import NodeIpamController
from nodeagent.controllers.nodelifecycle_controller import NodeLifecycleController
from nodeagent.controllers.options import ControllerOptions
from nodeagent.controllers.podgc_controller import PodGCController
from nodeagent.controllers.pvbinder_controller import PersistentVolumeBinderController, PVProtectionController
from nodeagent.controllers.quota_controller import ResourceQuotaController
from nodeagent.controllers.replicaset_controller import ReplicaSetController
from nodeagent.controllers.replicationcontroller_controller import ReplicationControllerController
from nodeagent.controllers.sa_credentials import ServiceAccountCredentials
from nodeagent.controllers.serviceaccount_controller import ServiceAccountController
from nodeagent.controllers.serviceaccounttoken_controller import ServiceAccountTokenController
from nodeagent.controllers.servicelb_controller import ServiceLBController
from nodeagent.controllers.statefulset_controller import StatefulSetController

log = logging.getLogger("nodeagent.controllers")

CONTROLLERS: tuple[type[Controller], ...] = (
    ReplicaSetController, ReplicationControllerController, DeploymentController, GarbageCollector,
    NodeLifecycleController, NodeIpamController,
    PodGCController, DaemonSetController, JobController, CronJobController,
    StatefulSetController, ServiceAccountController, ResourceQuotaController, EndpointsController,
    CSRApprovingController, CSRSigningController, DisruptionController, HorizontalPodAutoscalerController,
    PersistentVolumeBinderController, PVProtectionController,
    ServiceAccountTokenController, ServiceLBController, ClusterRoleAggregationController,
    EphemeralVolumeController,
)


def select(spec: str | None) -> tuple[type[Controller], ...]:
    """kube-controller-manager's --controllers: `*` all, `name` adds, `-name` removes, `none` nothing."""
    if spec is None:
        return CONTROLLERS
    chosen: list[type[Controller]] = []
    by_name = {c.name: c for c in CONTROLLERS}
    for word in (w.strip() for w in spec.split(",")):
        if not word or word == "none":
            continue
        if word == "*":
            chosen += [c for c in CONTROLLERS if c not in chosen]
        elif word.startswith("-"):
            chosen = [c for c in chosen if c.name != word[1:]] if word != "-*" else []
        elif word in by_name:
            if by_name[word] not in chosen:
                chosen.append(by_name[word])
        else:
            raise ValueError(f"unknown controller {word!r} (known: {', '.join(by_name)})")
    return tuple(chosen)


async def run_controllers(client: Client, ready: asyncio.Event | None = None,
                          controllers: tuple[type[Controller], ...] = CONTROLLERS,
                          options: ControllerOptions | None = None,
                          use_service_account_credentials: bool = False) -> None:
    """All controllers until cancelled (no leader election: tests and single servers). With
    `use_service_account_credentials`, each controller writes as its own ServiceAccount (kube's flag)."""
    # the process's informers (in `up`, the scheduler's, DNS's, netproxy's, the kubelet's caches too), one
    # handle each: a controller's handlers go when the manager stops (a lost lease), the caches live on
    informers = SharedInformers(client, share=True)
    recorder = EventRecorder(client, "controller-manager", socket.gethostname())
    accounts = ServiceAccountCredentials(client) if use_service_account_credentials else None
    instances = []
    for cls in controllers:
        own = client
        while accounts is not None and cls.service_account:
            try:
                own = await accounts.client_for(cls.service_account)
                break
            except ClientError as e:  # refused or not ready yet: said in the log, tried again
                log.warning("%s: no credential for kube-system/%s yet (%s); retrying in 2 s", cls.name,
                            cls.service_account, e)
                await asyncio.sleep(2)
        instances.append(cls(own, informers, recorder, options))
    try:
        await _run(instances, informers, recorder, accounts, ready)
    finally:
        if accounts is not None:
            await accounts.close()


async def _run(instances: list[Controller], informers: SharedInformers, recorder: EventRecorder,
               accounts: ServiceAccountCredentials | None, ready: asyncio.Event | None) -> None:
    async with asyncio.TaskGroup() as tg:
        tg.create_task(recorder.run(), name="events")
        if accounts is not None:
            tg.create_task(accounts.run(), name="serviceaccount-tokens")
        await informers.run(tg)
        for c in instances:
            tg.create_task(c.run(), name=c.name)
        log.info("controllers running: %s", ", ".join(c.name for c in instances))
        if ready is not None:
            ready.set()
