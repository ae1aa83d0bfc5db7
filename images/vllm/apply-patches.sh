#!/usr/bin/env bash
# Apply the ordered patch series to an installed vLLM, all or nothing.
#
# usage: apply-patches.sh SITE_PACKAGES PATCH_DIR RECORD_FILE
# Patches are applied in file-name order (0001-..., 0002-...).  Every patch is
# first checked with a dry run against the tree as the earlier patches leave it;
# the first one that does not apply stops the build, named, before the tree is
# changed further.  RECORD_FILE receives "sha256  name" per applied patch.
set -euo pipefail
site=${1:?site-packages dir}; dir=${2:?patch dir}; record=${3:?record file}

mapfile -t patches < <(find "$dir" -maxdepth 1 -name '*.patch' -printf '%f\n' | LC_ALL=C sort)
if ((${#patches[@]} == 0)); then
  echo "apply-patches: no *.patch files in $dir" >&2; exit 1
fi
: >"$record"
for name in "${patches[@]}"; do
  p=$dir/$name
  if ! out=$(patch -p1 --dry-run --batch --forward -d "$site" <"$p" 2>&1); then
    printf '%s\n' "$out" >&2
    echo "apply-patches: patch $name does not apply to $site (dry run above); no image was built" >&2
    exit 1
  fi
  patch -p1 --batch --forward --quiet -d "$site" <"$p"
  (cd "$dir" && sha256sum "$name") >>"$record"
  echo "apply-patches: applied $name"
done
