"""The I/O probe: fio's argv and output, the target's identity, and the probe's verdict."""
