#!/usr/bin/env bash
# Makes a Debian/Ubuntu host able to run sandgate's sandboxes:
#   1. docker.io from apt when dockerd is missing;
#   2. runsc (gVisor) from <codename>-backports, whose 2024 build runs the fast
#      systrap platform (bookworm's own 2022 build only has ptrace, ~4.7x slower);
#   3. the runsc runtime registered in /etc/docker/daemon.json, merged with what is there;
#   4. sandboxes a killed gateway left frozen thawed (dockerd can neither stop nor start
#      with one; scripts/thaw-frozen.sh, also run by docker.service under systemd), then
#      dockerd started when it is not running (systemd when present, else in the background);
#   5. a preflight: a container under runsc must start and report gVisor's kernel.
# Idempotent: a second run changes nothing. Must run as root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

require_root "scripts/setup-runtime.sh"

DAEMON_JSON=${SANDGATE_DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}
DOCKERD_LOG=${SANDGATE_DOCKERD_LOG:-/var/log/sandgate-dockerd.log}
PREFLIGHT_IMAGE=sandgate/preflight:busybox

. /etc/os-release
codename=${VERSION_CODENAME:-bookworm}
# Ubuntu's runsc lives in universe; backports is a Debian arrangement.
is_debian=0; [ "${ID:-}" = debian ] && is_debian=1

# --- 1. docker --------------------------------------------------------------
if ! command -v dockerd >/dev/null 2>&1; then
  apt_install docker.io
fi

# --- 2. runsc ---------------------------------------------------------------
runsc_is_old() {
  # Debian's 2022 build reports "version 0.0~20221219.0"; anything from 2023 on has systrap.
  local v; v=$(runsc --version 2>/dev/null | head -n1 | grep -o '20[0-9]\{6\}' | head -n1 || true)
  [ -z "$v" ] || [ "$v" -lt 20230101 ]
}
if ! command -v runsc >/dev/null 2>&1 || runsc_is_old; then
  if [ "$is_debian" = 1 ]; then
    mirror=$(debian_mirror)
    list=/etc/apt/sources.list.d/sandgate-backports.sources
    want="Types: deb
URIs: $mirror
Suites: $codename-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg"
    if [ "$(cat "$list" 2>/dev/null)" != "$want" ]; then
      log "adding $codename-backports from $mirror"
      printf '%s\n' "$want" > "$list"
      APT_UPDATED=0
    fi
    if [ "$APT_UPDATED" = 0 ]; then
      DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null || die "apt-get update failed"
      APT_UPDATED=1
    fi
    log "apt-get install -t $codename-backports runsc"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends -t "$codename-backports" runsc >/dev/null \
      || { log "runsc from $codename-backports failed; falling back to $codename's runsc"; apt_install runsc; }
  else
    apt_install runsc
  fi
fi
command -v runsc >/dev/null 2>&1 || die "runsc is not installed; install gVisor (https://gvisor.dev/docs/user_guide/install/) and run this again"
RUNSC=$(command -v runsc)
if runsc_is_old; then
  platform=ptrace
  log "warning: $RUNSC is an old build without systrap; using --platform=ptrace (slow syscalls)"
else
  platform=systrap
fi

# --- 3. daemon.json ---------------------------------------------------------
mkdir -p "$(dirname "$DAEMON_JSON")"
changed=$(node - "$DAEMON_JSON" "$RUNSC" "$platform" <<'EOF'
const fs = require('node:fs');
const [file, runsc, platform] = process.argv.slice(2);
let cfg = {};
if (fs.existsSync(file)) {
  const text = fs.readFileSync(file, 'utf8').trim();
  if (text) {
    try { cfg = JSON.parse(text); } catch (e) {
      console.error(`${file} is not valid JSON (${e.message}); fix or remove it and run again`);
      process.exit(2);
    }
  }
}
// --dcache: the sentry keeps a host FD for every dentry it caches, 1000 per mount by
// default: about 2000 FDs in a sandbox that imported pandas, shared by its stub
// processes (each one lists them all in /proc/<pid>/fd). 50 in all keeps about 330
// (300: 700), with no measurable cost to imports, directory walks or runs; anything that
// walks /proc/*/fd, as these VMs' init agent does, does 2-6 times less work.
const common = ['--network=none', '--dcache=50'];
const want = { path: runsc, runtimeArgs: [...common, `--platform=${platform}`] };
// SANDGATE_RUNSC_PLATFORM=ptrace selects this one (same isolation model, slower syscalls).
const ptrace = { path: runsc, runtimeArgs: [...common, '--platform=ptrace'] };
const before = JSON.stringify(cfg);
cfg.runtimes = { ...(cfg.runtimes ?? {}), runsc: want, 'runsc-ptrace': ptrace };
const after = JSON.stringify(cfg);
if (before !== after) {
  fs.writeFileSync(file, JSON.stringify(cfg, null, 2) + '\n');
  console.log('changed');
} else console.log('same');
EOF
)
[ "$changed" = changed ] && log "registered runtimes runsc ($platform) and runsc-ptrace in $DAEMON_JSON"
if [ "${SANDGATE_RUNSC_PLATFORM:-systrap}" = ptrace ]; then
  log "SANDGATE_RUNSC_PLATFORM=ptrace: sandboxes use the runsc-ptrace runtime (slower syscalls; upstream calls ptrace unsupported)"
