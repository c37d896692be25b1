#!/bin/sh
# Runs after ctsync's package is removed. `dpkg --purge` also deletes the
# working directory (task state, plans, logs). The ctsync user stays, as
# Debian advises for system users (files it owned may remain elsewhere).
set -e
case "$1" in
purge)
  rm -rf /var/lib/ctsync
  rmdir /etc/ctsync.d 2>/dev/null || true
  ;;
esac
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null || true
fi
