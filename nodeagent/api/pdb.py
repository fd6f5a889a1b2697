"""PodDisruptionBudget helpers the disruption controller and the eviction subresource share.

component-helpers' poddisruptionbudget package: the `DisruptionAllowed` condition follows
`status.disruptionsAllowed` (SufficientPods / InsufficientPods), set as apimachinery's
SetStatusCondition sets a metav1.Condition (lastTransitionTime moves only when the status does).
"""

from __future__ import annotations

from typing import Any

DISRUPTION_ALLOWED = "DisruptionAllowed"
SUFFICIENT_PODS = "SufficientPods"
INSUFFICIENT_PODS = "InsufficientPods"
SYNC_FAILED = "SyncFailed"


def set_condition(status: dict[str, Any], ctype: str, cstatus: str, reason: str, message: str,
                  observed_generation: int, now: str) -> None:
    """meta.SetStatusCondition on status["conditions"] (a metav1.Condition list), in place."""
    conds: list[dict[str, Any]] = status.setdefault("conditions", [])
    for c in conds:
        if c.get("type") == ctype:
            if c.get("status") != cstatus:
                c["status"] = cstatus
                c["lastTransitionTime"] = now
            c["reason"], c["message"], c["observedGeneration"] = reason, message, observed_generation
            return
    conds.append({"type": ctype, "status": cstatus, "observedGeneration": observed_generation,
                  "lastTransitionTime": now, "reason": reason, "message": message})


def update_disruption_allowed_condition(status: dict[str, Any], now: str) -> None:
    """UpdateDisruptionAllowedCondition: True/SufficientPods while a disruption is allowed, else False."""
    allowed = int(status.get("disruptionsAllowed") or 0) > 0
    set_condition(status, DISRUPTION_ALLOWED, "True" if allowed else "False",
                  SUFFICIENT_PODS if allowed else INSUFFICIENT_PODS, "",
                  int(status.get("observedGeneration") or 0), now)


def conditions_up_to_date(status: dict[str, Any]) -> bool:
    """ConditionsAreUpToDate: the condition exists, matches disruptionsAllowed and the observed generation."""
    cond = next((c for c in status.get("conditions") or [] if c.get("type") == DISRUPTION_ALLOWED), None)
    if cond is None or cond.get("observedGeneration") != status.get("observedGeneration"):
        return False
    allowed = int(status.get("disruptionsAllowed") or 0) > 0
    return (cond.get("status"), cond.get("reason")) == (("True", SUFFICIENT_PODS) if allowed
                                                        else ("False", INSUFFICIENT_PODS))
