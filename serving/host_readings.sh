#!/usr/bin/env bash
# The host's readings for a plan (serving/plan.py), in one command: the refdeploy_plan action plugin runs it on
# the managed host as `bash -c "$(cat host_readings.sh)" host-readings MODE HOSTNAME SERVED_DIR...`. It only reads.
#   MODE cpu: the served files.  MODE gpu: also the GPUs, NUMA topology, memory, cgroup, container runtime and
#   the served data's drive (serving/gpu_plan.py interprets them).
# Output: "==name" lines open sections; "==missing TOOL" notes a tool the host lacks.
# Test hosts (tests/integration/test_gpu_hosts_ssh.py) put replayers first on PATH (REPLAY_PATH) and replay
# host-level readings a container cannot have (HOST_REPLAY, SYS_ROOT).
set -o pipefail
mode=$1 host=$2
shift 2
DATA_PATHS=("$@")
if [ -n "${REPLAY_PATH:-}" ]; then PATH="$REPLAY_PATH:$PATH"; fi
# Every command that can hang (a wedged driver, a dead NFS mount, a dockerd that does not answer) is bounded;
# one that runs out says so as "==timeout COMMAND", and the plan names it.
READ_TIMEOUT_S=${READ_TIMEOUT_S:-30}
bounded() {
  local rc=0
  timeout "$READ_TIMEOUT_S" "$@" || rc=$?
  if [ "$rc" -eq 124 ]; then echo "==timeout $* (after ${READ_TIMEOUT_S} s)"; fi
  return "$rc"
}
SYS_ROOT=${SYS_ROOT:-/sys}
echo "==hostname"; echo "$host"
echo "==served_files"; bounded find "${DATA_PATHS[@]}" -type f -printf '%s\t%p\n' 2>/dev/null || true
# The API key file's owner, mode, size and type; never its contents.
if [ -n "${API_KEY_FILE:-}" ]; then
  echo "==api_key_file"; stat -c '%u %a %s %F' -- "$API_KEY_FILE" 2>/dev/null || echo missing
fi
[ "$mode" = gpu ] || exit 0
if command -v nvidia-smi >/dev/null; then
  echo "==nvidia_smi_L"; bounded nvidia-smi -L
  echo "==query_gpu"; bounded nvidia-smi --query-gpu="$QUERY_GPU_FIELDS" --format=csv,noheader,nounits
  echo "==topo"; bounded nvidia-smi topo -m
else
  echo "==missing nvidia-smi"
fi
echo "==sysfs"
for f in "$SYS_ROOT"/devices/system/node/node*/cpulist \
         "$SYS_ROOT"/bus/pci/devices/*/numa_node "$SYS_ROOT"/bus/pci/devices/*/local_cpulist; do
  [ -r "$f" ] && printf '/sys%s\t%s\n' "${f#"$SYS_ROOT"}" "$(cat "$f")"
done
# Host-level readings; a test host replays them (HOST_REPLAY=<dir>) where a container cannot be the machine
# (its MemTotal, a cgroup v2 host, dockerd's limits, the nvidia runtime).
from_replay() { [ -n "${HOST_REPLAY:-}" ] && [ -r "$HOST_REPLAY/$1" ] && cat "$HOST_REPLAY/$1"; }
echo "==meminfo"; from_replay meminfo.txt || cat /proc/meminfo
echo "==cgroup_fs"; from_replay cgroup-fs.txt || stat -fc %T /sys/fs/cgroup
echo "==docker_runtimes"
from_replay docker-runtimes.json || bounded docker info --format '{{json .Runtimes}}' 2>&1 || true
echo "==dockerd_limits"
if ! from_replay dockerd-limits.txt; then
  pid=$(pidof dockerd | cut -d' ' -f1)
  if [ -n "$pid" ]; then cat "/proc/$pid/limits"; fi
fi
# The data the server reads: which drive holds it, and that drive's SMART health.
echo "==data_paths"; printf '%s\n' "${DATA_PATHS[@]}"
blocks=$(bounded lsblk -J -o NAME,PKNAME,TYPE,TRAN,MODEL || true)
echo "==lsblk"; printf '%s\n' "$blocks"
for p in "${DATA_PATHS[@]}"; do echo "==findmnt:$p"; bounded findmnt -J -o SOURCE,TARGET --target "$p" || true; done
if command -v nvme >/dev/null; then
  for d in $(grep -oE '"name": ?"nvme[0-9]+n[0-9]+"' <<<"$blocks" | grep -oE 'nvme[0-9]+n[0-9]+' | sort -u); do
    echo "==smart:$d"; bounded nvme smart-log -o json "/dev/$d" || true
  done
else
  echo "==missing nvme"
fi
exit 0
