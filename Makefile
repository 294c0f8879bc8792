# once — build, test and run targets. Every Go invocation carries the
# hashicorpmetrics build tag: it routes raft's and memberlist's metrics to
# hashicorp/go-metrics, whose Prometheus sink the daemons serve on /metrics
# (internal/telemetry).

GO      ?= go
TAGS    := hashicorpmetrics
BIN     := bin
PKGS    := ./...
# The test and benchmark tooling is its own module, tests/ (it requires the
# product module through a replace directive): `go test ./...` at the root is
# the product's suite; tests/ holds local clusters, e2e, chaos and benchmarks.
TESTS   := tests
ABSBIN   = $(abspath $(BIN))

.PHONY: all build test vet fmt-check deps-check unit run run-fresh run-multidc bench bench-peers chaos fuzz deploy-images deploy-test deploy-test-multidc clean proto

all: build

## build: static binaries into bin/: the daemons (cmd/...) and the tools of the
## tests module (tests/cmd/...: oncelocal, oncebench, oncechaos, oncemanager-faults)
build:
	CGO_ENABLED=0 $(GO) build -tags $(TAGS) -o $(ABSBIN)/ ./cmd/...
	cd $(TESTS) && CGO_ENABLED=0 $(GO) build -tags $(TAGS) -o $(ABSBIN)/ ./cmd/...

## test: gofmt check, go vet, the dependency check, then the product suite and
## the tests module's suite (end-to-end, short chaos run), both under the race
## detector. The ledger's suite runs on its disk-backed state (what managers
## run) and once more on the in-memory state. The allocation tests that the
## race detector would falsify (built with !race) run once more without it:
## every test of those files, by name, whatever it is called.
NORACE_FILES := $(shell grep -rl --include='*_test.go' '^//go:build !race' cmd internal pkg)
NORACE_PKGS  := $(addprefix ./,$(sort $(dir $(NORACE_FILES))))
NORACE_TESTS := $(shell sed -nE 's/^func (Test[A-Za-z0-9_]+)[^A-Za-z0-9_].*/\1/p' $(NORACE_FILES) | paste -sd'|' -)
test: fmt-check vet deps-check
	$(GO) test -tags $(TAGS) -race -count=1 -timeout 20m $(PKGS)
	ONCE_LEDGER_TEST_STORE=memory $(GO) test -tags $(TAGS) -race -count=1 ./internal/ledger/
	$(if $(NORACE_PKGS),$(GO) test -tags $(TAGS) -count=1 -run '^($(NORACE_TESTS))$$' $(NORACE_PKGS))
	cd $(TESTS) && $(GO) test -tags $(TAGS) -race -count=1 -timeout 20m $(PKGS)

## unit: both suites without the real-process end-to-end tests (fast inner loop)
unit:
	$(GO) test -tags $(TAGS) -race -count=1 -short $(PKGS)
	cd $(TESTS) && $(GO) test -tags $(TAGS) -race -count=1 -short $(PKGS)

vet:
	$(GO) vet -tags $(TAGS) $(PKGS)
	cd $(TESTS) && $(GO) vet -tags $(TAGS) $(PKGS)

## deps-check: the daemons and oncectl must not link any test tooling (the
## tests module, the fault layer, the load generator, HdrHistogram) nor the
## standard library's testing package (third_party/raft is hashicorp/raft
## without the testing.go that imported it)
TOOLING_DEPS := github.com/once-dev/once/tests|/internal/testutil|/faultnet|/loadgen|/benchrun|/localcluster|/chaos/|hdrhistogram|^testing$$
deps-check:
	@bad=$$($(GO) list -tags $(TAGS) -deps ./cmd/gate ./cmd/manager ./cmd/oncectl | grep -E '$(TOOLING_DEPS)' || true); \
	if [ -n "$$bad" ]; then echo "cmd/gate, cmd/manager or cmd/oncectl depends on test tooling:"; echo "$$bad"; exit 1; fi

