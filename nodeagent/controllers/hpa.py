"""The HorizontalPodAutoscaler's arithmetic, as kube-controller-manager's podautoscaler package does it.

Pure functions over plain objects, in the order the controller uses them:

- `pod_metrics` turns a PodMetricsList into per-pod milli-values (metrics client: a pod missing a
  container's usage is left out; a named container must be there);
- `resource_replicas` / `raw_resource_replicas` are replica_calculator.go's GetResourceReplicas and
  GetRawResourceReplicas: desired = ceil(ready pods × usage/target) outside the tolerance; unready pods
  and pods without metrics count as 0% on a scale-up and as their full request (or the target) on a
  scale-down, and a direction change that this would cause keeps the current count;
- `Normalizer` is horizontal.go's stabilization and limits: without `behavior`, the highest
  recommendation of the downscale stabilization window and a scale-up limit of max(2×current, 4);
  with it, each direction's stabilization window and its rate policies (Pods / Percent per period,
  selectPolicy Max / Min / Disabled), then min/max replicas, each outcome with its condition reason.

Times are plain floats (unix seconds) handed in by the caller, so tests drive them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from nodeagent.api.quantity import QuantityError, milli_value
from nodeagent.api.times import parse_duration, parse_time

SCALE_UP_LIMIT_FACTOR = 2.0
SCALE_UP_LIMIT_MINIMUM = 4.0
NO_METRICS = "no metrics returned from resource metrics API"
# (reason, message) of the AbleToScale and ScalingLimited conditions, in horizontal.go's words
READY = ("ReadyForNewScale", "recommended size matches current size")
UP_STABILIZED = ("ScaleUpStabilized", "recent recommendations were lower than current one, applying the "
                                      "lowest recent recommendation")
DOWN_STABILIZED = ("ScaleDownStabilized", "recent recommendations were higher than current one, applying the "
                                          "highest recent recommendation")
WITHIN_RANGE = ("DesiredWithinRange", "the desired count is within the acceptable range")
UP_LIMIT = ("ScaleUpLimit", "the desired replica count is increasing faster than the maximum scale rate")
DOWN_LIMIT = ("ScaleDownLimit", "the desired replica count is decreasing faster than the maximum scale rate")
TOO_MANY = ("TooManyReplicas", "the desired replica count is more than the maximum replica count")
TOO_FEW = ("TooFewReplicas", "the desired replica count is less than the minimum replica count")


class MetricsError(Exception):
    """The replica count cannot be computed; the message is kube's (events and the ScalingActive condition
    carry it)."""


@dataclasses.dataclass(frozen=True)
class PodMetric:
    value: int  # milli-units (millicores, or milli-bytes for memory, as Quantity.MilliValue gives)
    timestamp: float
    window: float


@dataclasses.dataclass(frozen=True)
class Tolerances:
    scale_down: float = 0.1
    scale_up: float = 0.1

    def within(self, ratio: float) -> bool:
        return 1.0 - self.scale_down <= ratio <= 1.0 + self.scale_up


def _ts(value: Any) -> float:
    t = parse_time(value) if value else None
    return t.timestamp() if t is not None else 0.0


def pod_metrics(items: Iterable[Mapping[str, Any]], resource: str,
                container: str = "") -> dict[str, PodMetric]:
    """PodMetricsList items → {pod name: its usage of `resource`} (rest_metrics_client.go)."""
    out: dict[str, PodMetric] = {}
    for m in items:
        name = (m.get("metadata") or {}).get("name", "")
        ts = _ts(m.get("timestamp"))
        try:
            window = parse_duration(m.get("window") or "0")
        except ValueError:
            window = 0.0
        containers = m.get("containers") or []
        if container:
            found = next((c for c in containers if c.get("name") == container), None)
            if found is None:
                continue
            usage = (found.get("usage") or {}).get(resource)
            if usage is None:
                ns = (m.get("metadata") or {}).get("namespace", "")
                raise MetricsError(f"failed to get container metrics: missing resource metric {resource} for "
                                   f"container {container} in pod {ns}/{name}")
            out[name] = PodMetric(milli_value(usage), ts, window)
            continue
        total, missing = 0, not containers
        for c in containers:
            usage = (c.get("usage") or {}).get(resource)
            if usage is None:
                missing = True
                break
            total += milli_value(usage)
        if not missing:
            out[name] = PodMetric(total, ts, window)
    return out


def _ready_condition(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"),
                None)


def group_pods(pods: Iterable[Mapping[str, Any]], metrics: Mapping[str, PodMetric], resource: str,
               cpu_initialization_period: float, initial_readiness_delay: float,
               now: float) -> tuple[int, set[str], set[str], set[str]]:
    """(ready count, unready, missing, ignored) as groupPods sorts them."""
    ready, unready, missing, ignored = 0, set(), set(), set()
    for pod in pods:
        name = pod["metadata"]["name"]
        st = pod.get("status") or {}
        if pod["metadata"].get("deletionTimestamp") or st.get("phase") == "Failed":
            ignored.add(name)
            continue
        if st.get("phase") == "Pending":
            unready.add(name)
            continue
        metric = metrics.get(name)
        if metric is None:
            missing.add(name)
            continue
        if resource == "cpu":
            cond = _ready_condition(pod)
            start = st.get("startTime")
            if cond is None or not start:
                is_unready = True
            else:
                started, changed = _ts(start), _ts(cond.get("lastTransitionTime"))
                if started + cpu_initialization_period > now:
                    # still initializing: unready, or no whole window of metrics since it became ready
                    is_unready = cond.get("status") == "False" or metric.timestamp < changed + metric.window
                else:
                    # never been ready since it started
                    is_unready = cond.get("status") == "False" and started + initial_readiness_delay > changed
            if is_unready:
                unready.add(name)
                continue
        ready += 1
    return ready, unready, missing, ignored


def calculate_requests(pods: Iterable[Mapping[str, Any]], container: str, resource: str) -> dict[str, int]:
    """Each pod's request of `resource` in milli-units: its containers' (and sidecars') sum, or one
    container's."""
    out: dict[str, int] = {}
    for pod in pods:
        spec, name = pod.get("spec") or {}, pod["metadata"]["name"]
        containers = list(spec.get("containers") or [])
        containers += [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
        total, found = 0, False
        for c in containers:
            if container and c.get("name") != container:
                continue
            found = True
            req = ((c.get("resources") or {}).get("requests") or {}).get(resource)
            if req is None:
                raise MetricsError(f"missing request for {resource} in container {c.get('name')} of Pod "
                                   f"{name}")
            try:
                total += milli_value(req)
            except QuantityError as e:
                raise MetricsError(f"invalid request for {resource} in container {c.get('name')} of Pod "
                                   f"{name}: {e}") from None
            if container:
                break
        if container and not found:
            raise MetricsError(f"container {container} not found in Pod {name}")
        out[name] = total
    return out


def utilization_ratio(metrics: Mapping[str, PodMetric], requests: Mapping[str, int],
                      target: int) -> tuple[float, int, int]:
    """(usage ratio, utilization %, average raw value) over the pods with both a metric and a request."""
    used = requested = entries = 0
    for name, m in metrics.items():
        if name not in requests:
            continue  # missing requests are checked elsewhere: an extra metric
        used += m.value
        requested += requests[name]
        entries += 1
    if requested == 0:
        raise MetricsError("no metrics returned matched known pods")
    utilization = int(used * 100 / requested)
    return utilization / target, utilization, used // entries


def usage_ratio(metrics: Mapping[str, PodMetric], target: int) -> tuple[float, int]:
    usage = sum(m.value for m in metrics.values()) // len(metrics)
    return usage / target, usage


@dataclasses.dataclass(frozen=True)
class Readiness:
    """replica_calculator's timing knobs and the time now."""

    cpu_initialization_period: float = 300.0
    initial_readiness_delay: float = 30.0
    now: float = 0.0


def _grouped(resource: str, pods: Sequence[Mapping[str, Any]], metrics: dict[str, PodMetric],
             readiness: Readiness) -> tuple[float, dict[str, PodMetric], int, set[str], set[str]]:
    """(metrics timestamp, the ready pods' metrics, ready count, unready, missing), or the calculator's
    errors when there is nothing to compute from."""
    if not metrics:
        raise MetricsError(f"unable to get metrics for resource {resource}: {NO_METRICS}")
    timestamp = next(iter(metrics.values())).timestamp
    metrics = dict(metrics)
    if not pods:
        raise MetricsError("no pods returned by selector while calculating replica count")
    ready, unready, missing, ignored = group_pods(pods, metrics, resource,
                                                  readiness.cpu_initialization_period,
                                                  readiness.initial_readiness_delay, readiness.now)
    for name in ignored | unready:
        metrics.pop(name, None)
    if not metrics:
        raise MetricsError("did not receive metrics for targeted pods (pods might be unready)")
    return timestamp, metrics, ready, unready, missing


def _replicas(current: int, ratio: float, ready: int, unready: set[str], missing: set[str],
              metrics: dict[str, PodMetric], tolerances: Tolerances,
              missing_on_scale_down: Callable[[str], int],
              ratio_of: Callable[[dict[str, PodMetric]], float]) -> int:
    """The count from a usage ratio; with unready or missing pods, the ratio again with those assumed at 0
    (a scale-up) or at `missing_on_scale_down` (a scale-down), keeping the current count when that would
    cross 1.0 or land within the tolerance."""
    scale_up_with_unready = bool(unready) and ratio > 1.0
    if not scale_up_with_unready and not missing:
        return current if tolerances.within(ratio) else math.ceil(ratio * ready)
    for name in missing:
        if ratio < 1.0:
            metrics[name] = PodMetric(missing_on_scale_down(name), 0.0, 0.0)
        elif ratio > 1.0:
            metrics[name] = PodMetric(0, 0.0, 0.0)
    if scale_up_with_unready:
        for name in unready:
            metrics[name] = PodMetric(0, 0.0, 0.0)
    new_ratio = ratio_of(metrics)
    if tolerances.within(new_ratio) or (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
        return current
    new = math.ceil(new_ratio * len(metrics))
    if (new_ratio < 1.0 and new > current) or (new_ratio > 1.0 and new < current):
        return current  # fewer metrics than pods would turn the direction around
    return new


def resource_replicas(current: int, target_utilization: int, resource: str, tolerances: Tolerances,
                      pods: Sequence[Mapping[str, Any]], metrics: dict[str, PodMetric], container: str,
                      readiness: Readiness) -> tuple[int, int, int, float]:
    """GetResourceReplicas: (replicas, utilization %, raw average milli-value, metrics timestamp)."""
    timestamp, metrics, ready, unready, missing = _grouped(resource, pods, metrics, readiness)
    requests = calculate_requests(pods, container, resource)
    ratio, utilization, raw = utilization_ratio(metrics, requests, target_utilization)
    fallback = max(100, target_utilization)  # a missing pod on a scale-down: its request, or the target

    def again(m: dict[str, PodMetric]) -> float:
        return utilization_ratio(m, requests, target_utilization)[0]

    replicas = _replicas(current, ratio, ready, unready, missing, metrics, tolerances,
                         lambda name: requests[name] * fallback // 100, again)
    return replicas, utilization, raw, timestamp


def raw_resource_replicas(current: int, target_usage: int, resource: str, tolerances: Tolerances,
                          pods: Sequence[Mapping[str, Any]], metrics: dict[str, PodMetric],
                          readiness: Readiness) -> tuple[int, int, float]:
    """GetRawResourceReplicas (an AverageValue target): (replicas, average usage milli-value, timestamp)."""
    timestamp, metrics, ready, unready, missing = _grouped(resource, pods, metrics, readiness)
    ratio, usage = usage_ratio(metrics, target_usage)
    replicas = _replicas(current, ratio, ready, unready, missing, metrics, tolerances,
                         lambda name: target_usage, lambda m: usage_ratio(m, target_usage)[0])
    return replicas, usage, timestamp


# -- behavior: stabilization and rate limits -------------------------------------------------------------

def default_rules(behavior: Mapping[str, Any] | None, downscale_window: float) -> dict[str, dict[str, Any]]:
    """scaleUp/scaleDown with the API defaults filled in (autoscaling/v2 defaulting), the scale-down window
    from --horizontal-pod-autoscaler-downscale-stabilization when unset."""
    b = behavior or {}
    up = dict(b.get("scaleUp") or {})
    up.setdefault("stabilizationWindowSeconds", 0)
    up.setdefault("selectPolicy", "Max")
    up.setdefault("policies", [{"type": "Pods", "value": 4, "periodSeconds": 15},
                               {"type": "Percent", "value": 100, "periodSeconds": 15}])
    down = dict(b.get("scaleDown") or {})
    down.setdefault("stabilizationWindowSeconds", int(downscale_window))
    down.setdefault("selectPolicy", "Max")
    down.setdefault("policies", [{"type": "Percent", "value": 100, "periodSeconds": 15}])
    return {"scaleUp": up, "scaleDown": down}


@dataclasses.dataclass
class ScaleEvent:
    change: int
    at: float
    outdated: bool = False


@dataclasses.dataclass
class HPAHistory:
    """What the controller remembers about one HPA between syncs (kept in memory, as kube does)."""

    recommendations: list[tuple[int, float]] = dataclasses.field(default_factory=list)
    up_events: list[ScaleEvent] = dataclasses.field(default_factory=list)
    down_events: list[ScaleEvent] = dataclasses.field(default_factory=list)


def _changes_within(period: float, events: list[ScaleEvent], now: float) -> int:
    return sum(e.change for e in events if e.at > now - period)


def scale_up_limit(current: int, events: list[ScaleEvent], rules: Mapping[str, Any], now: float) -> int:
    """calculateScaleUpLimitWithScalingRules."""
    select = rules.get("selectPolicy", "Max")
    if select == "Disabled":
        return current
    pick = min if select == "Min" else max
    result: int | None = None
    for p in rules.get("policies") or []:
        start = current - _changes_within(p.get("periodSeconds", 0), events, now)
        if p.get("type") == "Pods":
            proposed = start + int(p.get("value", 0))
        else:
            proposed = math.ceil(start * (1 + p.get("value", 0) / 100))
        result = proposed if result is None else pick(result, proposed)
    return result if result is not None else 0


def scale_down_limit(current: int, events: list[ScaleEvent], rules: Mapping[str, Any], now: float) -> int:
    """calculateScaleDownLimitWithBehaviors."""
    select = rules.get("selectPolicy", "Max")
    if select == "Disabled":
        return current
    pick = max if select == "Min" else min
    result: int | None = None
    for p in rules.get("policies") or []:
        start = current + _changes_within(p.get("periodSeconds", 0), events, now)
        if p.get("type") == "Pods":
            proposed = start - int(p.get("value", 0))
        else:
            proposed = int(start * (1 - p.get("value", 0) / 100))
        result = proposed if result is None else pick(result, proposed)
    return result if result is not None else 2**31 - 1


@dataclasses.dataclass(frozen=True)
class Outcome:
    """A normalized replica count and the conditions it sets (AbleToScale and ScalingLimited reasons)."""

    replicas: int
    able_reason: str
    able_message: str
    limited: bool
    limited_reason: str
    limited_message: str


class Normalizer:
    """normalizeDesiredReplicas(WithBehaviors) over one HPA's history."""

    def __init__(self, downscale_stabilization: float) -> None:
        self.downscale_stabilization = downscale_stabilization

    def record_initial(self, h: HPAHistory, current: int, now: float) -> None:
        if not h.recommendations:
            h.recommendations.append((current, now))

    def _store_recommendation(self, h: HPAHistory, desired: int, now: float, oldest_kept: float) -> None:
        old = next((i for i, (_, t) in enumerate(h.recommendations) if t < oldest_kept), None)
        if old is not None:
            h.recommendations[old] = (desired, now)
        else:
            h.recommendations.append((desired, now))

    def normalize(self, h: HPAHistory, behavior: Mapping[str, Any] | None, current: int, desired: int,
                  min_replicas: int, max_replicas: int, now: float) -> Outcome:
        if behavior is None:
            return self._without_behavior(h, current, desired, min_replicas, max_replicas, now)
        return self._with_behavior(h, default_rules(behavior, self.downscale_stabilization), current, desired,
                                   min_replicas, max_replicas, now)

    def _without_behavior(self, h: HPAHistory, current: int, desired: int, lo: int, hi: int,
                          now: float) -> Outcome:
        cutoff = now - self.downscale_stabilization
        stabilized = max([desired] + [r for r, t in h.recommendations if t >= cutoff])
        self._store_recommendation(h, desired, now, cutoff)
        if stabilized != desired:
            able = DOWN_STABILIZED
        else:
            able = READY
        up_limit = int(max(SCALE_UP_LIMIT_FACTOR * current, SCALE_UP_LIMIT_MINIMUM))
        if hi > up_limit:
            top, why = up_limit, UP_LIMIT
        else:
            top, why = hi, TOO_MANY
        if stabilized < lo:
            out, why = lo, TOO_FEW
        elif stabilized > top:
            out = top
        else:
            out, why = stabilized, WITHIN_RANGE
        return Outcome(out, *able, out != stabilized, *why)

    def _with_behavior(self, h: HPAHistory, rules: dict[str, dict[str, Any]], current: int, desired: int,
                       lo: int, hi: int, now: float) -> Outcome:
        up, down = rules["scaleUp"], rules["scaleDown"]
        up_window, down_window = up["stabilizationWindowSeconds"], down["stabilizationWindowSeconds"]
        if desired >= current:
            window, pick = up_window, min
            able = UP_STABILIZED
        else:
            window, pick = down_window, max
            able = DOWN_STABILIZED
        stabilized = desired
        for r, t in h.recommendations:
            if t > now - window:
                stabilized = pick(r, stabilized)
        self._store_recommendation(h, desired, now, now - max(up_window, down_window))
        if stabilized == desired:
            able = READY
        out, why = stabilized, WITHIN_RANGE
        if stabilized > current:
            limit = max(scale_up_limit(current, h.up_events, up, now), current)
            if hi > limit:
                top, reason = limit, UP_LIMIT
            else:
                top, reason = hi, TOO_MANY
            if stabilized > top:
                out, why = top, reason
        elif stabilized < current:
            limit = min(scale_down_limit(current, h.down_events, down, now), current)
            if lo < limit:
                bottom, reason = limit, DOWN_LIMIT
            else:
                bottom, reason = lo, TOO_FEW
            if stabilized < bottom:
                out, why = bottom, reason
        return Outcome(out, *able, out != stabilized, *why)

    @staticmethod
    def record_scale(h: HPAHistory, behavior: Mapping[str, Any] | None,
                     rules: dict[str, dict[str, Any]] | None, previous: int, new: int, now: float) -> None:
        """storeScaleEvent: remembered only with a behavior (its rate policies read them)."""
        if behavior is None or rules is None:
            return
        up = new > previous
        events = h.up_events if up else h.down_events
        policies = (rules["scaleUp"] if up else rules["scaleDown"]).get("policies") or []
        longest = max((p.get("periodSeconds", 0) for p in policies), default=0)
        for e in events:
            if e.at < now - longest:
                e.outdated = True
        event = ScaleEvent(abs(new - previous), now)
        old = next((i for i, e in enumerate(events) if e.outdated), None)
        if old is not None:
            events[old] = event
        else:
            events.append(event)


def set_condition(conditions: list[dict[str, Any]], type_: str, status: str, reason: str, message: str,
                  now: str) -> list[dict[str, Any]]:
    """setConditionInList: the transition time moves only when the status changes."""
    out = [dict(c) for c in conditions]
    cur = next((c for c in out if c.get("type") == type_), None)
    if cur is None:
        cur = {"type": type_}
        out.append(cur)
    if cur.get("status") != status:
        cur["lastTransitionTime"] = now
    cur.update(status=status, reason=reason, message=message)
    return out
