# ctsync — the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
TOOLS_ENV := source .tools/env.sh
GO_TEST_FLAGS ?= -race -count=1 -timeout 25m

.PHONY: build test test-short demo tools lint bench clean

build:
	go build -o bin/ctsync ./cmd/ctsync

tools:
	@bash scripts/tools.sh

# Unit tests plus end-to-end tests against a real Consul agent and real Terraform.
test: tools
	$(TOOLS_ENV) && go vet ./... && test -z "$$(gofmt -l . | grep -v '^.tools/')" && go test $(GO_TEST_FLAGS) ./...

# Fast tests only (no Consul, no Terraform).
test-short:
	go test -short -race ./...

# A Consul dev agent, nginx and ctsync on loopback, with a load balancer
# module that follows the catalog.
demo: build
	@TOOLS_NGINX=1 bash scripts/tools.sh
	@$(TOOLS_ENV) && bash scripts/demo.sh

# Scale benchmarks against a real Consul and Terraform (about 15 minutes):
# writes docs/bench/results.md, results.csv and reaction.png.
bench: tools
	$(TOOLS_ENV) && CTSYNC_BENCH=1 go test -count=1 -timeout 90m -run '^(TestScale|TestHAStandbyCPU)$$' -v ./e2e/ | grep -v '^ *time='
	$(TOOLS_ENV) && go test -run XXX -bench . -benchtime 1x -timeout 30m ./e2e/ ./internal/watch/

lint:
	go vet ./...
	@out=$$(gofmt -l . | grep -v '^.tools/'); if [ -n "$$out" ]; then echo "not gofmt-formatted:"; echo "$$out"; exit 1; fi

clean:
	rm -rf bin sync-tasks
