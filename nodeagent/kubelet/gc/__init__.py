"""The kubelet's garbage collection: dead containers and sandboxes (kuberuntime_gc.go) and unused images
(images/image_gc_manager.go), each a pure decision over what the runtime lists plus the CRI calls that
carry it out. The eviction manager asks both to reclaim disk before it evicts a pod."""
