#!/usr/bin/env bash
# Issue 28, item 10, second run: NVML at 200 ms beside the phased load (the first run's recorder could not write
# the CPU-affinity arrays), nvidia-smi's stream beside it again. Run from the repository root; records in $OUT/rec2.
set -u
export PYTHONUNBUFFERED=1
R="$OUT/rec2"
mkdir -p "$R"
exec > >(tee "$OUT/log2.txt") 2>&1
# shellcheck source=tests/device/lib.sh
. tests/device/lib.sh
sampled_under_load "$R"
python3 -c 'import torch; print({k: v for k, v in torch.cuda.host_memory_stats().items()})' >"$R/host-memory-stats-keys.txt" 2>&1
python3 -m pip show nvidia-ml-py >"$R/nvidia-ml-py.txt" 2>&1
tar czf "$OUT/recorded2.tar.gz" -C "$OUT" rec2
cat "$R/nvml-record.stderr"; head -c 3000 "$R/nvml-samples.jsonl"; tail -c 600 "$R/nvml-samples.jsonl"; cat "$R/host-memory-stats-keys.txt"
