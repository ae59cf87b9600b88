# dbkeeper — the targets a newcomer needs are `make demo` and `make test`.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

# The test control plane and code generators, built from the Go module proxy
# into a per-user cache (see test/tools/install.sh). KUBEBUILDER_ASSETS, when
# set, names a directory with etcd, kube-apiserver and kubectl instead.
TOOLS_BIN := $(shell test/tools/install.sh --print)
CONTROLLER_GEN := $(TOOLS_BIN)/controller-gen
CRD_REF_DOCS := $(TOOLS_BIN)/crd-ref-docs
HELM_DOCS := $(TOOLS_BIN)/helm-docs
export KUBEBUILDER_ASSETS ?= $(TOOLS_BIN)

IMG ?= ghcr.io/dbkeeper/dbkeeper:dev
CHART := config/charts/dbkeeper
HELM := $(TOOLS_BIN)/helm
GO_TEST_FLAGS ?=
# The real-node and integration suites each run for about 10 minutes on the
# 2-core machine, which is go test's default limit per package.
TEST_TIMEOUT ?= 45m
FUZZTIME ?= 2m
BENCH_FLAGS ?=
# The demo's node: real (kubelet and containers; root), fake (kwok), auto.
NODE ?= auto

.PHONY: all
all: build

##@ Development

.PHONY: tools
tools: ## Build the test control plane and code generators (cached; minutes only the first time).
	test/tools/install.sh >/dev/null

.PHONY: host-deps
host-deps: ## Install from apt the Debian packages the tests and the demo need (PostgreSQL, pgBackRest; as root the real node's containerd, runc, CNI plugins, nftables, mmdebstrap, umoci, skopeo); names them when it cannot.
	@hack/host-deps.sh

.PHONY: images
images: ## Build the real node's images without Docker (pause, PostgreSQL 15 and 17 from Debian, the manager; cached by content).
	images/build.sh >/dev/null

.PHONY: generate
generate: tools ## Generate deepcopy, apply configurations and the API reference (docs/reference/api.md) from the API types.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./apis/...
	$(CONTROLLER_GEN) applyconfiguration:headerFile=hack/boilerplate.go.txt paths=./apis/...
	@mkdir -p docs/reference
	$(CRD_REF_DOCS) --log-level=ERROR --renderer=markdown --config=hack/crd-ref-docs.yaml --source-path=apis/database/v1 --output-path=docs/reference/api.md

.PHONY: manifests
manifests: tools ## Generate the CRD and RBAC manifests from markers, and the chart's README with its values table (helm-docs).
	$(CONTROLLER_GEN) crd paths=./apis/... output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=dbkeeper-manager paths=./internal/... output:rbac:artifacts:config=config/rbac
	cp config/rbac/role.yaml $(CHART)/files/role.yaml
	hack/chart-crds.sh config/crd/bases $(CHART)/templates/crds
	$(HELM_DOCS) --log-level=warning --chart-search-root=config/charts --sort-values-order=file

.PHONY: docs
docs: generate manifests ## Regenerate every generated reference: the API (docs/reference/api.md, crd-ref-docs), the chart's values (its README.md, helm-docs), the manager's flags (docs/reference/manager-flags.md).
	go test ./cmd/manager -run '^TestFlagReference$$' -count=1 -update

.PHONY: fmt
fmt: ## Format the Go code.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Vet the Go code.
	go vet ./...

