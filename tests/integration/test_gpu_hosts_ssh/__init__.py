"""The two GPU classes' hosts, reached over real SSH, and the whole chain on them: deploy, a second deploy,
status, bench, capture, probe-io, undeploy.

The hosts are containers running sshd (images/testhost, stage `gpu`), each its own filesystem, processes and
hostname, with the Docker CLI talking to this machine's engine; they share this machine's network namespace,
each sshd on its own port, so that the port a host's serving container publishes is on that host's loopback,
as on a real host. What a container cannot be is REPLAYED from tests/fixtures/gpu-hosts (nvidia-smi,
lsblk, findmnt and nvme through tests/replay/, the sysfs tree, and the host-level readings in <class>/host/,
see HOST-READINGS.md); systemctl is a stand-in that records its calls (no systemd in a container, and the
engine it would restart runs these tests). All of it goes through the one replay seam, the inventory's
refdeploy_replay_environment (tests/replay/README.md); no role has a test input.

What cannot exist here at all, the GPUs and the CUDA engine, is replaced at the one test seam, the stand-in
(serving/plan/standin.py, switched on by REFDEPLOY_STAND_IN for these `make` runs only): the class is planned as
on a real host (class, NUMA plan, RAM budget, data drive, slice, container spec, the reviewed golden spec),
and the stand-in starts the CPU runtime image in its place with a CPU-feasible argv (the class's kind of
parallelism over 2 ranks: PP=2 for the 3090 class, TP=2 for the PRO 6000 class), the tiny model staged at the
class's model path, no device requests, this machine's CPUs; the probe containers get the replayed
nvidia-smi where the nvidia runtime would mount the driver's. Everything else (every playbook, role, check
and report) is the production path, and every artifact says a stand-in ran.

The Docker engine is this machine's, so paths that Docker mounts (the staged model, the probe and bench
scratch directories) are mounted into the test hosts at the same path as here.

The hosts are started once for this package (conftest.py, package scope) and shared by its modules, which
pytest runs in name order: preflight, the refused deploys, the restart rollback (each needs a 3090 host no
deploy has changed yet), then the whole chain, which deploys. gpu_hosts.py holds what they share.
"""
