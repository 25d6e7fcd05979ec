#!/usr/bin/env bash
# Bundles the Deno host (sandbox/deno: host.ts, its cell compiler with sucrase and acorn,
# and the worker context.ts) into sandbox/runner/deno/*.js, which the image ships with
# the runner. Run by build-sandbox-image.sh; by hand for the runner's unit tests.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/sandbox/runner/deno"
mkdir -p "$out"
"$root/node_modules/.bin/esbuild" "$root/sandbox/deno/host.ts" "$root/sandbox/deno/context.ts" \
  --bundle --format=esm --platform=browser --target=esnext --minify-whitespace --minify-syntax \
  --legal-comments=none --log-level=warning --outdir="$out"
