#!/usr/bin/env bash
# The two commands of the quick start (and the benchmarks):
#   npm start   -> prepare, then run the gateway
#   npm test    -> prepare, then type check, lint and every test
#   npm run bench
# "prepare" makes a fresh Debian machine with Node and root ready: npm dependencies,
# Debian's Postgres server (for the tests' throw-away clusters), Docker with gVisor
# (scripts/setup-runtime.sh) and the sandbox image (scripts/build-sandbox-image.sh).
# Every step skips what is already done.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
cd "$root"
. "$here/lib.sh"

prepare() {
  require_root "npm $1"
  # Host tools the gateway itself uses: loop-mounted workspaces need e2fsprogs and mount.
  local need=()
  command -v mkfs.ext4 >/dev/null 2>&1 || need+=(e2fsprogs)
  command -v losetup >/dev/null 2>&1 || need+=(mount)
  # Debian's python3 (not one under a home folder): host helpers run it as unprivileged users.
  [ -x /usr/bin/python3 ] || need+=(python3)
  # Debian's Postgres server (its initdb is off PATH, in /usr/lib/postgresql/<version>/bin): the
  # tests start throw-away clusters of their own with it (test/support/postgres.ts). The
  # package may start a default cluster of its own; nothing here uses or stops it.
  command -v initdb >/dev/null 2>&1 || compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need+=(postgresql)
  [ ${#need[@]} -eq 0 ] || apt_install "${need[@]}"
  if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    log "installing npm dependencies (better-sqlite3 may build from source for a minute)"
    # `npm install`, not `npm ci`: npm 11 leaves other platforms' optional packages
    # (deno's darwin/win32 builds) out of the lock file, then `npm ci` calls it out of sync.
    # The lock file still pins every version installed here.
    npm install --no-audit --no-fund --loglevel=error
  fi
  bash "$here/setup-runtime.sh"
  bash "$here/build-sandbox-image.sh"
}

cmd=${1:-}
shift || true
case "$cmd" in
  start)
    prepare start
    exec node --import tsx src/main.ts "$@"
    ;;
  test)
    prepare test
    # compose.yaml is validated by the tests with Debian's docker-compose; the web app's
    # tests drive Debian's chromium (playwright-core cannot download a browser here).
    need=()
    command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
    # Debian's HAProxy: the replicas' tests send every request through a real load balancer.
    command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || need+=(haproxy)
    command -v chromium >/dev/null 2>&1 || need+=(chromium fonts-dejavu-core)
    # The Helm chart is rendered with Helm's engine, Go's text/template and sprig, from
    # Debian (helm itself is not packaged): test/support/helm.ts builds the renderer.
    command -v go >/dev/null 2>&1 || need+=(golang-go)
    [ -d /usr/share/gocode/src/github.com/Masterminds/sprig ] || need+=(golang-github-masterminds-sprig-dev)
    [ -d /usr/share/gocode/src/gopkg.in/yaml.v3 ] || need+=(golang-gopkg-yaml.v3-dev)
    # The stand-in Kubernetes API server's certificates, and the egress stand-ins' test CA.
    command -v openssl >/dev/null 2>&1 || need+=(openssl)
    # The egress stand-ins run in a network namespace of their own (test/support/egress.ts).
    command -v ip >/dev/null 2>&1 || need+=(iproute2)
    [ ${#need[@]} -eq 0 ] || apt_install "${need[@]}"
    t0=$(date +%s)
    log "type check"
    npx tsc --noEmit
    log "lint"
    npx eslint --max-warnings=0 .
    log "runner unit tests (python)"
    SANDGATE_DENO="$root/node_modules/@deno/linux-x64-glibc/deno" python3 -m unittest discover -s sandbox/runner/tests -p 'test_*.py'
    log "tests (vitest)"
    npx vitest run "$@"
    log "all tests passed in $(( $(date +%s) - t0 ))s"
    ;;
  bench)
    prepare bench
    for b in bench/*.ts; do
      log "bench: $b"
      node --import tsx "$b"
    done
    ;;
  *)
    echo "usage: scripts/sandgate.sh start|test|bench" >&2
    exit 2
    ;;
esac
