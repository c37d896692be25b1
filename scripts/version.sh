#!/usr/bin/env bash
# Prints the version of the checked-out source, from `git describe`: a tag
# vX.Y.Z gives X.Y.Z, a later commit X.Y.Z-N-gSHA. Without a release tag
# (a clone or a merge that did not carry the tags), the newest release
# heading of CHANGELOG.md ("## X.Y.Z — <date>") names the release, made by
# the commit that added that heading: X.Y.Z there, X.Y.Z-N-gSHA N commits
# later, as git describe would say. With neither, it is a Go-style
# pseudo-version, 0.0.0-<commit time>-<12-digit commit>. A tree with local
# changes adds -dirty.
# `scripts/version.sh all` prints three lines: version, commit, commit time
# (RFC 3339, UTC); the commit time is the build date of a reproducible build.
# `scripts/version.sh ldflags` prints the -X linker flags that stamp them.
set -euo pipefail
cd "$(dirname "$0")/.."
commit=$(git rev-parse HEAD)
epoch=$(git log -1 --format=%ct HEAD)
dirty() { [ -n "$(git status --porcelain --untracked-files=no)" ]; }
# changelog_release prints X.Y.Z and the commit that added the newest
# release heading of CHANGELOG.md, if there is one.
changelog_release() {
  local heading v rel
  heading=$(grep -m1 -E '^## v?[0-9]+\.[0-9]+\.[0-9]+([-.][0-9A-Za-z.]+)? ' CHANGELOG.md 2>/dev/null) || return 1
  v=$(sed -E 's/^## v?([0-9]+\.[0-9]+\.[0-9]+([-.][0-9A-Za-z.]+)?) .*/\1/' <<<"$heading")
  rel=$(git log --reverse --format=%H -S"$heading" -- CHANGELOG.md | head -n1)
  [ -n "$rel" ] || return 1
  printf '%s %s\n' "$v" "$rel"
}
if v=$(git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null); then
  version=${v#v}
elif read -r v rel < <(changelog_release) && [ -n "${rel:-}" ]; then
  n=$(git rev-list --count "$rel..HEAD")
  version=$v
  if [ "$n" -gt 0 ]; then version+="-$n-g$(git rev-parse --short=7 HEAD)"; fi
  if dirty; then version+="-dirty"; fi
else
  version="0.0.0-$(TZ=UTC date -d "@$epoch" +%Y%m%d%H%M%S)-${commit:0:12}"
  if dirty; then version+="-dirty"; fi
fi
date=$(TZ=UTC date -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
case "${1:-}" in
all)
  printf '%s\n%s\n%s\n' "$version" "$commit" "$date" ;;
ldflags) # the linker flags that stamp the binaries (make build, make release):
  # ctsync's in internal/cli, the policy helper's (cmd/ctsync-policy) in its
  # main package; the linker ignores the flags naming variables a binary lacks.
  pkg=github.com/ctsync/ctsync/internal/cli
  printf -- '-X %s.Version=%s -X %s.Commit=%s -X %s.BuildDate=%s' "$pkg" "$version" "$pkg" "$commit" "$pkg" "$date"
  printf -- ' -X main.Version=%s -X main.Commit=%s -X main.BuildDate=%s\n' "$version" "$commit" "$date" ;;
*)
  printf '%s\n' "$version" ;;
esac