elif [ "$platform" = ptrace ]; then
  log "warning: this runsc has no systrap; set SANDGATE_RUNSC_PLATFORM=ptrace for the gateway"
fi

# --- 4. dockerd -------------------------------------------------------------
# A gateway writes down each sandbox it freezes (src/sandboxes/freezer.ts) and removes
# the record when it thaws it. One killed in between leaves the sandbox frozen, and
# dockerd waits forever for a frozen container's state when it starts: thaw them first.
# Where systemd runs dockerd, docker.service does the same before each start.
bash "$here/thaw-frozen.sh" | while read -r line; do log "$line"; done
if [ -d /run/systemd/system ]; then
  install -D -m 755 "$here/thaw-frozen.sh" /usr/local/lib/sandgate/thaw-frozen.sh
  dropin=/etc/systemd/system/docker.service.d/sandgate-thaw-frozen.conf
  want=$'[Service]\nExecStartPre=-/bin/bash /usr/local/lib/sandgate/thaw-frozen.sh'
  if [ "$(cat "$dropin" 2>/dev/null)" != "$want" ]; then
    mkdir -p "${dropin%/*}"
    printf '%s\n' "$want" >"$dropin"
    systemctl daemon-reload
    log "docker.service now thaws sandboxes a killed gateway left frozen before dockerd starts ($dropin)"
  fi
fi
if docker_up; then
  if [ "$changed" = changed ]; then
    # dockerd reloads its runtimes on SIGHUP without stopping containers.
    log "reloading dockerd configuration"
    if [ -d /run/systemd/system ] && systemctl is-active --quiet docker 2>/dev/null; then
      systemctl reload docker
    else
      kill -HUP "$(pidof dockerd)"
    fi
    sleep 1
  fi
else
  if pidof dockerd >/dev/null; then
    log "dockerd is running but not answering yet: waiting for it"
  elif [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
    log "starting docker with systemd"
    systemctl start docker
  else
    log "starting dockerd in the background (log: $DOCKERD_LOG)"
    # setsid: dockerd must outlive this script and the shell that ran it.
    setsid nohup dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null &
  fi
  deadline=$((SECONDS + 60))
  until docker_up; do
    [ $SECONDS -lt $deadline ] || die "dockerd did not come up within 60 s; see $DOCKERD_LOG"
    sleep 0.5
  done
fi
docker info --format '{{json .Runtimes}}' | grep -q '"runsc"' \
  || die "dockerd does not list the runsc runtime; check $DAEMON_JSON and restart dockerd"

# --- 5. preflight -----------------------------------------------------------
# No registry is assumed: the preflight image is busybox from Debian, imported offline.
if ! docker image inspect "$PREFLIGHT_IMAGE" >/dev/null 2>&1; then
  [ -x /bin/busybox ] || apt_install busybox-static
  tmp=$(mktemp -d)
  mkdir -p "$tmp/bin"
  cp /bin/busybox "$tmp/bin/busybox"
  for app in sh cat id dmesg touch true; do ln -s busybox "$tmp/bin/$app"; done
  tar -C "$tmp" -c . | docker import - "$PREFLIGHT_IMAGE" >/dev/null
  rm -rf "$tmp"
fi
out=$(docker run --rm --runtime=runsc --network=none --read-only --cap-drop=ALL \
  --security-opt=no-new-privileges --user=65534:65534 "$PREFLIGHT_IMAGE" /bin/dmesg 2>&1) \
  || die "preflight: a container under runsc failed to start:
$out
Fix: check $DAEMON_JSON (runtimes.runsc with runtimeArgs [\"--network=none\"]) and $DOCKERD_LOG"
echo "$out" | grep -q gVisor \
  || die "preflight: the container did not run under gVisor (dmesg: $out)"
log "preflight passed: runsc ($platform) runs hardened containers"