.PHONY: test
test: host-deps tools ## Run every test: unit, integration on a real kube-apiserver, end-to-end on a fake and on a real node, failover fault injection, with the race detector.
	@# the real node's images first (their Debian root filesystems take minutes once), so no test waits on them
	@if [ "$$(id -u)" = 0 ]; then images/build.sh >/dev/null; else echo "not root: no real node here; its suites will say so and skip"; fi
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt would change:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	@# vet with -race: it compiles the dependencies as the tests below do, so a cold build compiles them once
	go vet -race ./...
	go vet -race -tags failover ./test/realnode
	go vet -race -tags 'failover nodes' ./test/realnode
	go vet -race -tags 'failover peer' ./test/realnode
	go vet -race -tags 'failover peer nodes' ./test/realnode
	@# the longest packages first (go test starts them in the order given, three at a time: the suites wait on servers
	@# and timeouts far more than they compute, CI used 0.75 of the two cores at -p 2): the real-node suite, the agent
	@# and integration, then e2e; test/framework/realnode later, so that it does not wait for the real node's lock
	@# while holding a slot
	go test -p 3 -race -count=1 -timeout $(TEST_TIMEOUT) $(GO_TEST_FLAGS) ./test/realnode ./internal/agent ./test/integration ./test/e2e ./...
	@# the failover fault injection after the rest, on three real nodes: its timings are measured on a machine the other
	@# suites do not load; the node faults run first, alone (a node powered off would take the other tests' pods with it)
	go test -tags 'failover nodes' -race -count=1 -timeout $(TEST_TIMEOUT) $(GO_TEST_FLAGS) -run '^(TestFailover|TestAPIServerOutage|TestNode)' ./test/realnode
	go test -run '^$$' -fuzz FuzzBuilders -fuzztime 5000x ./internal/resources

.PHONY: test-failover
test-failover: tools ## The failover fault-injection suite on three real nodes (root; about 15 min): the API server stopped 30 s, the node faults (make test-nodes), then each fault of the primary twice, synchronous and asynchronous (FAULTS=agent-sigkill,operator-down RUNS=5 RUN=TestFailoverSynchronous repeat some). make test runs it too, after the other suites.
	DBKEEPER_REQUIRE_REAL_NODE=1 DBKEEPER_FAILOVER_FAULTS=$(FAULTS) DBKEEPER_FAILOVER_RUNS=$(RUNS) \
		go test -tags 'failover nodes' -race -count=1 -v -timeout $(TEST_TIMEOUT) -run '$(or $(RUN),^(TestFailover|TestAPIServerOutage|TestNode))' ./test/realnode

.PHONY: test-nodes
test-nodes: tools ## The node faults on three real nodes (root): a drain of the primary's node (a switchover), the node cut off from the other nodes only (no failover), the node powered off, the node isolated, the node of the leading manager (installed with the chart) and of the primary powered off (FAULTS=node-powered-off RUNS=5 repeats one).
	DBKEEPER_REQUIRE_REAL_NODE=1 DBKEEPER_FAILOVER_FAULTS=$(FAULTS) DBKEEPER_FAILOVER_RUNS=$(RUNS) \
		go test -tags 'failover nodes' -race -count=1 -v -timeout $(TEST_TIMEOUT) -run '^TestNode' ./test/realnode

.PHONY: bench-failover
bench-failover: tools ## Failover side by side with CloudNativePG v1.30.0 on the real node (root; builds its operator once, ~2 min): each fault of the primary RUNS times (default 5) on each side; TABLE=file writes the markdown table (FAULTS=frozen,agent-sigkill runs some, SIDE=CloudNativePG or dbkeeper one side); NODES=3 compares the node faults (node-drained, node-powered-off, node-isolated, operator-node-powered-off: the leading operator replica's node with the primary's, two replicas on each side) on three real nodes. Not part of make test.
	DBKEEPER_REQUIRE_REAL_NODE=1 DBKEEPER_PEER_RUNS=$(RUNS) DBKEEPER_PEER_FAULTS=$(FAULTS) DBKEEPER_PEER_SIDES=$(SIDE) DBKEEPER_PEER_TABLE=$(if $(TABLE),$(abspath $(TABLE))) \
		go test -tags 'failover peer$(if $(filter 3,$(NODES)), nodes)' -count=1 -v -timeout 90m -run '^TestFailoverPeer' ./test/realnode

.PHONY: fuzz
fuzz: ## Fuzz the builders for FUZZTIME (default 2m).
	go test -run '^$$' -fuzz FuzzBuilders -fuzztime $(FUZZTIME) ./internal/resources

.PHONY: bench
bench: tools ## Benchmark convergence of 100 and 1000 Databases against the floor; writes docs/benchmarks.md and docs/convergence.png (about 30 min).
	go test -run '^$$' -bench BenchmarkConvergence -benchtime 1x -timeout 120m ./test/bench -args -report=$(CURDIR)/docs $(BENCH_FLAGS)

