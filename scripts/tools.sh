#!/usr/bin/env bash
# Finds or builds the real components ctsync's tests and demo need, and caches
# them in .tools/ (git-ignored). Idempotent: a second run takes seconds.
#
#   scripts/tools.sh            consul, terraform, OpenTofu, providers + mirror + CLI config
#   TOOLS_TOFU=0 scripts/tools.sh   without OpenTofu (the compatibility suite
#                                   runs against both terraform and tofu, so
#                                   `make test` needs it; building it takes
#                                   ~4-7 minutes once, then it is cached)
#   TOOLS_NGINX=1 scripts/tools.sh  also nginx (Debian package; for the demo)
#   TOOLS_OTF=0 scripts/tools.sh  without OTF (an open-source implementation of
#                                   the HCP Terraform / TFE API, built from the
#                                   module proxy, ~4 minutes once) and PostgreSQL
#                                   (Debian package, which OTF needs); the
#                                   terraform-cloud driver's end-to-end tests
#                                   (e2e/tfc_test.go) run against them
#   TOOLS_RELEASE=1 scripts/tools.sh   also what `make release` and the chart
#                                   checks need: helm (built from the module
#                                   proxy, ~2 minutes once) and Debian's
#                                   busybox-static (the image's shell), and
#                                   Debian's systemd and rpm if missing
#   TOOLS_CHROMIUM=0 scripts/tools.sh   without Chromium (Debian package, ~1 minute
#                                   once; the dashboard test e2e/ui_test.go drives
#                                   it headless and skips itself without it)
#
# Afterwards `source .tools/env.sh` puts everything on PATH and sets
# TF_CLI_CONFIG_FILE to a CLI config that serves providers from the mirror.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# .tools may be a link to a cache shared by several checkouts: the files
# written below (env.sh, terraformrc) name its real path.
mkdir -p "$ROOT/.tools"
TOOLS=$(cd "$ROOT/.tools" && pwd -P)
BIN="$TOOLS/bin"
MIRROR="$TOOLS/mirror"
BUILD="$TOOLS/build"
mkdir -p "$BIN" "$MIRROR" "$BUILD" "$TOOLS/plugin-cache"

export GOFLAGS=-buildvcs=false GOTOOLCHAIN=local CGO_ENABLED=0
export CHECKPOINT_DISABLE=1

CONSUL_VERSION=1.22.7
CONSUL_API_VERSION=v1.34.1
TERRAFORM_VERSION=1.5.7
TOFU_VERSION=1.12.6
LOCAL_PROVIDER_VERSION=1.4.0
TIME_PROVIDER_VERSION=0.14.2
OTF_VERSION=0.1.0
HELM_VERSION=v3.22.0
DEVICE_PROVIDER_VERSION=0.1.0

log() { printf 'tools: %s\n' "$*" >&2; }

# link_or_build NAME BUILD_FN: prefer PATH (outside .tools), then the cache, else build.
have() {
  local name=$1 p
  if [ -x "$BIN/$name" ]; then return 0; fi
  p=$(PATH=$(printf '%s' "$PATH" | tr ':' '\n' | grep -v "^$BIN\$" | paste -sd:) command -v "$name" 2>/dev/null || true)
  if [ -n "$p" ]; then ln -sf "$p" "$BIN/$name"; log "$name: using $p"; return 0; fi
  return 1
}

build_consul() {
  local d="$BUILD/consul"
  rm -rf "$d"; mkdir -p "$d"; cd "$d"
  log "consul: building v$CONSUL_VERSION from the module proxy (a few minutes)"
  go mod init consulbuild >/dev/null 2>&1
  go mod edit -exclude=github.com/hashicorp/go-msgpack@v1.1.5 -exclude=github.com/hashicorp/go-msgpack@v1.1.6
  go get -tool "github.com/hashicorp/consul@v$CONSUL_VERSION" >/dev/null 2>&1
  go get "github.com/hashicorp/consul/api@$CONSUL_API_VERSION" >/dev/null 2>&1
  go build -trimpath -ldflags "-s -w" -o "$BIN/consul.tmp" github.com/hashicorp/consul
  mv "$BIN/consul.tmp" "$BIN/consul"
  cd "$ROOT"
}

build_terraform() {
  log "terraform: building v$TERRAFORM_VERSION from the module proxy (a few minutes)"
  local d="$BUILD/terraform"; mkdir -p "$d"
  GOBIN="$d" go install -trimpath -ldflags "-s -w" "github.com/hashicorp/terraform@v$TERRAFORM_VERSION"
  mv "$d/terraform" "$BIN/terraform"
}

