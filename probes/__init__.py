"""Probes: read what a running serving stack and its host are doing, as raw output plus typed results."""