.PHONY: bench-backup
bench-backup: tools ## Benchmark WAL archive lag, base backup and restore through pgBackRest into versitygw against local floors (cp, pg_basebackup, pgbackrest by hand); writes docs/benchmarks-backup.md (about 12 min; BENCH_FLAGS=-size=64MiB for a quick run).
	go test -run '^$$' -bench '^BenchmarkBackup$$' -benchtime 1x -v -timeout 120m ./internal/agent -args -report=$(CURDIR)/docs/benchmarks-backup.md $(BENCH_FLAGS)

.PHONY: test-unit
test-unit: ## Run the tests that need no API server.
	go test -race -count=1 -short $(GO_TEST_FLAGS) ./...

.PHONY: helm-lint
helm-lint: tools ## Lint the Helm chart and render it with each values file of test/helm/testdata.
	$(HELM) lint --strict $(CHART)
	@for f in test/helm/testdata/*.values.yaml; do echo "helm template -f $$f"; $(HELM) template dbkeeper $(CHART) -f $$f >/dev/null; done

.PHONY: demo
demo: host-deps tools build plugin ## Start a local cluster (a real node as root, else a fake one; NODE=real|fake|auto) with the operator and a sample Database; Ctrl-C tears it down.
	@# the real node's images (mmdebstrap needs root; without it the demo uses the fake node)
	@if [ "$$(id -u)" = 0 ] && [ "$(NODE)" != fake ]; then $(MAKE) --no-print-directory images; fi
	go run ./hack/demo --manager=bin/manager --node=$(NODE)

.PHONY: demo-down
demo-down: ## Tear down a demo started elsewhere (same as Ctrl-C in its terminal).
	@if [ -f bin/demo/demo.pid ]; then kill "$$(cat bin/demo/demo.pid)" && echo "demo: stopping"; else echo "demo: not running"; fi

.PHONY: node-down
node-down: ## Undo what a crashed real-node cluster (test or demo) left on this machine.
	go run ./test/framework/realnode/cmd/node-down

##@ Build

.PHONY: build
build: ## Build the manager binary into bin/.
	go build -o bin/manager ./cmd/manager

.PHONY: plugin
plugin: ## Build the kubectl plugin into bin/kubectl-dbkeeper (put bin/ on $PATH: kubectl dbkeeper status NAME) and its completion link bin/kubectl_complete-dbkeeper.
	go build -o bin/kubectl-dbkeeper ./cmd/kubectl-dbkeeper
	ln -sf kubectl-dbkeeper bin/kubectl_complete-dbkeeper

# The platforms of the plugin's release archives (plugins/dbkeeper.yaml).
PLUGIN_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64

.PHONY: plugin-release
plugin-release: ## Build the plugin's release archives bin/kubectl-dbkeeper_<os>_<arch>.tar.gz (reproducible) and print the sha256s plugins/dbkeeper.yaml needs.
	@for p in $(PLUGIN_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; dir=bin/plugin-release/$${os}_$${arch}; \
		rm -rf $$dir && mkdir -p $$dir; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go build -trimpath -ldflags=-s -o $$dir/kubectl-dbkeeper ./cmd/kubectl-dbkeeper; \
		tar -C $$dir --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - kubectl-dbkeeper | gzip -n -9 > bin/kubectl-dbkeeper_$${os}_$${arch}.tar.gz; \
	done
	@cd bin && sha256sum kubectl-dbkeeper_*.tar.gz

.PHONY: run
run: ## Run the manager against the current kubeconfig.
	go run ./cmd/manager

.PHONY: install
install: tools ## Install the CRDs into the current kubeconfig's cluster.
	$(TOOLS_BIN)/kubectl apply --server-side -f config/crd/bases

.PHONY: uninstall
uninstall: tools ## Remove the CRDs (and every Database!) from the current cluster.
	$(TOOLS_BIN)/kubectl delete -f config/crd/bases

.PHONY: docker-build
docker-build: ## Build the manager image (needs a Docker engine).
	docker build -t $(IMG) .

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*##/ {printf "  %-14s %s\n", $$1, $$2} /^##@/ {printf "\n%s\n", substr($$0, 5)}' $(MAKEFILE_LIST)
