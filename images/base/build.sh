#!/usr/bin/env bash
# Build the project's Debian base image with debootstrap and `docker import`.
#
# No container registry is reachable from the build hosts this project targets, so
# the base is made from Debian's package archive, which is.  The suite, the mirror
# and the package list are inputs; the resolved package versions are recorded in
# the image (/etc/refdeploy/base-packages.lock) and in a label, so two bases can
# be compared package by package.
#
# usage: build.sh IMAGE_TAG
#   BASE_SUITE   Debian suite        (default: bookworm)
#   BASE_MIRROR  Debian mirror URL   (default: http://deb.debian.org/debian)
#   SOURCE_DATE_EPOCH  mtime clamp for the tarball (default: 0)
set -euo pipefail

tag=${1:?usage: build.sh IMAGE_TAG}
here=$(cd "$(dirname "$0")" && pwd)
suite=${BASE_SUITE:-bookworm}
mirror=${BASE_MIRROR:-http://deb.debian.org/debian}
epoch=${SOURCE_DATE_EPOCH:-0}

command -v debootstrap >/dev/null || {
  echo "build.sh: debootstrap is not installed: apt-get install debootstrap" >&2; exit 2; }

include=$(grep -v '^\s*#' "$here/packages.txt" | grep -v '^\s*$' | paste -sd, -)
work=$(mktemp -d /var/tmp/refdeploy-base.XXXXXX)
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs

echo "build.sh: debootstrap $suite from $mirror (+ $include)"
debootstrap --variant=minbase --include="$include" "$suite" "$rootfs" "$mirror" \
  >"$work/debootstrap.log" 2>&1 || {
  tail -n 30 "$work/debootstrap.log" >&2
  echo "build.sh: debootstrap failed (log above)" >&2; exit 1; }

mkdir -p "$rootfs/etc/refdeploy"
chroot "$rootfs" dpkg-query -W -f '${Package}=${Version}\n' | LC_ALL=C sort \
  >"$rootfs/etc/refdeploy/base-packages.lock"
printf 'suite=%s\nmirror=%s\n' "$suite" "$mirror" >"$rootfs/etc/refdeploy/base-source"
# What debootstrap leaves behind that a container does not need.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin \
  "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/log/* "$rootfs"/tmp/*
lock_sha=$(sha256sum "$rootfs/etc/refdeploy/base-packages.lock" | cut -d' ' -f1)

tar --sort=name --mtime="@$epoch" --clamp-mtime --numeric-owner \
    --exclude=./dev/* --exclude=./proc/* --exclude=./sys/* -C "$rootfs" -c . |
  docker import \
    --change 'ENV LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' \
    --change "LABEL org.refdeploy.base.suite=$suite" \
    --change "LABEL org.refdeploy.base.mirror=$mirror" \
    --change "LABEL org.refdeploy.base.packages-lock-sha256=$lock_sha" \
    - "$tag" >/dev/null
echo "build.sh: built $tag (packages lock sha256 $lock_sha)"
