#!/bin/sh
# Runs after ctsync's .deb or .rpm is installed or upgraded: the ctsync
# system user, the working directory, then systemd learns about the unit
# (the service is not enabled or started: see docs/install.md).
set -e
if ! getent group ctsync >/dev/null; then
  groupadd --system ctsync
fi
if ! getent passwd ctsync >/dev/null; then
  useradd --system --gid ctsync --home-dir /var/lib/ctsync --no-create-home \
    --shell /usr/sbin/nologin --comment "ctsync daemon" ctsync
fi
install -d -o ctsync -g ctsync -m 0750 /var/lib/ctsync
chgrp ctsync /etc/ctsync.d
chmod 0750 /etc/ctsync.d
# The example may have been deleted (a conffile stays deleted on upgrade).
if [ -f /etc/ctsync.d/ctsync.hcl ]; then
  chgrp ctsync /etc/ctsync.d/ctsync.hcl
  chmod 0640 /etc/ctsync.d/ctsync.hcl
fi
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null || true
  # An upgrade restarts a running service with the new binary.
  systemctl try-restart ctsync.service >/dev/null || true
fi
