#!/usr/bin/env bash
# Thaws the sandboxes a gateway froze and could not thaw (it was killed), as written down
# in /run/sandgate/frozen: one file per container, "<gateway id> <pid> <its start time>"
# (field 22 of /proc/<pid>/stat, which tells the process from a later one that got its
# pid). dockerd waits
# forever for a frozen container's state when it starts, so this runs before it does:
# from scripts/setup-runtime.sh, and from docker.service's ExecStartPre where systemd
# runs dockerd. Records of a gateway that is still running are left to it.
set -uo pipefail
records=${SANDGATE_FROZEN_RECORDS:-/run/sandgate/frozen}
[ -d "$records" ] && [ ! -L "$records" ] || exit 0
# Only a directory of root's that no one else may write to, as the gateway makes it: a
# record planted elsewhere would have this script thaw a container that is not ours.
read -r owner mode < <(stat -c '%u %a' "$records")
if [ "$owner" != 0 ] || (( 8#$mode & 8#022 )); then
  echo "not thawing: $records is not a directory only root can write to" >&2
  exit 0
fi
for rec in "$records"/*; do
  id=${rec##*/}
  [[ $id =~ ^[0-9a-f]{64}$ ]] && [ -f "$rec" ] && [ ! -L "$rec" ] || continue
  read -r _gateway pid started <"$rec" || true
  if [[ ${pid:-} =~ ^[0-9]+$ ]] && stat=$(cat "/proc/$pid/stat" 2>/dev/null); then
    read -ra fields <<<"${stat##*) }"
    [ "${fields[19]:-}" = "${started:-}" ] && continue
  fi
  thawed=0 gone=1
  for f in "/sys/fs/cgroup/freezer/docker/$id/freezer.state" "/sys/fs/cgroup/freezer/system.slice/docker-$id.scope/freezer.state" \
           "/sys/fs/cgroup/docker/$id/cgroup.freeze" "/sys/fs/cgroup/system.slice/docker-$id.scope/cgroup.freeze"; do
    [ -e "$f" ] || continue
    gone=0
    case $f in *freezer.state) v=THAWED ;; *) v=0 ;; esac
    echo "$v" >"$f" 2>/dev/null && thawed=1
  done
  if [ $thawed = 1 ]; then
    echo "thawed sandbox ${id:0:12}, left frozen by a gateway that could not thaw it"
  fi
  # A record whose thaw failed while its cgroup is there stays, for the next try.
  [ $thawed = 1 ] || [ $gone = 1 ] && rm -f "$rec"
done
exit 0
