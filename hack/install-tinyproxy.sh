#!/usr/bin/env bash
# Installs Debian's tinyproxy, the real forward proxy the e2e proxy scenarios
# (test/e2e/enterprise_test.go) run on a loopback port with their own
# configuration, when it is missing. Only apt-get installs, only as root, and
# only when the binary is not there; prints the binary's path.
set -euo pipefail

if bin="$(command -v tinyproxy)"; then
  echo "${bin}"
  exit 0
fi
if [[ "$(id -u)" != 0 ]]; then
  echo "install-tinyproxy: tinyproxy is missing and I am not root to apt-get install it; the e2e proxy scenarios will skip" >&2
  exit 0
fi
echo "installing Debian package: tinyproxy" >&2
apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends tinyproxy >&2
# The package's service is not wanted: the tests start their own instances.
# Stop the one the package may have started (by its pid file, nothing else).
if command -v systemctl >/dev/null 2>&1; then systemctl disable --now tinyproxy >/dev/null 2>&1 || true; fi
if [[ -x /etc/init.d/tinyproxy ]]; then /etc/init.d/tinyproxy stop >/dev/null 2>&1 || true; fi
command -v tinyproxy
