#!/usr/bin/env bash
# Issue 28, item 10: record a real GPU's readings for the fixtures, in one run on the device machine.
#   run: bash tests/device/record.sh      (from the repository root; $OUT is where the records go)
# Everything lands in $OUT/rec and is packed into $OUT/recorded.tar.gz; the log is $OUT/log.txt.
# Bounded: about 2 minutes on an H200; each step has its own timeout so a hang costs that step only.
set -u
export PYTHONUNBUFFERED=1
R="$OUT/rec"
mkdir -p "$R"
exec > >(tee "$OUT/log.txt") 2>&1
step() { echo "== $(date -u +%T) $*"; }
# shellcheck source=tests/device/lib.sh
. tests/device/lib.sh
Q=$(fields serving/host/gpu_facts.py QUERY_GPU_FIELDS)
S=$(fields serving/host/host_tuning.py SETTINGS_FIELDS)
F=$(fields probes/readers/samplers.py NVIDIA_SMI_FIELDS)

step host
date -u +%FT%TZ >"$R/date.txt"
uname -a >"$R/uname.txt"
cat /proc/driver/nvidia/version >"$R/proc-driver-nvidia-version.txt" 2>&1
lscpu >"$R/lscpu.txt" 2>&1
cat /proc/meminfo >"$R/meminfo.txt"
(ulimit -l; cat /proc/self/status | grep -E '^(Cap|Seccomp)') >"$R/limits.txt" 2>&1
python3 -c 'import torch, pynvml; print("torch", torch.__version__, "cuda", torch.version.cuda); print("nvidia-ml-py", getattr(pynvml, "__version__", "?"))' >"$R/python-versions.txt" 2>&1
pip show nvidia-ml-py 2>/dev/null | head -3 >>"$R/python-versions.txt"

step nvidia-smi
timeout 30 nvidia-smi >"$R/nvidia-smi.txt" 2>&1
timeout 30 nvidia-smi -L >"$R/nvidia-smi-L.txt" 2>&1
timeout 60 nvidia-smi -q >"$R/nvidia-smi-q.txt" 2>&1
timeout 30 nvidia-smi topo -m >"$R/nvidia-smi-topo-m.txt" 2>&1
timeout 30 nvidia-smi --query-gpu="$Q" --format=csv,noheader,nounits >"$R/nvidia-smi-query-gpu.csv" 2>&1
timeout 30 nvidia-smi --query-gpu="$S" --format=csv,noheader,nounits >"$R/nvidia-smi-settings.csv" 2>&1
echo "$Q" >"$R/fields-query-gpu.txt"; echo "$S" >"$R/fields-settings.txt"; echo "$F" >"$R/fields-sampled.txt"
bdf=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1 | tr 'A-F' 'a-f' | sed 's/^0000\(....:\)/\1/')
for f in numa_node local_cpulist current_link_speed current_link_width max_link_speed max_link_width; do
  echo "$f: $(cat /sys/bus/pci/devices/$bdf/$f 2>&1)"
done >"$R/sysfs-gpu.txt"
echo "bdf $bdf" >>"$R/sysfs-gpu.txt"

step "samplers under load (nvidia-smi -lms 200 and NVML at 200 ms, beside a phased torch load)"
sampled_under_load "$R"

step "GPU smoke test (images/vllm/gpu_smoke.py): every GPU, then a device that does not exist"
timeout 120 python3 images/vllm/gpu_smoke.py >"$R/gpu-smoke.json" 2>"$R/gpu-smoke.stderr"; echo "rc $?" | tee "$R/gpu-smoke.rc"
CUDA_VISIBLE_DEVICES=7 timeout 120 python3 images/vllm/gpu_smoke.py >"$R/gpu-smoke-no-device.json" \
  2>"$R/gpu-smoke-no-device.stderr"; echo "rc $?" | tee "$R/gpu-smoke-no-device.rc"

step "pinned host RAM of a 4.239 GiB buffer"
timeout 120 python3 tests/device/pinned_ram.py torch >"$R/pinned-torch-default.json" 2>"$R/pinned-torch-default.stderr"
PYTORCH_CUDA_ALLOC_CONF=pinned_max_round_threshold_mb:4096 timeout 120 python3 tests/device/pinned_ram.py torch \
  >"$R/pinned-torch-threshold4096.json" 2>"$R/pinned-torch-threshold4096.stderr"
PYTORCH_CUDA_ALLOC_CONF=pinned_use_cuda_host_register:True,pinned_num_register_threads:8 timeout 120 \
  python3 tests/device/pinned_ram.py torch >"$R/pinned-torch-host-register.json" 2>"$R/pinned-torch-host-register.stderr"
timeout 120 python3 tests/device/pinned_ram.py registered >"$R/pinned-registered.json" 2>"$R/pinned-registered.stderr"

step "patch 0003 from a worker-like process"
timeout 120 python3 tests/device/worker_memory.py >"$R/worker-memory.log" 2>&1; echo "rc $?"

step pack
tar czf "$OUT/recorded.tar.gz" -C "$OUT" rec
ls -la "$R"
for f in "$R"/*.json "$R"/*.rc "$R"/*.stderr; do echo "--- $f"; head -c 1500 "$f"; echo; done
step done
