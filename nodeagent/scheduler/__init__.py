"""The scheduler: kube-scheduler's framework design in Python.

Layout:
  framework/  status.py (Status codes), types.py (PodInfo/NodeInfo), interface.py (extension point
              Protocols, CycleState, cluster events), runtime.py (Framework), registry.py (plugin discovery)
  plugins/    one package per plugin: NAME, Args, validate(args), new(args, handle)
  profile.py  KubeSchedulerConfiguration-like profiles (default-profile.yaml spells out the defaults)
  queue.py    activeQ / backoffQ / unschedulable pool, nominator
  cache.py    NodeInfos, assume/forget, the per-cycle snapshot
  scheduler.py  event handlers, scheduling cycle, binding cycle, preemption side effects
  api.py      what it needs from the API server (event source, binder, recorder, status patcher,
              deleter, listers); nodeagent/testing/fake_cluster.py implements all of it in memory
"""
