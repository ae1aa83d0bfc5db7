# Sourced by record.sh and record2.sh (run from the repository root on the device machine).

fields() {  # a tuple of field names, read from our source without importing it: fields FILE NAME
  python3 - "$1" "$2" <<'PY'
import ast, sys
tree = ast.parse(open(sys.argv[1]).read())
for node in tree.body:
    if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == sys.argv[2] for t in node.targets):
        print(",".join(ast.literal_eval(node.value)))
PY
}

sampled_under_load() {  # into $1: nvidia-smi's -lms 200 stream and NVML at 200 ms, beside load.py's phases
  local out=$1 smi nvml
  timeout 40 nvidia-smi --query-gpu="$(fields probes/readers/samplers.py NVIDIA_SMI_FIELDS)" \
    --format=csv,noheader,nounits -lms 200 >"$out/nvidia-smi-sampled.csv" 2>&1 &
  smi=$!
  timeout 60 python3 tests/device/nvml_record.py --seconds 24 --interval 0.2 --out "$out/nvml-samples.jsonl" \
    2>"$out/nvml-record.stderr" &
  nvml=$!
  sleep 1
  timeout 60 python3 tests/device/load.py 4 >"$out/load-phases.jsonl" 2>"$out/load.stderr"
  wait "$nvml"; echo "nvml rc $?"
  kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
}