build_tofu() {
  local d="$BUILD/tofu"
  rm -rf "$d"; mkdir -p "$d"; cd "$d"
  log "tofu: building v$TOFU_VERSION from the module proxy (a few minutes)"
  go mod init tofubuild >/dev/null 2>&1
  go mod edit -replace github.com/hashicorp/hcl/v2=github.com/opentofu/hcl/v2@v2.20.2-0.20251021132045-587d123c2828
  go get -tool "github.com/opentofu/opentofu/cmd/tofu@v$TOFU_VERSION" >/dev/null 2>&1
  go build -trimpath -ldflags "-s -w -X github.com/opentofu/opentofu/version.dev=no" -o "$BIN/tofu.tmp" github.com/opentofu/opentofu/cmd/tofu
  mv "$BIN/tofu.tmp" "$BIN/tofu"
  cd "$ROOT"
}

# OTF (github.com/leg100/otf) implements the TFE API that the terraform-cloud
# driver speaks. Only v0.1.0 is on the module proxy; two of its dependencies
# moved, so they are replaced by the forks it was built with, and its own
# go.sum pins the rest.
build_otfd() {
  local d="$BUILD/otfd"
  rm -rf "$d"; mkdir -p "$d"; cd "$d"
  log "otfd: building OTF v$OTF_VERSION from the module proxy (~4 minutes)"
  go mod init otfwrap >/dev/null 2>&1
  go mod edit -replace github.com/r3labs/sse/v2=github.com/leg100/sse/v2@v2.0.0-20220910081853-79ffbd7c2fad
  go mod edit -replace github.com/jaschaephraim/lrserver=github.com/sowiner/lrserver@v0.0.0-20230123160823-795409868576
  GONOSUMDB=github.com/leg100/otf go get "github.com/leg100/otf@v$OTF_VERSION" >/dev/null 2>&1
  cat "$(go env GOMODCACHE)/github.com/leg100/otf@v$OTF_VERSION/go.sum" >> go.sum
  printf '\ntool github.com/leg100/otf/cmd/otfd\n' >> go.mod
  GONOSUMDB=github.com/leg100/otf go mod tidy >/dev/null 2>&1
  go build -trimpath -ldflags "-s -w" -o "$BIN/otfd.tmp" github.com/leg100/otf/cmd/otfd
  mv "$BIN/otfd.tmp" "$BIN/otfd"
  cd "$ROOT"
}

# PostgreSQL's server binaries (initdb, pg_ctl, postgres) for OTF, from Debian.
have_postgres() {
  command -v initdb >/dev/null && return 0
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1
}

# provider NAME MODULE VERSION
provider() {
  local name=$1 mod=$2 ver=$3 file="terraform-provider-${1}_v${3}"
  local a="$MIRROR/registry.terraform.io/hashicorp/$name/$ver/linux_amd64"
  local b="$MIRROR/registry.opentofu.org/hashicorp/$name/$ver/linux_amd64"
  if [ -x "$a/$file" ] && [ -x "$b/$file" ]; then return 0; fi
  log "provider $name: building v$ver"
  local d="$BUILD/provider-$name"; mkdir -p "$d" "$a" "$b"
  GOBIN="$d" go install -trimpath -ldflags "-s -w" "$mod@v$ver"
  cp "$d/$(basename "$mod")" "$a/$file"
  cp "$d/$(basename "$mod")" "$b/$file"
}

