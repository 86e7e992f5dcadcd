#!/usr/bin/env bash
# Installs what fleet needs from the OS packages, when it is missing. `ensure-deps.sh` is what the
# tests need: redis-server (the store), libfaketime (the skewed-clock test), openssl (the TLS
# test), ipmitool and ipmi_sim, chromium and chromedriver (the live page in a browser).
# `ensure-deps.sh up` is what the local stack needs: redis-server only.
set -euo pipefail

# The Redfish driver's tests (tests/process/redfish.rs) drive sushy-tools' emulator, which is on PyPI and
# not in Debian: installed with pip, only when sushy-emulator is missing.
if [ "${1:-}" != "up" ] && ! command -v sushy-emulator >/dev/null 2>&1; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "fleet's Redfish tests need sushy-emulator: install python3 and pip, then pip install sushy-tools" >&2
    exit 1
  fi
  echo "installing sushy-tools" >&2
  # A Python whose packages the OS manages refuses a plain install (PEP 668).
  python3 -m pip install -q sushy-tools || python3 -m pip install -q --break-system-packages sushy-tools
  if command -v pyenv >/dev/null 2>&1; then pyenv rehash; fi
fi

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
if [ "${1:-}" != "up" ]; then
  ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || need+=(faketime)
  command -v openssl >/dev/null 2>&1 || need+=(openssl)
  # The IPMI driver's tests (tests/process/ipmi.rs): ipmitool is the client, ipmi_sim the BMC.
  command -v ipmitool >/dev/null 2>&1 || need+=(ipmitool)
  command -v ipmi_sim >/dev/null 2>&1 || need+=(openipmi)
  # The live page's browser tests (tests/support/browser.rs): headless Chromium driven through
  # chromedriver over WebDriver. Debian ships the driver as /usr/bin/chromedriver (older releases
  # as chromium.driver); chromium-driver pulls in the matching chromium.
  if ! command -v chromedriver >/dev/null 2>&1 && ! command -v chromium.driver >/dev/null 2>&1; then
    need+=(chromium chromium-driver)
  fi
fi
[ ${#need[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo="sudo"
  else
    echo "fleet needs ${need[*]}: install them with your package manager (not root, and no sudo here)" >&2
    exit 1
  fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "fleet needs ${need[*]}: install them with your package manager (apt-get not found)" >&2
  exit 1
fi
echo "installing ${need[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
