#!/usr/bin/env bash
# GLM-5's GGUF through the pinned GGUF plugin's own weight-name mapping, on a tiny file of the glm-dsa architecture,
# in the CUDA runtime image (its torch, transformers 5.19 and gguf 0.19). README.md says what it showed.
# usage: docs/experiments/glm5-gguf/run.sh [IMAGE]   (default: the tag images/vllm/verified-cuda.json records)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
image=${1:-$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tag"])' "$repo/images/vllm/verified-cuda.json")}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$here"/make_tiny_glm_dsa.py "$here"/map_check.py "$here"/plugin-glm-dsa.diff "$work"/
# The plugin as the image pins it (its wheel), and a copy with the change this experiment tries.
python3 -m pip download --quiet --no-deps vllm-gguf-plugin==0.0.5 -d "$work/wheels"
python3 -m zipfile -e "$work"/wheels/vllm_gguf_plugin-0.0.5-*.whl "$work/src/plugin"
cp -r "$work/src/plugin" "$work/src/plugin-patched"
patch -p1 --quiet -d "$work/src/plugin-patched" <"$here/plugin-glm-dsa.diff"
chmod -R a+rX "$work"
# Written and checked with the image's own Python, offline.
docker run --rm --network none --env VLLM_TARGET_DEVICE=cpu -v "$work:/exp:ro" --entrypoint bash "$image" -c \
  'cp -r /exp /tmp/exp && cd /tmp/exp && python3 make_tiny_glm_dsa.py >/dev/null && python3 map_check.py'
