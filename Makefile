# ctsync — the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
TOOLS_ENV := source .tools/env.sh
GO_TEST_FLAGS ?= -race -count=1 -timeout 25m
# The end-to-end tests (./e2e) run as E2E_SHARDS processes at once, each
# with -test.timeout E2E_TIMEOUT (scripts/e2e-shards.sh).
E2E_SHARDS ?= 3
E2E_TIMEOUT ?= 25m
E2E_BUILD_FLAGS ?= -race

.PHONY: build test test-short demo tools lint bench bench-floor bench-refresh soak clean release release-test

# The daemon and its policy helper (ctsync-policy, docs/security.md), side
# by side: ctsync looks for the helper next to itself first.
build:
	ldflags="$$(bash scripts/version.sh ldflags)" && \
		go build -ldflags "$$ldflags" -o bin/ctsync ./cmd/ctsync && \
		go build -ldflags "$$ldflags" -o bin/ctsync-policy ./cmd/ctsync-policy

tools:
	@bash scripts/tools.sh

# Unit tests, then the end-to-end tests against a real Consul agent and real
# Terraform in E2E_SHARDS parallel shards. CTSYNC_TEST_TIMEOUT_SCALE (default
# 3) multiplies every wait's deadline (internal/testutil/wait.go).
test: tools
	$(TOOLS_ENV) && go vet ./... && test -z "$$(gofmt -l . | grep -v '^.tools/')" && \
		go test $(GO_TEST_FLAGS) $$(go list ./... | grep -v '/e2e$$') && \
		(cd tools/device-provider && go vet ./... && go test $(GO_TEST_FLAGS) ./...) && \
		E2E_SHARDS=$(E2E_SHARDS) E2E_TIMEOUT=$(E2E_TIMEOUT) E2E_BUILD_FLAGS="$(E2E_BUILD_FLAGS)" bash scripts/e2e-shards.sh

# Fast tests only (no Consul, no Terraform).
test-short:
	go test -short -race ./...

# A Consul dev agent, nginx and ctsync on loopback, with a load balancer
# module that follows the catalog.
demo: build
	@TOOLS_NGINX=1 bash scripts/tools.sh
	@$(TOOLS_ENV) && bash scripts/demo.sh

# Scale benchmarks against a real Consul and Terraform (about 15 minutes,
# plus the refresh and floor scenarios): writes docs/bench/results.md,
# results.csv and reaction.png, refresh.csv, and floor.csv and floor.png.
bench: tools
	$(TOOLS_ENV) && CTSYNC_BENCH=1 go test -count=1 -timeout 90m -run '^(TestScale|TestHAStandbyCPU)$$' -v ./e2e/ | grep -v '^ *time='
	$(TOOLS_ENV) && go test -run XXX -bench . -benchtime 1x -timeout 30m ./e2e/ ./internal/watch/
	$(MAKE) bench-floor
	$(MAKE) bench-refresh

# The refresh policy against a slow device (issue 39): change -> applied
# under refresh "always" and "auto" side by side, 400 and 2,000 instances,
# then a drift check restoring a deleted object; see
# e2e/refresh_bench_test.go (CTSYNC_REFRESH_SIZES, CTSYNC_REFRESH_ROUNDS).
bench-refresh: tools
	$(TOOLS_ENV) && CTSYNC_BENCH=1 go test -count=1 -timeout 180m -run '^TestRefreshBench$$' -v ./e2e/ | grep -v '^ *time='

# ctsync against Terraform alone (issue 18): after one change, all T tasks
# applied by ctsync vs the same T applies run by hand, for T in 1/10/50 and
# 100/2,000/10,000 instances. Subset: CTSYNC_FLOOR_CELLS=10x2000,50x100;
# rounds per cell: CTSYNC_FLOOR_ROUNDS (default 3); see e2e/floor_test.go.
bench-floor: tools
	$(TOOLS_ENV) && CTSYNC_BENCH=1 go test -count=1 -timeout 240m -run '^TestFloor$$' -v ./e2e/ | grep -v '^ *time='

lint:
	go vet ./...
	@out=$$(gofmt -l . | grep -v '^.tools/'); if [ -n "$$out" ]; then echo "not gofmt-formatted:"; echo "$$out"; exit 1; fi

# Release artifacts in dist/ (docs/install.md): tarballs, .deb, .rpm, an OCI
# image archive and SHA256SUMS, reproducibly, by tools/release (a module of
# its own: nfpm and go-containerregistry stay out of the daemon's go.mod).
RELEASE_FLAGS = -root ../.. -dist ../../dist -tofu ../../.tools/bin/tofu \
	-busybox-root ../../.tools/build/busybox/root \
	-tofu-license "$$(cd ../../.tools/build/tofu && go list -m -f '{{.Dir}}' github.com/opentofu/opentofu)/LICENSE"

release:
	@TOOLS_RELEASE=1 TOOLS_OTF=0 TOOLS_CHROMIUM=0 bash scripts/tools.sh
	cd tools/release && GOFLAGS=-buildvcs=false go run . $(RELEASE_FLAGS)

# Each artifact where users run it (dpkg and chroot parts as root): the
# tarball's binary; the .deb installed, verified by systemd-analyze, removed
# and purged; the image's root filesystem running a task with local-exec
# against a real Consul; and a second run giving identical files.
release-test: release
	$(TOOLS_ENV) && cd tools/release && go vet ./... && \
		GOFLAGS=-buildvcs=false go test -count=1 -timeout 15m -v ./... -args $(RELEASE_FLAGS)

clean:
	rm -rf bin sync-tasks dist

# Soak under chaos (docs/reliability.md#soak-under-chaos): three members (two
# -race builds, the witness without) in spread then leader mode under catalog churn and seeded
# faults (SOAK_SEED, printed first), every invariant checked; it takes about
# SOAK_DURATION. The report, the timeline plots and the logs go to soak-out/.
# SOAK_KNOWN names the documented outcome a violation may be instead
# (docs/reliability.md); SOAK_KNOWN= makes every violation fail.
SOAK_DURATION ?= 60m
SOAK_TIMEOUT ?= 180m
SOAK_KNOWN ?= consul-down-mid-apply
soak: tools
	$(TOOLS_ENV) && CTSYNC_SOAK=1 CTSYNC_E2E_RACE=1 SOAK_DURATION=$(SOAK_DURATION) SOAK_KNOWN=$(SOAK_KNOWN) go test -count=1 -timeout $(SOAK_TIMEOUT) -run '^TestSoak$$' -v ./e2e/
