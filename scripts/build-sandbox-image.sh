#!/usr/bin/env bash
# Builds the sandbox image without a container registry:
#   base:  debootstrap --variant=minbase <codename> from the machine's own apt mirror,
#          then sandbox/provision.sh inside it (Debian's python3 data stack, user 1000),
#          imported as sandgate/sandbox-base:<hash of packages.txt + provision.sh>;
#   image: sandbox/Dockerfile on top of that base (Deno from npm, the runner: sandbox/runner
#          without its tests),
#          tagged sandgate/sandbox:<hash of everything that goes in> and :latest.
# Each step is skipped when an image with its content hash exists, so an unchanged
# image is never rebuilt and a runner change rebuilds only the thin top layer.
# Usage: scripts/build-sandbox-image.sh [--print-tag]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
. "$here/lib.sh"

REPO=${SANDGATE_IMAGE_REPO:-sandgate/sandbox}
DENO_BIN="$root/node_modules/@deno/linux-x64-glibc/deno"
. /etc/os-release
codename=${VERSION_CODENAME:-bookworm}
# The image is Debian bookworm whatever the host runs; the host only lends its mirror.
suite=bookworm

hash_of() { sha256sum | cut -c1-16; }
base_hash=$( { echo "$suite"; cat "$root/sandbox/packages.txt" "$root/sandbox/provision.sh"; } | hash_of)
[ -x "$DENO_BIN" ] || die "Deno binary missing at $DENO_BIN: run npm install first"
# The Deno host is bundled into sandbox/runner/deno/ and ships with the runner.
bash "$root/scripts/build-deno-host.sh"
image_hash=$( {
  echo "$base_hash"
  cat "$root/sandbox/Dockerfile"
  "$DENO_BIN" --version | head -n1
  (cd "$root" && find sandbox/runner -type f ! -path '*__pycache__*' ! -path 'sandbox/runner/tests/*' -print0 | sort -z | xargs -0 sha256sum)
  sha256sum "$root/host/workspace_helper.py" | cut -d' ' -f1
} | hash_of)
BASE_TAG="sandgate/sandbox-base:$base_hash"
IMAGE_TAG="$REPO:$image_hash"

if [ "${1:-}" = --print-tag ]; then echo "$IMAGE_TAG"; exit 0; fi
require_root "scripts/build-sandbox-image.sh"
docker_up || die "dockerd is not reachable: run scripts/setup-runtime.sh first"

start=$(date +%s)
elapsed() { echo "$(( $(date +%s) - start ))s"; }

if docker image inspect "$IMAGE_TAG" >/dev/null 2>&1; then
  docker tag "$IMAGE_TAG" "$REPO:latest"
  log "sandbox image $IMAGE_TAG is up to date"
  exit 0
fi

if ! docker image inspect "$BASE_TAG" >/dev/null 2>&1; then
  command -v debootstrap >/dev/null 2>&1 || apt_install debootstrap
  mirror=$(debian_mirror)
  work=$(mktemp -d /var/tmp/sandgate-rootfs.XXXXXX)
  rootfs="$work/rootfs"
  cleanup() {
    for m in proc dev/pts dev; do mountpoint -q "$rootfs/$m" 2>/dev/null && umount -l "$rootfs/$m"; done
    rm -rf "$work"
  }
  trap cleanup EXIT
  log "[1/4] debootstrap $suite from $mirror (about a minute)"
  debootstrap --variant=minbase "$suite" "$rootfs" "$mirror" 2>&1 \
    | awk -v t0="$start" '/^I: (Retrieving|Validating|Extracting|Installing|Configuring|Base system)/ && ++n % 15 == 1 { printf "  %ds  %s\n", systime() - t0, $0; fflush() }' \
    || die "debootstrap failed; is $mirror reachable?"
  [ -x "$rootfs/bin/sh" ] || die "debootstrap failed (no /bin/sh in the rootfs)"

  log "[2/4] installing the python data stack inside the rootfs (about two minutes) [$(elapsed)]"
  cp "$root/sandbox/packages.txt" "$root/sandbox/provision.sh" "$rootfs/tmp/"
  mount -t proc proc "$rootfs/proc"
  mount --bind /dev "$rootfs/dev"
  chroot "$rootfs" /bin/sh /tmp/provision.sh /tmp/packages.txt 2>&1 \
    | awk -v t0="$start" '/^(Setting up|Unpacking)/ && ++n % 40 == 1 { printf "  %ds  %s\n", systime() - t0, $0; fflush() } /rror/ { print "  " $0; fflush() }' \
    || die "provisioning the rootfs failed (see the lines above)"
  umount -l "$rootfs/dev"; umount -l "$rootfs/proc"
  rm -f "$rootfs/tmp/packages.txt" "$rootfs/tmp/provision.sh"

  log "[3/4] importing the base into docker as $BASE_TAG ($(du -sh "$rootfs" | cut -f1)) [$(elapsed)]"
  tar -C "$rootfs" --numeric-owner -c . | docker import - "$BASE_TAG" >/dev/null
  cleanup
  trap - EXIT
else
  log "base $BASE_TAG is up to date"
fi

log "[4/4] adding Deno and the runner: $IMAGE_TAG [$(elapsed)]"
# A small context with the repository's layout: the classic builder (no registry, no
# BuildKit) reads only .dockerignore, and the repository root holds node_modules.
ctx=$(mktemp -d /var/tmp/sandgate-ctx.XXXXXX)
mkdir -p "$ctx/sandbox" "$ctx/host" "$ctx/node_modules/@deno/linux-x64-glibc"
cp "$root/host/workspace_helper.py" "$ctx/host/"
cp "$root/sandbox/packages.txt" "$root/sandbox/provision.sh" "$root/sandbox/Dockerfile" "$ctx/sandbox/"
(cd "$root" && find sandbox/runner -type f ! -path '*__pycache__*' ! -path 'sandbox/runner/tests/*' -print0 | xargs -0 cp --parents -t "$ctx")
cp "$DENO_BIN" "$ctx/node_modules/@deno/linux-x64-glibc/deno"
if ! DOCKER_BUILDKIT=0 docker build -q -f "$ctx/sandbox/Dockerfile" \
  --build-arg "BASE=$BASE_TAG" --build-arg PROVISIONED=1 \
  --label "org.sandgate.image-hash=$image_hash" \
  -t "$IMAGE_TAG" -t "$REPO:latest" "$ctx" >"$ctx/build.log" 2>&1; then
  cat "$ctx/build.log" >&2
  rm -rf "$ctx"
  die "docker build of the sandbox image failed"
fi
rm -rf "$ctx"
log "built $IMAGE_TAG in $(elapsed)"

# Older builds of this image would pile up with every runner change; drop those no
# container uses (docker refuses to remove an image in use, which is what we want).
for old in $(docker images "$REPO" --format '{{.Tag}}' | grep -v -x -e latest -e "$image_hash"); do
  docker rmi "$REPO:$old" >/dev/null 2>&1 || true
done
for old in $(docker images sandgate/sandbox-base --format '{{.Tag}}' | grep -v -x -e "$base_hash"); do
  docker rmi "sandgate/sandbox-base:$old" >/dev/null 2>&1 || true
done
