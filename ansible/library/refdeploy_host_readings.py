#!/usr/bin/python
"""Ansible module refdeploy_host_readings: what a plan needs to know about the managed host, read only.

  - name: Read the host for the plan          (the refdeploy_plan action plugin runs it)
    refdeploy_host_readings:
      mode: gpu                               # cpu: the served files (and the API key file); gpu: everything
      host: gpu3090-a
      served_dirs: [/srv/models/llama]
      api_key_file: /etc/refdeploy/api-key    # its owner, mode, size, type, length, charset; never its contents
      hf_token_file: /etc/refdeploy/hf-token  # its owner, mode, size and type; never its contents
      tls_key_file: /etc/ssl/refdeploy/key.pem  # the front door's operator key: its owner, mode, size and type
      cache_dir: /var/lib/refdeploy/cache     # the compile caches' root: its free space (df)
      query_gpu_fields: [index, name, ...]    # serving.host.gpu_facts.QUERY_GPU_FIELDS
      settings_fields: [index, ...]           # serving.host.host_tuning.SETTINGS_FIELDS (GPU mode: the GPUs' settings)
      read_docker: true                       # Docker Engine's state, see `host_state`
      docker_port: 8443                       # the containers that publish this port (0: none asked)
      images: [refdeploy/vllm, refdeploy/probes]   # references (a repository: all its tags)
      paths: [/var/lib/refdeploy/secrets/refdeploy-vllm.api-key]
      containers: [refdeploy-vllm, refdeploy-vllm-previous, refdeploy-vllm-samplers]
      files: [/var/lib/refdeploy/rendered/refdeploy-vllm.json]
      kept_dir: /var/lib/refdeploy/effective  # <container ID>.affinity: its processes' affinity verified at launch
      dirs: [/var/lib/refdeploy/api]          # each directory's mode, uid and gid
      dir_children: [/var/lib/refdeploy/cache/refdeploy-vllm/cpu-tiny]   # ... and of each directory in these
      groups: [refdeploy-api]                 # each group's gid
      trees: [/var/lib/refdeploy/models/tiny] # the entries that are not root's with u=rwX,go=rX
      health_socket: /var/lib/refdeploy/api/refdeploy-vllm/vllm.sock   # GET /health there
      wheelhouse_dir: /opt/wheels             # images_wheelhouse_dir, images_extra_ca_file: hashed, see build_files
      extra_ca_file: /etc/ssl/certs/ca-certificates.crt
      build_files_cache: /var/lib/refdeploy/build-files.json
      engine: {container: refdeploy-vllm, socket: /run/refdeploy/api/vllm.sock, kept_dir: /var/lib/refdeploy/effective,
               inside_script: "...", inside_args: [/models/tiny]}   # a deploy's read: see `engine` below
    register: got                             # got.readings: {name: text}, as serving/plan/gpu_plan.py reads them;
                                              # got.host_state: what the roles act on, see below;
                                              # got.tuning: the host's tuning, for the manifest, see below

Readings (each the tool's own output, in its own format): hostname, served_files (`find -type f -printf
'%s\\t%p\\n'`), model_headers (JSON: each served config.json's text and each GGUF file's header as the format lays
it out, metadata and tensor table, never the weights), df (`df -B1 --output=target,avail,size` of the served
directories, Docker's data root and `cache_dir`, after a "<role>\\t<path>" line for each), api_key_file (`stat -c
'%u %a %s %F'`, or "missing"), api_key_shape (the key's length and whether it keeps to its charset, see key_shape),
hf_token_file and tls_key_file (as api_key_file); for a GPU host also nvidia_smi_L, query_gpu, topo, the GPUs' peer
readings p2p_read, pci_paths, acs and iommu (module_utils/refdeploy_pcie_peer.py), sysfs (node and PCI NUMA files as
"/sys/<path>\\t<value>"), meminfo, nvidia_version (/proc/driver/nvidia/version), cgroup_fs, docker_runtimes,
dockerd_limits, data_paths, lsblk, findmnt:<dir> and smart:<nvme disk>. `missing` lists the tools the host lacks,
`timeout` the commands that did not answer within timeout_s (a wedged driver, a dead NFS mount, a dockerd that does
not answer): the plan names each one. `host_facts` is empty here;
refdeploy_host_readings_with_facts, the same read, gives there the setup module's own facts for the platform, the
distribution, the CPUs and the memory (ansible_hostname, ansible_distribution_version, ansible_processor_vcpus,
ansible_memtotal_mb, ...), read by its own collectors in this same run: a playbook gets them without gathering
facts, whose hardware subset also scans mounts, devices and DMI.

`host_state` is what is on the host now, for the roles to act on (not for the plan, which must not vary with
it): `docker` (Docker Engine's `rc`, `version` and last `error` line of `docker version`, and `port_owners`, the
containers that publish docker_port, the front door's),
`images_present` (the repository:tag the engine has of `images`),
`containers` (`docker container inspect` of those of `containers` that exist, cut to what a deploy decides on:
Id, Name, RestartCount, State, Config.Image, Config.Labels and HostConfig's limits, and `Limits`, the kernel's
limits at every cgroup level over a running one's PID 1, and its threads' affinity (module_utils/refdeploy_cgroups.py),
and `LaunchAffinity`, its processes' affinity as the deploy that started it verified it (<kept_dir>/<ID>.affinity);
never their environment), `paths` (each of
`paths` as directory, file or missing) and `files` (each regular file of `files` as its sha256, mode, uid and
gid: a role skips writing a file the host has as it would write it), `dirs` (each directory of `dirs`, and of
those directly in `dir_children`, as its mode, uid and gid, or null), `groups` (each group's gid, or null),
`trees` (the first five entries of each tree that are not root:root with u=rwX,go=rX; null where it is not a
directory) and `health` (the HTTP status of GET /health on `health_socket`, or null and why; null where not asked).
One read for what preflight, images and serve would each ask again (module_utils/refdeploy_host_state.py, read
beside the readings).

`tuning` is the host's tuning as the manifest records it (serving/host/host_tuning.py parses it), each reading the
file's text or null where the file does not exist (no cpufreq on many VMs, no NUMA balancing on some kernels):
cmdline (/proc/cmdline), cpu_governors ("cpu<N>\t<governor>" per /sys/devices/system/cpu/cpu*/cpufreq/
scaling_governor), thp_enabled and thp_defrag (/sys/kernel/mm/transparent_hugepage/), swappiness
(/proc/sys/vm/swappiness), numa_balancing (/proc/sys/kernel/numa_balancing), and in GPU mode gpu_settings
(`nvidia-smi --query-gpu=<settings_fields> --format=csv,noheader,nounits`: persistence mode, application
clocks, power limits, ECC mode, PCIe links). Like the plan's readings it only reads; it is kept out of the plan
(a host's tuning is compared by `make verify`, not planned from). `replayed` names the replay directory where
there is one, so the manifest says the GPU settings were replayed.

`engine` (null unless asked) is the serving container's engine read now, as refdeploy_engine_readings reads it
once it answers (module_utils/refdeploy_engine_read.py), without waiting: `healthy` false and nothing read where
/health does not answer at once, `error` where a reading failed. A deploy asks (plan_engine_readings), and serve
keeps these readings for a container it keeps unchanged (roles/serve/tasks/kept.yml) instead of reading again.

`build_files` is what the images role copies into a build from the host (the wheelhouse's files by path and
sha256, the extra CA file's sha256, or extra_ca_missing): image tags hash them (serving/plan/images.py), so a
changed wheel or CA builds a new image rather than finding the old one.

The one replay seam (tests/replay/README.md; never set in production): where REFDEPLOY_REPLAY_DIR names a directory
of recorded readings, its sys/ stands for /sys and its host/ holds the host-level readings a test container cannot
have (meminfo.txt, proc-driver-nvidia-version.txt, cgroup-fs.txt, docker-runtimes.json, dockerd-limits.txt). The
tools a test host cannot have (nvidia-smi, lsblk, findmnt, nvme, lspci, systemctl) are stand-ins found first on its
PATH, which serve the same directory; this module runs tools by PATH like any other.
"""

from __future__ import annotations

# The read itself is module_utils/refdeploy_host_read.py, which refdeploy_host_readings_with_facts runs too.
from ansible.module_utils.refdeploy_host_read import run


def main() -> None:
    run(host_facts=None)


if __name__ == "__main__":
    main()
