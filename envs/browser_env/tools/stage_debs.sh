#!/bin/sh
# Stage Debian's chromium, and every package it needs that the base image lacks, as .deb files
# in envs/browser_env/debs/ for the image's offline build (`make images` runs this; its image.Dockerfile
# installs them with dpkg, no network). The set is apt's own resolution against the base image's
# dpkg status (no recommends), downloaded from the host's apt sources: the host must run the
# base's Debian release (bookworm) and have current package lists (apt-get update).
set -eu
base=${1:-openenv-base:bookworm}
dir=$(cd "$(dirname "$0")/.." && pwd)/debs
if [ -f "$dir/.staged" ]; then exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
docker run --rm --network none "$base" cat /var/lib/dpkg/status > "$tmp/status"
apt-get -s -o Dir::State::status="$tmp/status" -o APT::Install-Recommends=false install chromium \
  | awk '/^(Inst|Conf) /{print $1, $2}' > "$tmp/plan"
awk '$1 == "Inst" {print $2}' "$tmp/plan" > "$tmp/packages"
grep -qx chromium "$tmp/packages" || { echo "apt did not resolve chromium against $base" >&2; exit 1; }
rm -rf "$dir" && mkdir -p "$dir"
# shellcheck disable=SC2046  # one package name a word
(cd "$dir" && apt-get download -q $(cat "$tmp/packages") >/dev/null)
# apt's plan installs in batches (a batch is configured before the next is unpacked: pre-dependencies,
# e.g. systemd before systemd-sysv): batch-NN.txt lists the .deb files of each, in apt's order.
awk -v dir="$dir" '
  $1 == "Inst" && last == "Conf" { n++ }
  $1 == "Inst" { cmd = "cd \"" dir "\" && ls " $2 "_*.deb"; cmd | getline f; close(cmd); print f > sprintf("%s/batch-%02d.txt", dir, n + 1) }
  { last = $1 }' "$tmp/plan"
cp "$tmp/packages" "$dir/packages.txt"
touch "$dir/.staged"
echo "staged $(wc -l < "$dir/packages.txt") packages ($(du -sh "$dir" | cut -f1)) in $dir"
