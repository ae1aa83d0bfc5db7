"""What a managed host is: GPU facts and the driver it needs, NUMA, pinned RAM, NVMe, limits, tuning, Docker Engine."""
