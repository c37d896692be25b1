#!/usr/bin/env bash
# Prints the version of the checked-out source, from `git describe`: a tag
# vX.Y.Z gives X.Y.Z, a later commit X.Y.Z-N-gSHA. Without a release tag it
# is a Go-style pseudo-version, 0.0.0-<commit time>-<12-digit commit>.
# `scripts/version.sh all` prints three lines: version, commit, commit time
# (RFC 3339, UTC); the commit time is the build date of a reproducible build.
# `scripts/version.sh ldflags` prints the -X linker flags that stamp them.
set -euo pipefail
cd "$(dirname "$0")/.."
commit=$(git rev-parse HEAD)
epoch=$(git log -1 --format=%ct HEAD)
if v=$(git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null); then
  version=${v#v}
else
  version="0.0.0-$(TZ=UTC date -d "@$epoch" +%Y%m%d%H%M%S)-${commit:0:12}"
  if [ -n "$(git status --porcelain --untracked-files=no)" ]; then version+="-dirty"; fi
fi
date=$(TZ=UTC date -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
case "${1:-}" in
all)
  printf '%s\n%s\n%s\n' "$version" "$commit" "$date" ;;
ldflags) # the linker flags that stamp the binary (make build, make release)
  pkg=github.com/ctsync/ctsync/internal/cli
  printf -- '-X %s.Version=%s -X %s.Commit=%s -X %s.BuildDate=%s\n' "$pkg" "$version" "$pkg" "$commit" "$pkg" "$date" ;;
*)
  printf '%s\n' "$version" ;;
esac
