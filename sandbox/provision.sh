#!/bin/sh
# Runs as root INSIDE the sandbox rootfs (a chroot when built offline, a RUN step in
# sandbox/Dockerfile): installs the Debian packages, adds the unprivileged user and
# strips what code in a sandbox never needs. Usage: provision.sh /path/to/packages.txt
set -eu
export DEBIAN_FRONTEND=noninteractive LC_ALL=C
pkgs=$(grep -v '^#' "$1" | grep -v '^[[:space:]]*$' | tr '\n' ' ')
apt-get update -qq >/dev/null
# shellcheck disable=SC2086
apt-get install -y --no-install-recommends $pkgs
# The data stack must import before anything is stripped.
python3 -c 'import numpy, pandas, scipy, matplotlib, seaborn, plotly, sympy, sklearn'

# Code runs as uid 1000 with /workspace as its home; root owns everything else.
groupadd --gid 1000 sandbox
useradd --uid 1000 --gid 1000 --home-dir /workspace --no-create-home --shell /bin/bash sandbox
mkdir -p /workspace /skills /tools /opt/sandgate
chown 1000:1000 /workspace

# scipy pulls pythran, which pulls compilers and ~190 MB of headers: nothing in a
# sandbox compiles C, and the data stack still imports without them.
rm -rf /usr/include /usr/lib/gcc /usr/libexec/gcc /usr/share/doc /usr/share/man \
  /usr/share/info /usr/share/locale/* /var/cache/apt/* /var/lib/apt/lists/* \
  /var/cache/debconf/*-old /var/log/*
for b in gcc g++ cc c++ cpp x86_64-linux-gnu-gcc-12 x86_64-linux-gnu-g++-12 x86_64-linux-gnu-cpp-12; do
  rm -f "/usr/bin/$b"
done
python3 -c 'import numpy, pandas, scipy, matplotlib, seaborn, plotly, sympy, sklearn'

# pip installs into the user's own environment in the workspace (PYTHONUSERBASE, set by
# the runner), never into the image: --user, and the system packages are left alone.
# The index comes from the gateway (PIP_INDEX_URL) and reaches it through the egress proxy.
cat >/etc/pip.conf <<'PIP'
[global]
user = true
break-system-packages = true
no-cache-dir = true
disable-pip-version-check = true
no-input = true
timeout = 30
PIP

# Matplotlib's font cache, built once here; the runner copies it into its writable
# MPLCONFIGDIR at start so the first plot does not rebuild it.
mkdir -p /opt/sandgate/mplconfig
MPLCONFIGDIR=/opt/sandgate/mplconfig python3 -c 'import matplotlib.pyplot'
