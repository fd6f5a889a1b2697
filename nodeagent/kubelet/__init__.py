"""kubelet"""
