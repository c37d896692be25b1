#!/bin/sh
# Runs before ctsync's package is removed: stop the service when the package
# goes away (deb: "remove"; rpm: 0 packages left), not on an upgrade.
set -e
case "$1" in
remove|0)
  if [ -d /run/systemd/system ]; then
    systemctl disable --now ctsync.service >/dev/null 2>&1 || true
  fi
  ;;
esac
