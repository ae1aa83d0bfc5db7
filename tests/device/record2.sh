#!/usr/bin/env bash
# Issue 28, item 10, second run: NVML at 200 ms beside the phased load (the first run's recorder could not write
# the CPU-affinity arrays), nvidia-smi's stream beside it again. Run from the repository root; records in $OUT/rec2.
set -u
export PYTHONUNBUFFERED=1
R="$OUT/rec2"
mkdir -p "$R"
exec > >(tee "$OUT/log2.txt") 2>&1
F=$(python3 -c 'import ast; t = ast.parse(open("probes/samplers.py").read()); print(",".join(next(ast.literal_eval(n.value) for n in t.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "NVIDIA_SMI_FIELDS")))')
timeout 40 nvidia-smi --query-gpu="$F" --format=csv,noheader,nounits -lms 200 >"$R/nvidia-smi-sampled.csv" 2>&1 &
smi=$!
timeout 60 python3 tests/device/nvml_record.py --seconds 24 --interval 0.2 --out "$R/nvml-samples.jsonl" \
  2>"$R/nvml-record.stderr" &
nvml=$!
sleep 1
timeout 60 python3 tests/device/load.py 4 >"$R/load-phases.jsonl" 2>"$R/load.stderr"
wait "$nvml"; echo "nvml rc $?"
kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
python3 -c 'import torch; print({k: v for k, v in torch.cuda.host_memory_stats().items()})' >"$R/host-memory-stats-keys.txt" 2>&1
python3 -m pip show nvidia-ml-py >"$R/nvidia-ml-py.txt" 2>&1
tar czf "$OUT/recorded2.tar.gz" -C "$OUT" rec2
cat "$R/nvml-record.stderr"; head -c 3000 "$R/nvml-samples.jsonl"; tail -c 600 "$R/nvml-samples.jsonl"; cat "$R/host-memory-stats-keys.txt"
