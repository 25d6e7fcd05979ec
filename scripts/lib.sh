# Shared helpers for sandgate's shell scripts. Source it; do not run it.

log() { printf '\033[1m[sandgate]\033[0m %s\n' "$*" >&2; }
die() { printf '\033[1;31m[sandgate] error:\033[0m %s\n' "$*" >&2; exit 1; }

require_root() {
  [ "$(id -u)" = 0 ] || die "$1 must run as root (it installs packages and talks to dockerd). Run it again with sudo."
}

# Prints the Debian mirror URI the machine's own apt sources use for the main
# archive (not the security archive). Never hard-code a mirror: hosts differ.
debian_mirror() {
  local uri="" dir=${SANDGATE_APT_SOURCES_DIR:-/etc/apt/sources.list.d} list=${SANDGATE_APT_SOURCES_LIST:-/etc/apt/sources.list}
  if [ -n "${SANDGATE_DEBIAN_MIRROR:-}" ]; then echo "$SANDGATE_DEBIAN_MIRROR"; return; fi
  if compgen -G "$dir/*.sources" >/dev/null; then
    uri=$(awk '
      /^[[:space:]]*$/ { if (uris != "" && suites !~ /security/ && enabled) { print uris; exit } uris=""; suites=""; enabled=1; next }
      /^Enabled:[[:space:]]*no/ { enabled=0 }
      /^URIs:/ { uris=$2 }
      /^Suites:/ { suites=$0 }
      BEGIN { enabled=1 }
      END { if (uris != "" && suites !~ /security/ && enabled) print uris }
    ' "$dir"/*.sources | grep -v -i security | grep -i debian | head -n1)
  fi
  if [ -z "$uri" ] && [ -f "$list" ]; then
    uri=$(awk '$1 == "deb" && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /^(https?|file):/) { print $i; exit } }' "$list" | grep -i debian | head -n1)
  fi
  [ -n "$uri" ] || die "no Debian mirror found in /etc/apt/sources.list or /etc/apt/sources.list.d/*.sources; set SANDGATE_DEBIAN_MIRROR to a bookworm mirror URI"
  echo "$uri"
}

# apt-get update at most once per script run.
APT_UPDATED=0
apt_install() {
  if [ "$APT_UPDATED" = 0 ]; then
    log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null || die "apt-get update failed"
    APT_UPDATED=1
  fi
  log "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null \
    || die "apt-get install $* failed"
}

# A dockerd that is starting accepts connections and answers nothing: never wait on it for long.
docker_up() { timeout 10 docker info >/dev/null 2>&1; }
