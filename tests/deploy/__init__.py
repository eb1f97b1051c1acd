"""Tests of the cluster manifests and the container image recipe in deploy/."""
