"""What the host and the engine say, read and parsed: /metrics, cgroups, /proc, host state, perf and wchan,
py-spy stacks, the samplers and NVML. The controller imports these parsers to read a fetched bundle."""
