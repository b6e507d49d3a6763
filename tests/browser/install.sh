#!/usr/bin/env bash
# Install Debian's chromium for the browser tests when it is missing.
# The browser comes from Debian's packages only: never `playwright install`.
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
    echo "chromium already installed: $(command -v chromium)"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    SUDO=sudo
else
    SUDO=
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends chromium fonts-dejavu-core
command -v chromium