# The device test provider (tools/device-provider, a module of its own):
# objects are files in a directory, reads and writes take a set delay. It
# is mirrored as ctsync/device DEVICE_PROVIDER_VERSION for both registry
# hosts, and rebuilt when its source changes (a digest of the module's
# files is kept beside the binaries).
device_provider() {
  local src="$ROOT/tools/device-provider" ver=$DEVICE_PROVIDER_VERSION
  local file="terraform-provider-device_v$ver" plat
  plat="$(go env GOOS)_$(go env GOARCH)"
  local a="$MIRROR/registry.terraform.io/ctsync/device/$ver/$plat"
  local b="$MIRROR/registry.opentofu.org/ctsync/device/$ver/$plat"
  local sum
  sum=$(cd "$src" && cat go.mod go.sum $(ls ./*.go | grep -v '_test.go$') | sha256sum | cut -d' ' -f1)
  if [ -x "$a/$file" ] && [ -x "$b/$file" ] && [ "$(cat "$BUILD/device-provider.sum" 2>/dev/null)" = "$sum" ]; then return 0; fi
  log "provider device: building tools/device-provider"
  mkdir -p "$a" "$b" "$BUILD"
  (cd "$src" && go build -trimpath -ldflags "-s -w" -o "$BUILD/terraform-provider-device.tmp" .)
  cp "$BUILD/terraform-provider-device.tmp" "$a/$file.tmp" && mv "$a/$file.tmp" "$a/$file"
  cp "$BUILD/terraform-provider-device.tmp" "$b/$file.tmp" && mv "$b/$file.tmp" "$b/$file"
  rm -f "$BUILD/terraform-provider-device.tmp"
  printf '%s\n' "$sum" > "$BUILD/device-provider.sum"
}

# helm v3 for `helm lint` / `helm template` of deploy/helm/ctsync.
build_helm() {
  local d="$BUILD/helm"
  rm -rf "$d"; mkdir -p "$d"; cd "$d"
  log "helm: building $HELM_VERSION from the module proxy (a few minutes)"
  go mod init helmbuild >/dev/null 2>&1
  go get -tool "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >/dev/null 2>&1
  go build -trimpath -ldflags "-s -w" -o "$BIN/helm.tmp" helm.sh/helm/v3/cmd/helm
  mv "$BIN/helm.tmp" "$BIN/helm"
  cd "$ROOT"
}

# Debian's busybox-static: the container image's /bin/sh (local-exec) and
# basic commands. Unpacked in $BUILD/busybox/root (bin/busybox and its
# copyright file); the .deb is kept so rebuilt images stay identical.
fetch_busybox() {
  local d="$BUILD/busybox"
  rm -rf "$d"; mkdir -p "$d"; cd "$d"
  log "busybox-static: downloading the Debian package"
  apt-get download busybox-static >/dev/null 2>&1 || { apt-get update -qq >/dev/null; apt-get download busybox-static >/dev/null; }
  dpkg-deb -x busybox-static_*.deb root
  cd "$ROOT"
}

have consul || build_consul
have terraform || build_terraform
if [ "${TOOLS_TOFU:-1}" = 1 ]; then have tofu || build_tofu; fi
if [ "${TOOLS_OTF:-1}" = 1 ]; then
  [ -x "$BIN/otfd" ] || build_otfd
  if ! have_postgres; then
    log "postgresql: installing the Debian package (for OTF)"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
  fi
fi
if [ "${TOOLS_RELEASE:-0}" = 1 ]; then
  [ -x "$BIN/helm" ] || build_helm
  [ -x "$BUILD/busybox/root/bin/busybox" ] || fetch_busybox
  # The image's OpenTofu is the static build from the module proxy (make
  # release reads its licence from $BUILD/tofu's module), not a tofu found
  # on PATH, which may be dynamically linked and has no licence file here.
  if [ "${TOOLS_TOFU:-1}" = 1 ] && { [ -L "$BIN/tofu" ] || [ ! -f "$BUILD/tofu/go.mod" ]; }; then build_tofu; fi
  # systemd-analyze (the unit's check) and rpm (reads the .rpm), from Debian.
  missing=""
  command -v systemd-analyze >/dev/null || missing+=" systemd"
  command -v rpm >/dev/null || missing+=" rpm"
  if [ -n "$missing" ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    log "installing the Debian package(s)$missing (release checks)"
    apt-get update -qq >/dev/null
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
  fi
fi
provider local github.com/terraform-providers/terraform-provider-local "$LOCAL_PROVIDER_VERSION"
provider time github.com/hashicorp/terraform-provider-time "$TIME_PROVIDER_VERSION"
device_provider

if [ "${TOOLS_CHROMIUM:-1}" = 1 ] && [ ! -x /usr/bin/chromium ] && ! command -v chromium >/dev/null; then
  log "chromium: installing the Debian package (for the dashboard test)"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi

if [ "${TOOLS_NGINX:-0}" = 1 ] && ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; then
  log "nginx: installing the Debian package"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx >/dev/null
fi

# env.sh computes every path from its own location (no absolute path is
# written into it): a moved or copied checkout, or .tools linked to a shared
# cache, uses its own tools. Sourcing it also (re)writes terraformrc, whose
# provider mirror path Terraform needs absolute.
cat > "$TOOLS/env.sh" <<'ENV'
# Written by scripts/tools.sh; source it from bash or zsh.
if [ -n "${BASH_VERSION:-}" ]; then _ctsync_env=${BASH_SOURCE[0]}
elif [ -n "${ZSH_VERSION:-}" ]; then eval '_ctsync_env=${(%):-%x}'
else _ctsync_env=.tools/env.sh; fi
CTSYNC_TOOLS=$(cd "$(dirname "$_ctsync_env")" && pwd -P)
export CTSYNC_TOOLS
export PATH="$CTSYNC_TOOLS/bin:$PATH"
export CHECKPOINT_DISABLE=1
export TF_CLI_CONFIG_FILE="$CTSYNC_TOOLS/terraformrc"
_ctsync_rc="provider_installation {
  filesystem_mirror {
    path    = \"$CTSYNC_TOOLS/mirror\"
    include = [\"registry.terraform.io/hashicorp/*\", \"registry.opentofu.org/hashicorp/*\",
               \"registry.terraform.io/ctsync/device\", \"registry.opentofu.org/ctsync/device\"]
  }
}
disable_checkpoint = true"
if [ "$(cat "$TF_CLI_CONFIG_FILE" 2>/dev/null)" != "$_ctsync_rc" ]; then
  printf '%s\n' "$_ctsync_rc" > "$TF_CLI_CONFIG_FILE"
fi
unset _ctsync_env _ctsync_rc
ENV
# shellcheck source=/dev/null
. "$TOOLS/env.sh"
log "ready: source $TOOLS/env.sh"
