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
#   REFDEPLOY_BASE_KEYRING  the keyring the suite's Release file must verify against
#                      (default: Debian's, /usr/share/keyrings/debian-archive-keyring.gpg)
#   REFDEPLOY_BASE_LOG debootstrap's log, kept after the build directory is removed
#                      (default: /var/log/refdeploy/base-debootstrap.log)
#
# The mirror is plain HTTP by default: what makes the packages trustworthy is the
# signed Release file, whose package sums debootstrap checks each download against.
# So the signature is required (--force-check-gpg): a host without the keyring, or
# a mirror whose Release does not verify against it, stops the build before any
# package is unpacked, instead of building an unverified base with a warning.
set -euo pipefail

tag=${1:?usage: build.sh IMAGE_TAG}
here=$(cd "$(dirname "$0")" && pwd)
suite=${BASE_SUITE:-bookworm}
mirror=${BASE_MIRROR:-http://deb.debian.org/debian}
epoch=${SOURCE_DATE_EPOCH:-0}
keyring=${REFDEPLOY_BASE_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}
log=${REFDEPLOY_BASE_LOG:-/var/log/refdeploy/base-debootstrap.log}

command -v debootstrap >/dev/null || {
  echo "build.sh: debootstrap is not installed: apt-get install debootstrap" >&2; exit 2; }
[ -f "$keyring" ] || {
  echo "build.sh: keyring $keyring does not exist: apt-get install debian-archive-keyring," \
    "or set REFDEPLOY_BASE_KEYRING to the keyring that signs $mirror" >&2; exit 2; }

include=$(grep -v '^\s*#' "$here/packages.txt" | grep -v '^\s*$' | paste -sd, -)
mkdir -p "$(dirname "$log")"
work=$(mktemp -d /var/tmp/refdeploy-base.XXXXXX)
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs

echo "build.sh: debootstrap $suite from $mirror (+ $include), Release checked against $keyring"
debootstrap --variant=minbase --keyring="$keyring" --force-check-gpg --include="$include" \
  "$suite" "$rootfs" "$mirror" >"$log" 2>&1 || {
  # debootstrap's reason is its first "E:" line; the lines after it are advice about the keyring.
  said=$(grep -m1 '^E: ' "$log" | cut -c4- || true)
  if grep -q '^I: Checking Release signature' "$log" && ! grep -q '^I: Valid Release signature' "$log"; then
    echo "build.sh: the Release file of $mirror $suite did not verify against $keyring: ${said:-no reason given}" \
      "(log: $log); set REFDEPLOY_BASE_KEYRING to the keyring that signs it (Debian's: apt-get install" \
      "debian-archive-keyring). No image was built." >&2
    exit 1
  fi
  tail -n 30 "$log" >&2
  echo "build.sh: debootstrap failed: ${said:-see the log above} (log: $log). No image was built." >&2; exit 1; }

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
