"""The HorizontalPodAutoscaler loop (kube-controller-manager's podautoscaler/horizontal.go), on
autoscaling/v2 objects.

Every --horizontal-pod-autoscaler-sync-period each HPA is reconciled: read the target's `/scale`
(Deployment, ReplicaSet, StatefulSet, ReplicationController, or a custom resource with a scale
subresource), list its pods by the scale's selector, read their usage from metrics.k8s.io, compute a
proposal per metric (Resource and ContainerResource, Utilization or AverageValue; the largest wins),
stabilize and limit it (`hpa.Normalizer`), write the new count through `/scale`, and record status,
conditions (AbleToScale, ScalingActive, ScalingLimited) and events with kube's reasons and messages.
Pods and Object/External metrics need a custom or external metrics API, which is not served here: such a
metric makes ScalingActive False with the reason kube gives when those APIs are missing.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from nodeagent.api.objects import Obj
from nodeagent.api.quantity import QuantityError, format_quantity, milli_value
from nodeagent.api.resources import Resource, builtin, by_kind
from nodeagent.api.selectors import SelectorError, parse_label_selector
from nodeagent.api.times import rfc3339
from nodeagent.client.informer import SharedInformers, key_of
from nodeagent.client.rest import ClientError
from nodeagent.controllers import hpa
from nodeagent.controllers.base import Controller, split_key

HPAS = builtin("autoscaling", "v2", "horizontalpodautoscalers")
METRICS_PATH = "/apis/metrics.k8s.io/v1beta1/namespaces/{ns}/pods"


class Unavailable(Exception):
    """A metric cannot be computed: (condition reason, event reason, message)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class HorizontalPodAutoscalerController(Controller):
    name = "horizontalpodautoscaling"
    service_account = "horizontal-pod-autoscaler"
    workers = 2

    def __init__(self, client, informers: SharedInformers, recorder, options=None) -> None:
        super().__init__(client, informers, recorder, options)
        self.hpas = informers.get("autoscaling/v2/horizontalpodautoscalers")
        self.pods = informers.get("pods")
        self.hpas.add_handler(self.enqueue, lambda old, new: self.enqueue(new), self._deleted)
        self.history: dict[str, hpa.HPAHistory] = {}
        self.normalizer = hpa.Normalizer(self.options.hpa_downscale_stabilization)
        self.tolerances = hpa.Tolerances(self.options.hpa_tolerance, self.options.hpa_tolerance)

    def _deleted(self, obj: Obj) -> None:
        self.history.pop(key_of(obj), None)

    async def run(self) -> None:
        """The workers, and the resync that puts every HPA back on the queue each sync period."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(super().run(), name=f"{self.name}-workers")
            while True:
                await self.options.clock.sleep(self.options.hpa_sync_period)
                for obj in self.hpas.list():
                    self.enqueue(obj)

    # -- one HPA ----------------------------------------------------------------------------------------
    async def reconcile(self, key: str) -> None:
        ns, name = split_key(key)
        cached = self.hpas.get(name, ns)
        if cached is None:
            self.history.pop(key, None)
            return
        obj = copy.deepcopy(cached)
        obj.setdefault("apiVersion", "autoscaling/v2")
        obj.setdefault("kind", "HorizontalPodAutoscaler")
        before = copy.deepcopy(obj.get("status") or {})
        spec = obj.get("spec") or {}
        st = obj.setdefault("status", {})
        st.setdefault("conditions", [])
        ref = spec.get("scaleTargetRef") or {}
        reference = f"{ref.get('kind')}/{ns}/{ref.get('name')}"
        now = self.options.clock.now()
        now_s = rfc3339(now)
        try:
            res = await self._target_resource(ref)
            scale = await self.client.get(res, ref.get("name", ""), ns, subresource="scale")
        except (ClientError, LookupError) as e:
            why = e.message if isinstance(e, ClientError) else str(e)
            self.recorder.record(obj, "Warning", "FailedGetScale", why)
            self._condition(obj, "AbleToScale", "False", "FailedGetScale",
                            f"the HPA controller was unable to get the target's current scale: {why}", now_s)
            await self._write_status(obj, before)
            raise RuntimeError(f"failed to query scale subresource for {reference}: {why}") from None
        self._condition(obj, "AbleToScale", "True", "SucceededGetScale",
                        "the HPA controller was able to get the target's current scale", now_s)
        current = int((scale.get("spec") or {}).get("replicas") or 0)
        history = self.history.setdefault(key, hpa.HPAHistory())
        self.normalizer.record_initial(history, current, now)
        min_replicas = spec.get("minReplicas", 1)
        max_replicas = int(spec.get("maxReplicas") or 0)
        statuses: list[dict[str, Any]] = []
        rescale, reason, desired = True, "", 0
        if current == 0 and min_replicas != 0:
            rescale = False
            self._condition(obj, "ScalingActive", "False", "ScalingDisabled",
                            "scaling is disabled since the replica count of the target is zero", now_s)
        elif current > max_replicas:
            reason, desired = "Current number of replicas above Spec.MaxReplicas", max_replicas
        elif current < min_replicas:
            reason, desired = "Current number of replicas below Spec.MinReplicas", min_replicas
        else:
            try:
                proposal, metric, statuses = await self._replicas_for_metrics(obj, scale, current, now_s)
            except Unavailable as e:
                self._set_status(obj, current, st.get("desiredReplicas", 0), st.get("currentMetrics"), False)
                await self._write_status(obj, before)
                self.recorder.record(obj, "Warning", "FailedComputeMetricsReplicas", str(e))
                return  # retried at the next sync period, as kube's resync does
            if proposal > current:
                reason = f"{metric} above target"
            elif proposal < current:
                reason = "All metrics below target"
            out = self.normalizer.normalize(history, spec.get("behavior"), current, proposal, min_replicas,
                                            max_replicas, now)
            self._condition(obj, "AbleToScale", "True", out.able_reason, out.able_message, now_s)
            self._condition(obj, "ScalingLimited", "True" if out.limited else "False", out.limited_reason,
                            out.limited_message, now_s)
            desired = out.replicas
            rescale = desired != current
        if rescale:
            new_scale = {**scale, "spec": {**(scale.get("spec") or {}), "replicas": desired}}
            try:
                await self.client.update(res, new_scale, ns, subresource="scale")
            except ClientError as e:
                self.recorder.record(obj, "Warning", "FailedRescale",
                                     f"New size: {desired}; reason: {reason}; error: {e.message}")
                why = f"the HPA controller was unable to update the target scale: {e.message}"
                self._condition(obj, "AbleToScale", "False", "FailedUpdateScale", why, now_s)
                self._set_status(obj, current, st.get("desiredReplicas", 0), st.get("currentMetrics"), False)
                await self._write_status(obj, before)
                raise RuntimeError(f"failed to rescale {reference}: {e.message}") from None
            self._condition(obj, "AbleToScale", "True", "SucceededRescale",
                            f"the HPA controller was able to update the target scale to {desired}", now_s)
            self.recorder.record(obj, "Normal", "SuccessfulRescale", f"New size: {desired}; reason: {reason}")
            behavior = spec.get("behavior")
            rules = (hpa.default_rules(behavior, self.options.hpa_downscale_stabilization) if behavior
                     else None)
            self.normalizer.record_scale(history, behavior, rules, current, desired, now)
            self.log.info("successful rescale of %s, old size: %d, new size: %d, reason: %s", key, current,
                          desired, reason)
        else:
            desired = current
        self._set_status(obj, current, desired, statuses, rescale)
        await self._write_status(obj, before)

    async def _target_resource(self, ref: dict[str, Any]) -> Resource:
        """The scaleTargetRef's resource, which must have a scale subresource (kube's RESTMapper lookup)."""
        api_version, kind = ref.get("apiVersion", ""), ref.get("kind", "")
        res = by_kind(api_version, kind)
        if res is None:  # a custom resource: ask discovery, which knows what is served right now
            group_version = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
            try:
                doc = await self.client.request("GET", group_version)
            except ClientError:
                doc = {}
            group, _, version = api_version.rpartition("/")
            for r in doc.get("resources") or []:
                if r.get("kind") == kind and "/" not in r.get("name", ""):
                    res = Resource(group, version, r["name"], kind, bool(r.get("namespaced")))
                    break
        if res is None:
            raise LookupError(f'no matches for kind "{kind}" in version "{api_version}"')
        if "scale" not in res.subresources and res.group not in ("", "apps"):
            listed = await self.client.request("GET", res.gv_path)
            subs = [r.get("name") for r in listed.get("resources") or []]
            if f"{res.name}/scale" not in subs:
                raise LookupError(f"{res.name}.{res.group} has no scale subresource")
        return res

    async def _replicas_for_metrics(self, obj: Obj, scale: dict[str, Any], current: int,
                                    now_s: str) -> tuple[int, str, list[dict[str, Any]]]:
        """computeReplicasForMetrics: the largest proposal of the valid metrics, or Unavailable when none
        is."""
        ns = obj["metadata"].get("namespace", "")
        selector_text = (scale.get("status") or {}).get("selector") or ""
        if not selector_text:
            msg = "selector is required"
            self.recorder.record(obj, "Warning", "SelectorRequired", msg)
            self._condition(obj, "ScalingActive", "False", "InvalidSelector",
                            "the HPA target's scale is missing a selector", now_s)
            raise Unavailable("InvalidSelector", msg)
        try:
            selector = parse_label_selector(selector_text)
        except SelectorError as e:
            msg = f"couldn't convert selector into a corresponding internal selector object: {e}"
            self.recorder.record(obj, "Warning", "InvalidSelector", msg)
            self._condition(obj, "ScalingActive", "False", "InvalidSelector", msg, now_s)
            raise Unavailable("InvalidSelector", msg) from None
        pods = [p for p in self.pods.list() if p["metadata"].get("namespace") == ns
                and selector.matches(p["metadata"].get("labels") or {})]
        specs = (obj.get("spec") or {}).get("metrics") or []
        statuses: list[dict[str, Any]] = []
        best, best_metric, first_error = 0, "", None
        invalid = 0
        for m in specs:
            try:
                replicas, metric, status = await self._one_metric(m, current, ns, selector_text, pods)
            except Unavailable as e:
                invalid += 1
                self.recorder.record(obj, "Warning", e.reason, str(e))
                if first_error is None:
                    first_error = e
                statuses.append({})
                continue
            statuses.append(status)
            if best == 0 or replicas > best:
                best, best_metric = replicas, metric
        statuses = [s for s in statuses if s]
        if invalid >= len(specs):
            if first_error is None:  # no metrics at all (the API defaults one; a stored object may lack it)
                first_error = Unavailable("FailedGetResourceMetric", "no metrics specified")
            self._condition(obj, "ScalingActive", "False", first_error.reason,
                            f"the HPA was unable to compute the replica count: {first_error}", now_s)
            raise Unavailable(first_error.reason, f"invalid metrics ({invalid} invalid out of {len(specs)}), "
                                                  f"first error is: {first_error}")
        found = f"the HPA was able to successfully calculate a replica count from {best_metric}"
        self._condition(obj, "ScalingActive", "True", "ValidMetricFound", found, now_s)
        return best, best_metric, statuses

    async def _one_metric(self, m: dict[str, Any], current: int, ns: str, selector: str,
                          pods: list[Obj]) -> tuple[int, str, dict[str, Any]]:
        kind = m.get("type")
        if kind not in ("Resource", "ContainerResource"):
            if kind in ("Pods", "Object", "External"):
                reason = f"FailedGet{kind}Metric"
                api = "external.metrics.k8s.io" if kind == "External" else "custom.metrics.k8s.io"
                raise Unavailable(reason, f"unable to get metric: no {api} API is served by this cluster "
                                          "(only Resource and ContainerResource metrics are available)")
            raise Unavailable("InvalidMetricSourceType", f'unknown metric source type "{kind}"')
        field = "resource" if kind == "Resource" else "containerResource"
        src = m.get(field) or {}
        resource = src.get("name", "")
        container = src.get("container", "") if kind == "ContainerResource" else ""
        target = src.get("target") or {}
        event_reason = "FailedGetResourceMetric" if kind == "Resource" else "FailedGetContainerResourceMetric"
        try:
            doc = await self.client.request("GET", METRICS_PATH.format(ns=ns),
                                            params={"labelSelector": selector})
        except ClientError as e:
            raise Unavailable(event_reason, f"unable to get metrics for resource {resource}: unable to fetch "
                                            f"metrics from resource metrics API: {e.message}") from None
        readiness = hpa.Readiness(self.options.hpa_cpu_initialization_period,
                                  self.options.hpa_initial_readiness_delay, self.options.clock.now())
        try:
            usage = hpa.pod_metrics(doc.get("items") or [], resource, container)
            if target.get("averageValue") is not None:
                try:
                    want = milli_value(target["averageValue"])
                except QuantityError as e:
                    raise hpa.MetricsError(f"invalid averageValue: {e}") from None
                replicas, raw, _ = hpa.raw_resource_replicas(current, want, resource, self.tolerances, pods,
                                                             usage, readiness)
                current_status: dict[str, Any] = {"averageValue": format_quantity(_milli(raw))}
                name = f"{resource} resource"
            elif target.get("averageUtilization") is not None:
                replicas, utilization, raw, _ = hpa.resource_replicas(
                    current, int(target["averageUtilization"]), resource, self.tolerances, pods, usage,
                    container, readiness)
                current_status = {"averageUtilization": utilization,
                                  "averageValue": format_quantity(_milli(raw))}
                name = f"{resource} resource utilization (percentage of request)"
            else:
                raise hpa.MetricsError("invalid resource metric source: neither a utilization target nor a "
                                       "value target was set")
        except hpa.MetricsError as e:
            raise Unavailable(event_reason, str(e)) from None
        if kind == "ContainerResource":
            name = f"{resource} container resource" + (" utilization (percentage of request)"
                                                        if "averageUtilization" in current_status else "")
        status = {"type": kind, field: {"name": resource, "current": current_status}}
        if container:
            status[field]["container"] = container
        return replicas, name, status

    # -- status ---------------------------------------------------------------------------------------
    @staticmethod
    def _condition(obj: Obj, type_: str, status: str, reason: str, message: str, now: str) -> None:
        st = obj.setdefault("status", {})
        st["conditions"] = hpa.set_condition(st.get("conditions") or [], type_, status, reason, message, now)

    def _set_status(self, obj: Obj, current: int, desired: int, metrics: list[dict[str, Any]] | None,
                    rescaled: bool) -> None:
        st = obj.setdefault("status", {})
        st["currentReplicas"] = current
        st["desiredReplicas"] = desired
        if metrics:
            st["currentMetrics"] = metrics
        else:
            st.pop("currentMetrics", None)
        if rescaled:
            st["lastScaleTime"] = rfc3339(self.options.clock.now())
        generation = obj["metadata"].get("generation")
        if generation is not None:
            st["observedGeneration"] = generation

    async def _write_status(self, obj: Obj, before: dict[str, Any]) -> None:
        """updateStatusIfNeeded: only a changed status is written."""
        if obj.get("status") == before:
            return
        try:
            await self.client.update_status(HPAS, obj)
        except ClientError as e:
            if e.conflict or e.not_found:  # a newer object (or none): the next sync starts from it
                return
            self.recorder.record(obj, "Warning", "FailedUpdateStatus", e.message)
            raise


def _milli(value: int) -> Any:
    from fractions import Fraction

    return Fraction(value, 1000)
