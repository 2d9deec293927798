# ehdb-election — one-line targets. `make help` lists them.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
export PATH := $(PATH):/usr/local/go/bin:$(HOME)/go/bin

GO          ?= go
BIN         := $(CURDIR)/bin
CACHE       := $(CURDIR)/.cache
KIND        ?= kind
KIND_CLUSTER ?= ehdb-election
IMAGE_REPO  ?= ghcr.io/noetl/ehdb-election
IMAGE_TAG   ?= dev
DIST        ?= $(CURDIR)/dist
# The OCI-layout archive `make images` writes: `kind load image-archive` and `ctr images import` read it.
IMAGES_TAR  := $(CACHE)/images/images.tar
TEST_TIMEOUT ?= 40m

.PHONY: help
help: ## List the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

# The release version the CLI's `version` prints: the chart's appVersion (and the commit built).
VERSION     ?= $(shell awk '/^appVersion:/ {gsub(/"/, "", $$2); print $$2}' charts/ehdb-election/Chart.yaml)
COMMIT      ?= $(shell git rev-parse HEAD 2>/dev/null)

.PHONY: build
build: ## Build the binaries into bin/ (webhook, ehdb-writer, ehdb-election CLI)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-X main.version=$(VERSION) -X main.commit=$(COMMIT)" -o $(BIN)/ ./cmd/...

.PHONY: controlplane
controlplane: ## Build (or reuse) the local control plane: etcd, kube-apiserver, kube-controller-manager
	hack/controlplane/build.sh

.PHONY: lint
lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run ./hack/release check-chart

.PHONY: chart-lock
chart-lock: ## Record the chart's version and contents (after bumping Chart.yaml and adding a CHANGELOG section)
	$(GO) run ./hack/release lock-chart

.PHONY: release
release: ## The release in dist/: images (OCI archive + digests), the chart package pinned to them, the status CLI
	$(GO) run ./hack/release build -repo $(IMAGE_REPO) -out $(DIST)

.PHONY: helm
helm: ## Build the real helm CLI from the module proxy into .cache/helm (the release test uses it)
	hack/helm/build.sh

# Tests run in a network namespace with only loopback (hack/offline.sh): nothing they start can
# reach an address off this machine. `go vet` first fetches every module they need, and `helm`
# builds the helm CLI (its own module) while the module proxy is still reachable.
OFFLINE := hack/offline.sh
# The race detector runs where it is cheap: the election and the webhook, short mode.
RACE_PKGS := ./election/... ./webhook/... ./cmd/webhook/...

.PHONY: test
test: controlplane helm lint ## Everything: unit, chart and end-to-end tests on the local control plane, then e2e-node (as root)
	$(OFFLINE) $(GO) test -race -short -count=1 -timeout $(TEST_TIMEOUT) $(RACE_PKGS)
	EHDB_REQUIRE_CLUSTER=1 $(OFFLINE) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...
	@if [ "$$(id -u)" = 0 ] && [ -z "$${EHDB_SKIP_NODE:-}" ]; then $(MAKE) --no-print-directory e2e-node; \
	else echo "test: e2e-node skipped (it needs root; EHDB_SKIP_NODE=$${EHDB_SKIP_NODE:-}): run sudo make e2e-node"; fi

.PHONY: sim
sim: ## The election's randomized fault simulation at a larger budget: SIM_SEEDS=16000, over 10^8 steps (make test runs 300)
	EHDB_SIM_SEEDS=$${SIM_SEEDS:-16000} $(GO) test -count=1 -timeout 0 -v -run 'TestRandomizedSimulation$$' ./election/

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME (default 30s) and report each one's executions per second
	hack/fuzz.sh

.PHONY: mutants
mutants: ## Revert each of the election's safety rules in turn: the simulation must catch every one
	$(GO) run ./hack/mutants

.PHONY: unit
unit: ## Unit tests only (integration tests skip without a control plane)
	$(GO) test -count=1 ./...

.PHONY: e2e
e2e: controlplane helm lint ## The end-to-end system suite on the local control plane (or E2E_KUBECONFIG)
	EHDB_REQUIRE_CLUSTER=1 $(OFFLINE) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -v ./test/e2e/...

.PHONY: soak
soak: controlplane lint ## Random fault schedule with the safety checkers: SOAK_DURATION=20m SOAK_SEED=n SOAK_FAULTS=kill,pause,...
	EHDB_REQUIRE_CLUSTER=1 EHDB_SOAK=$${SOAK_DURATION:-20m} EHDB_SOAK_SEED=$${SOAK_SEED:-} EHDB_SOAK_FAULTS=$${SOAK_FAULTS:-} $(OFFLINE) $(GO) test -count=1 -timeout 0 -v -run TestSoak ./test/e2e/...

.PHONY: bench
bench: controlplane ## Performance report: micro-benchmarks and measurements on the local control plane
	EHDB_REQUIRE_CLUSTER=1 $(GO) run ./hack/bench -out $(CACHE)/bench

.PHONY: demo
demo: controlplane ## The main job: control plane, chart, webhook and writers; the guard refuses, then admits
	$(GO) run ./cmd/ehdb-demo

.PHONY: images
images: ## Build the webhook and writer images into one OCI archive (no Docker: hack/release, go-containerregistry)
	$(GO) run ./hack/release images -repo $(IMAGE_REPO) -tag $(IMAGE_TAG) -out $(IMAGES_TAR)

.PHONY: e2e-kind
e2e-kind: images ## Create a kind cluster from kind-config.yaml, load the images, run the suite in it (needs Docker and kind; the images come from `make images`)
	$(KIND) get clusters | grep -qx $(KIND_CLUSTER) || $(KIND) create cluster --name $(KIND_CLUSTER) --config kind-config.yaml --kubeconfig $(CACHE)/kind.kubeconfig
	$(KIND) load image-archive --name $(KIND_CLUSTER) $(IMAGES_TAR)
	E2E_IN_CLUSTER=1 E2E_KUBECONFIG=$(CACHE)/kind.kubeconfig E2E_IMAGE_REPO=$(IMAGE_REPO) E2E_IMAGE_TAG=$(IMAGE_TAG) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -v ./test/e2e/...

.PHONY: e2e-node
e2e-node: controlplane helm ## The in-cluster suite on a real local node (root; Debian containerd/runc/CNI, ~800 MB RAM); see hack/localnode
	hack/localnode/setup.sh
	trap '$(GO) run ./hack/localnode clean' EXIT; $(GO) run ./hack/localnode e2e -image-repo $(IMAGE_REPO) -image-tag $(IMAGE_TAG)

.PHONY: kind-down
kind-down: ## Delete the kind cluster
	$(KIND) delete cluster --name $(KIND_CLUSTER)
