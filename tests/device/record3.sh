#!/usr/bin/env bash
# Issue 28, item 10, third run: the GPU smoke test as the image now carries it (driver's CUDA version from
# libcuda, the PCI bus id in nvidia-smi's form), with the GPU, with no device, and with an allocator setting this
# torch does not know (the launch's environment is the smoke test's). Run from the repository root.
set -u
export PYTHONUNBUFFERED=1
R="$OUT/rec3"
mkdir -p "$R"
exec > >(tee "$OUT/log3.txt") 2>&1
smoke() {  # name, then env assignments
  local name=$1; shift
  env "$@" timeout 120 python3 images/vllm/gpu_smoke.py >"$R/$name.json" 2>"$R/$name.stderr"
  echo "rc $?" >"$R/$name.rc"
  echo "== $name $(cat "$R/$name.rc")"; cat "$R/$name.json"; head -c 600 "$R/$name.stderr"
}
smoke gpu-smoke
smoke gpu-smoke-no-device CUDA_VISIBLE_DEVICES=7
smoke gpu-smoke-alloc-conf PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,pinned_max_round_threshold_mb:4096
tar czf "$OUT/recorded3.tar.gz" -C "$OUT" rec3
