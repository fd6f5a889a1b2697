"""The kubelet's container-start hooks for the environment and image credentials: the built environment
into CRI's ContainerConfig (with command, args and subPathExpr expanded), and PullImage with each
matching login."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Mapping
from typing import Any

from cri.client import RuntimeClient
from cri.proto import api_pb2 as pb
from nodeagent.kubelet.envvars import ContainerSources, Env, EnvError
from nodeagent.kubelet.expansion import expand, expand_all
from nodeagent.kubelet.pullsecrets import Credential
from nodeagent.kubelet.volumes import subpath

log = logging.getLogger("nodeagent.kubelet.container_env")


def apply_env(cfg: pb.ContainerConfig, container: Mapping[str, Any], env: Env | None) -> None:
    """Set the variables and expand `$(VAR)` in command and args (ExpandContainerCommandAndArgs). Without
    a built environment only plain `value`s are set, unexpanded."""
    if env is None:
        for e in container.get("env") or []:
            if "valueFrom" not in e:
                cfg.envs.add(key=e["name"], value=str(e.get("value", "")))
        return
    for k, v in env.vars:
        cfg.envs.add(key=k, value=v)
    values = env.as_dict()
    del cfg.command[:]
    cfg.command.extend(expand_all(list(container.get("command") or []), values))
    del cfg.args[:]
    cfg.args.extend(expand_all(list(container.get("args") or []), values))


def auth_config(c: Credential) -> pb.AuthConfig:
    return pb.AuthConfig(username=c.username, password=c.password, auth=c.auth,
                         server_address=c.server_address, identity_token=c.identity_token,
                         registry_token=c.registry_token)


async def pull_with_credentials(cri: RuntimeClient, sources: ContainerSources, recorder: Any,
                                pod: Mapping[str, Any], image: str) -> str:
    """kuberuntime's PullImage: anonymously when no pull Secret matches the image, else each matching
    login in turn until one works; every failure's message when none does."""
    creds, missing = await sources.pull_credentials(pod, image)
    if missing:
        recorder.record(pod, "Warning", "FailedToRetrieveImagePullSecret",
                        f"Unable to retrieve some image pull secrets ({', '.join(missing)}); attempting to "
                        "pull the image may not succeed.")
    if not creds:
        return await cri.pull_image(image)
    errors: list[BaseException] = []
    for c in creds:
        try:
            return await cri.pull_image(image, auth=auth_config(c))
        except Exception as e:
            errors.append(e)
    if len(errors) == 1:
        raise errors[0]
    raise PullError("[" + ", ".join(_details(e) for e in errors) + "]")


class PullError(Exception):
    """Every matching login failed (utilerrors.NewAggregate's text)."""


def _details(e: BaseException) -> str:
    details = getattr(e, "details", None)
    return details() if callable(details) else str(e)


def sub_path(mount: Mapping[str, Any], env: Env | None) -> str:
    """The mount's subPath, or its subPathExpr expanded against the container's environment
    (ExpandContainerVolumeMounts: a reference to a variable that is unset or empty is an error)."""
    expr = mount.get("subPathExpr") or ""
    if not expr:
        return str(mount.get("subPath") or "")
    values = env.as_dict() if env is not None else {}
    missing: set[str] = set()

    def lookup(name: str) -> str:
        value = values.get(name, "")
        if not value:
            missing.add(name)
        return value
    expanded = expand(expr, lookup)
    if missing:
        raise EnvError(f"missing value for {', '.join(sorted(missing))}")
    return expanded


SubPathBinder = Callable[[str, str, str, str, int], str]  # volume path, subPath, volume, container, index


def prepare_sub_paths(container: Mapping[str, Any], vols: Mapping[str, Any], env: Env | None,
                      bind: SubPathBinder | None = None) -> dict[int, str]:
    """makeMounts' subPath checks: each missing subPath directory made safely (with its volume's mode),
    then, given a binder, bound under the pod's volume-subpaths/ after the checks against leaving the volume;
    returns the host path to mount for each volumeMount index with a subPath. Blocking: run on a worker
    thread. EnvError: CreateContainerConfigError (its message hides host paths, as kubelet's does)."""
    bound: dict[int, str] = {}
    for i, vm in enumerate(container.get("volumeMounts") or []):
        v = vols.get(vm.get("name", ""))
        sub = sub_path(vm, env)
        if v is None or not sub:
            continue
        if os.path.isabs(sub):
            raise EnvError(f"error SubPath `{sub}` must not be an absolute path")
        if ".." in sub.split("/"):
            raise EnvError(f"unable to provision SubPath `{sub}`: must not contain '..'")
        if v.kind == "image":
            continue  # the runtime resolves it within the image (CRI Mount.image_sub_path)
        who = f"volumeMount \"{vm.get('name')}\" of container \"{container.get('name')}\""
        try:
            if not os.path.exists(os.path.join(v.host_path, sub)):
                subpath.safe_make_dir(v.host_path, sub, stat.S_IMODE(os.stat(v.host_path).st_mode))
        except (subpath.SubPathError, OSError) as e:
            log.warning("subPath %s of volume %s: %s", sub, vm.get("name"), e)
            raise EnvError(f"failed to create subPath directory for {who}") from None
        if bind is None:
            continue
        try:
            bound[i] = bind(v.host_path, sub, vm["name"], str(container.get("name")), i)
        except (subpath.SubPathError, OSError) as e:
            log.warning("subPath %s of volume %s: %s", sub, vm.get("name"), e)
            raise EnvError(f"failed to prepare subPath for {who}") from None
    return bound
