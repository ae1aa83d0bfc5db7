"""Requests sent through the real endpoint: the capture's workload client, make validate's fixed requests, and
the torch profiler's request run."""