fmt-check:
	@out=$$(gofmt -l $$(find . -name '*.go' -not -path './bin/*')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## run: a local cluster (3 managers, gates on :8080 and :8081), secured by a
## generated cluster secret in .run/cluster-secret; Ctrl-C stops it.
## The terminal shows a summary and a status line per change; RUN_ARGS=-logs
## streams the processes' logs instead
RUN_ARGS ?=
run: build
	$(BIN)/oncelocal -dir .run -bin $(BIN) $(RUN_ARGS)

## run-fresh: the same, from empty data directories
run-fresh: build
	$(BIN)/oncelocal -dir .run -bin $(BIN) -fresh $(RUN_ARGS)

## run-multidc: two federated datacenters: dc1 (3 managers, gates on :8080 and
## :8081) and dc2 (3 managers, gates on :8180 and :8181); data in .run-multidc
run-multidc: build
	$(BIN)/oncelocal -dir .run-multidc -bin $(BIN) -multidc $(RUN_ARGS)

## bench: build, start a local cluster (3 managers, 2 gates), run the benchmark
## workloads, stop it; prints the table, writes bench-results/<UTC time>.json
bench: build
	$(BIN)/oncebench cluster -bin $(BIN) -out bench-results/

## bench-peers: the peer workloads (unique keys at 64 and 512 clients, 90 %
## duplicates) against a local once cluster and then against etcd 3.6 (three
## members built from tests/peers/etcd, a module of its own with etcd pinned
## in its go.mod, driven through etcd's Go client), one after the other; prints once ÷ etcd per
## workload with each side's CPU per request, writes bench-results/<time>.json
bench-peers: build
	cd $(TESTS)/peers/etcd && CGO_ENABLED=0 $(GO) build -o $(ABSBIN)/oncepeer-etcd .
	$(BIN)/oncebench peers -bin $(BIN) -out bench-results/

## chaos: the long fault-injection run against real processes, then the
## guarantee checker; CHAOS_DURATION (default 10m), CHAOS_ARGS (e.g. -seed N)
CHAOS_DURATION ?= 10m
CHAOS_ARGS ?=
chaos: build
	$(BIN)/oncechaos -duration $(CHAOS_DURATION) -bin $(BIN) -dir .chaos $(CHAOS_ARGS)

## fuzz: every native fuzz target for FUZZTIME each (their corpora also run in make test)
FUZZTIME ?= 60s
FUZZ_TARGETS := \
	pkg/keys:FuzzParse \
	pkg/api:FuzzDecodeJobRequest \
	pkg/api:FuzzCheckJSONValue \
	pkg/api:FuzzJobAppendJSON \
	internal/fingerprint:FuzzCanonicalize \
	internal/gate:FuzzDecodeMembers \
	internal/ledger:FuzzDecodeCommand \
	internal/ledger:FuzzRestore \
	internal/ledger/engine:FuzzKeyOrder \
	internal/walstore:FuzzRecordRoundTrip
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "== $$fn ($$pkg, $(FUZZTIME))"; \
		$(GO) test -tags $(TAGS) -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) ./$$pkg/; \
	done

## deploy-images: once-manager:dev and once-gate:dev, FROM scratch (needs Docker)
deploy-images:
	deploy/build.sh

## deploy-test: the container end-to-end check (Docker + docker-compose; not part of make test)
deploy-test:
	deploy/test.sh

## deploy-test-multidc: two datacenters in containers (deploy/compose.multidc.yaml),
## the WAN network cut off dc2 under load and healed; checks no duplicate and that
## every admitted job reaches both datacenters with one id (Docker + docker-compose)
deploy-test-multidc:
	cd $(TESTS) && ONCE_DEPLOY_TEST=1 $(GO) test -tags $(TAGS) -count=1 -timeout 15m -v -run TestMultiDatacenterWANPartition ./deploy/

clean:
	rm -rf $(BIN)

## proto: regenerate internal/rpc/rpcpb from manager.proto and operator.proto (the generated code is
## checked in, so building needs no protoc). Needs protoc (Debian: apt-get
## install protobuf-compiler); installs the pinned Go plugins into $(BIN)/.
PROTOC_GEN_GO      := google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO_GRPC := google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
proto:
	GOBIN=$(abspath $(BIN)) $(GO) install $(PROTOC_GEN_GO)
	GOBIN=$(abspath $(BIN)) $(GO) install $(PROTOC_GEN_GO_GRPC)
	PATH=$(abspath $(BIN)):$$PATH protoc -I internal/rpc/rpcpb \
		--go_out=internal/rpc/rpcpb --go_opt=paths=source_relative \
		--go-grpc_out=internal/rpc/rpcpb --go-grpc_opt=paths=source_relative \
		internal/rpc/rpcpb/manager.proto internal/rpc/rpcpb/operator.proto
