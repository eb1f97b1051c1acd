"""Tests against a real containerd (scripts/containerd-up); marked ``containerd``."""
