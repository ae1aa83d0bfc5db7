"""Probe plans and outcomes, capture and profiler reports and traces, what a probe brought home, plots."""
