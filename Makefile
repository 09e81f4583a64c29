# certapi: `make local-up` runs a local control plane with certapi; `make test` runs every test.
#
# Where tests live:
#   everything outside test/       unit tests (`make unit`): in-process only, with fakes and loopback
#                                  listeners at most; no etcd, kube-apiserver or other binary, no _output
#   test/integration/<component>   one component (issuer, registry, injector, trustbundle) against a real etcd and/or
#                                  kube-apiserver from _output/bin, through its exported API
#   test/e2e                       the whole system: certapi processes behind kube-apiserver; test/e2e/faults
#                                  the same under faults, test/e2e/manifests the manifests of artifacts/
#                                  (packages apart, so that they run beside test/e2e)
#   test/node                      the manifests of artifacts/ applied with kubectl, and the docs' Helm
#                                  installs run as written, on a real node (kubelet, containerd,
#                                  kube-proxy, CoreDNS), from `make images`
#   test/monitoring                artifacts/monitoring with promtool and a real Prometheus scraping certapi
#   test/image                     make image's and make images' archives, read back, each binary run from them
#   test/clientmodule              the client modules (pkg/servingcert, pkg/generated, ...) from outside: the
#                                  example webhook built as an operator with older and current client-go and
#                                  controller-runtime, each run against a real certapi
#   test/chart                     the Helm chart: helm lint, every example rendered and applied with a
#                                  server-side dry run, helm install and uninstall against kube-apiserver
#   test/framework                 starts those processes; its own tests start them too
# `make e2e` runs all of test/; `make integration` only test/integration.
SHELL := /usr/bin/env bash
GO ?= go
BIN := $(CURDIR)/_output/bin
# Unit tests run under the race detector, which needs cgo and a C compiler; `make unit RACE=` runs
# them without it, built as the binaries are (STATIC below), on the same compiled packages.
RACE ?= -race
# What make test runs under the race detector: the packages whose dependencies are few (the CA's crypto,
# the key plugin's protocol and the PKCS#11 token's cgo code): a race build compiles every
# dependency again, and for the packages on k8s.io/apiserver and client-go that cost about 20 minutes of
# CPU on a cold cache, a third of a cold make test's budget (docs/development.md, "Build times").
RACE_PACKAGES := ./pkg/keyplugin/... ./pkg/kmsplugin/... github.com/certapi/certapi/pkg/signer/...
# Integration and end-to-end tests start real processes; give them room on a 2-core machine.
E2E_TIMEOUT ?= 40m
# certapi's binaries, `go vet` and the tests under test/ are built as the images need them: static and with
# trimmed paths (CGO_ENABLED=0, -trimpath). They then share one set of compiled packages, and the images
# (make image, make images, test/image) only link; with the Go defaults (cgo on, full paths) every package
# was compiled twice. `make unit` keeps cgo, which the race detector needs. By hand, `CGO_ENABLED=0 go test
# -trimpath ./test/...` reuses what make compiled.
STATIC := CGO_ENABLED=0 GOFLAGS="$(strip $(shell $(GO) env GOFLAGS) -trimpath)"
# Test binaries are linked without DWARF and the symbol table (-s -w): nothing debugs them, a link without
# DWARF takes about 40% less CPU, and make test links about a hundred of them; failures and panics keep
# their function names and lines. go test's own vet is off (-vet=off): `make verify` vets every package,
# test files included, with every check go test's subset has, and go test vetting again cost a cold make
# test about 2.5 minutes of CPU (it runs vet over each test package's dependencies for their facts).
TEST_FLAGS := -ldflags='-s -w' -vet=off
# The one exception: certapi-kms-pkcs11, the KMS v2 plugin over a PKCS#11 token, loads the token's module
# (an HSM vendor's shared library) with dlopen, which needs cgo. It is built with CGO_ENABLED=1 (and
# trimmed paths), so its packages are compiled a second time, for it alone; nothing else links them.
CGO := CGO_ENABLED=1 GOFLAGS="$(strip $(shell $(GO) env GOFLAGS) -trimpath)"
# The version stamped into the binaries, images, chart and release (hack/version.sh: git describe, or
# `make release VERSION=v0.2.0`), with its commit, tree state and the commit's time, into pkg/version.
LDFLAGS = $(shell VERSION=$(VERSION) ./hack/version.sh --ldflags)
# The client modules (docs/development.md, "Modules"): nested modules at these directories, which `./...`
# does not enter. `go vet` and the unit tests name their packages by import path, so the main module builds
# them with its own versions (replace directives in go.mod point at these directories); test/clientmodule
# builds them, outside this module, with the oldest client-go and controller-runtime they support.
CLIENT_MODULES := pkg/apis pkg/generated pkg/cawatch pkg/signer pkg/servingcert
CLIENT_PACKAGES := $(foreach m,$(CLIENT_MODULES),github.com/certapi/certapi/$(m)/...)
# The platforms of the release that make test and make e2e build for test/release, the plugins' and the
# image's: cross-building arm64 (certapi and the plugins: about 11 minutes of CPU on a cold cache), darwin
# and windows is left to `make release`, after which test/release checks them too.
TEST_PLATFORMS := linux/amd64
# The Kubernetes minors certapi supports, oldest first (each older one has its tools module
# hack/tools/kube-<minor>; the newest is hack/tools'). make test runs the core end-to-end cases against the
# oldest as well as everything against the newest; make test-matrix runs them against every one.
MINORS ?= 1.33 1.34 1.35 1.36 1.37
OLDEST_MINOR := $(firstword $(MINORS))

.PHONY: all build tools tools-oldest test chaos verify unit integration e2e codegen manifests docs local-up image images release module-versions clean test-matrix

all: build

## build: certapi and the kubectl plugins kubectl-create-servingcertrequest and kubectl-certapi into _output/bin
build:
	$(STATIC) $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/certapi ./cmd/certapi
	$(STATIC) $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/kubectl-create-servingcertrequest ./cmd/kubectl-create-servingcertrequest
	$(STATIC) $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/kubectl-certapi ./cmd/kubectl-certapi

## kms-plugin: certapi-kms-pkcs11, the KMS v2 plugin that keeps the key protecting the CA keys in an HSM
## through PKCS#11 (docs/security.md), into _output/bin. Built with cgo (see CGO above), so it needs a C
## compiler, which `make build` does not.
.PHONY: kms-plugin
kms-plugin:
	$(CGO) $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/certapi-kms-pkcs11 ./cmd/certapi-kms-pkcs11

## install: build, then copy certapi, kubectl-create-servingcertrequest, kubectl-certapi and kubectl_complete-certapi into
## $(DESTDIR)$(PREFIX)/bin (PREFIX defaults to /usr/local; e.g. `make install PREFIX=~/.local`). With that
## directory on PATH, kubectl runs the plugins for `kubectl certapi` and (kubectl 1.31 or later)
## `kubectl create servingcertrequest`; kubectl_complete-certapi beside them lets kubectl complete `kubectl certapi`.
.PHONY: install
install: PREFIX ?= /usr/local
install: build
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BIN)/certapi $(BIN)/kubectl-create-servingcertrequest $(BIN)/kubectl-certapi $(DESTDIR)$(PREFIX)/bin/
	$(BIN)/kubectl-certapi completion kubectl-plugin > $(DESTDIR)$(PREFIX)/bin/kubectl_complete-certapi
	chmod 0755 $(DESTDIR)$(PREFIX)/bin/kubectl_complete-certapi

## image: certapi's container image as an archive, _output/certapi-image.tar, built without Docker by
## hack/image (go-containerregistry): a static certapi in an empty base with the user, entrypoint, port and
## labels of artifacts/deploy/Dockerfile. `docker load -i`, `podman load -i` and `crane push` take it.
## ARCH=arm64 builds for another architecture; TAG=registry/certapi:v1 names it (default certapi:<git describe>).
image: ARCH ?= $(shell $(GO) env GOARCH)
image:
	VERSION=$(VERSION) $(STATIC) $(GO) run ./hack/image --output $(CURDIR)/_output/certapi-image.tar --arch $(ARCH) $(if $(TAG),--tag $(TAG))

## images: the test node's images as archives in _output/images, built without Docker by hack/image, for
## the host's architecture: certapi.tar, example-webhook.tar, pause.tar and coredns.tar, named
## certapi.dev/certapi:dev, certapi.dev/example-webhook:dev, certapi.dev/pause:3.10 and
## certapi.dev/coredns:dev (the names `ctr -n k8s.io images import` gives them). Static binaries in empty
## bases, user 65532; CoreDNS comes from `hack/build-tools.sh coredns`. An archive whose inputs did not
## change is not written again.
images:
	./hack/build-tools.sh coredns
	$(STATIC) $(GO) run ./hack/image --all --output-dir $(CURDIR)/_output/images

## release: every artifact of a release into _output/release, built by hack/release without Docker
## (docs/release.md): certapi's image index for linux/amd64 and linux/arm64 (the linux ones of PLATFORMS)
## as an OCI layout archive with its SPDX SBOM attached, the kubectl plugins' archives for PLATFORMS
## (default linux, darwin and windows on amd64 and arm64), their krew manifests, the chart, the install YAML, the client modules as a module
## proxy serves them with tags.txt (the release's git tags) and checksums.txt.
## VERSION=vX.Y.Z names the release (default: git describe, hack/version.sh); the same commit gives the
## same bytes. A release's go.mod files must require the client modules at VERSION: make module-versions.
release: tools-helm
	VERSION=$(VERSION) $(STATIC) $(GO) run ./hack/release $(if $(PLATFORMS),--platforms $(PLATFORMS))

## module-versions: VERSION=vX.Y.Z rewrites every go.mod so that the client modules under pkg/ require each
## other at VERSION; commit that, then make release VERSION=vX.Y.Z on the commit and tag it (docs/release.md).
module-versions:
	@test -n "$(filter v%,$(VERSION))" || { echo "make module-versions: set VERSION=vX.Y.Z" >&2; exit 2; }
	$(GO) run ./hack/release --set-module-versions $(VERSION)

## tools-oldest: kube-apiserver and kubectl of the oldest supported minor, OLDEST_MINOR, into
## _output/kube/v$(OLDEST_MINOR)/bin (hack/build-tools.sh kube-$(OLDEST_MINOR); skipped when current)
tools-oldest:
	./hack/build-tools.sh kube-$(OLDEST_MINOR)

## tools: kube-apiserver, etcd, kubectl, podcertnode, kubenode (kubelet, kube-proxy, kube-controller-manager,
## kube-scheduler), promtool, prometheus, helm, helm3, coredns, cosign and cert-manager-controller (with
## cert-manager's CRDs in _output/cert-manager/crds) from the Go module proxy into _output/bin (each group
## skipped when current; all but kube and node are modules of their own under hack/tools)
tools:
	./hack/build-tools.sh

## tools-first, tools-other: the groups of tools split by who needs them. prometheus, helm3, cosign and
## cert-manager serve only the packages of TOOLS_OTHER_PACKAGES (test/monitoring, test/chart, test/release,
## test/e2e/upstreamcsr's cert-manager signer): make test and make e2e build them at the start of e2e-tools,
## while the other tests run beside it, not before every job.
TOOLS_OTHER = prometheus helm3 cosign cert-manager
TOOLS_OTHER_PACKAGES = ./test/monitoring/... ./test/chart/... ./test/release/... ./test/e2e/upstreamcsr/...
tools-first:
	./hack/build-tools.sh kube node coredns
tools-other:
	./hack/build-tools.sh $(TOOLS_OTHER)
## tools-helm: helm alone, for make verify (the manifests rendered from the chart), make release (the chart's
## archive) and the packages that run helm; in make test it builds beside the first node packages.
tools-helm:
	./hack/build-tools.sh helm

## codegen: regenerate pkg/generated and the zz_generated files
codegen:
	$(STATIC) ./hack/update-codegen.sh

## manifests: render artifacts/deploy and artifacts/monitoring's ServiceMonitor and PrometheusRule from the
## Helm chart artifacts/charts/certapi, their one source
manifests:
	./hack/update-manifests.sh

## docs: the generated reference pages docs/api-reference.md (from pkg/apis/certapi/v1alpha1) and
## docs/flags.md (from certapi's flag sets), the values table of the chart's README (from values.yaml) and
## the supported-versions table of docs/install.md (from docs/matrix, what `make test-matrix` found)
docs:
	$(STATIC) $(GO) run ./hack/docgen

## verify: generated code, the manifests rendered from the Helm chart (builds helm when it is not
## current, and kubectl when none is at hand, to build each kustomization), the generated docs, formatting
## and vet (of the client modules too)
verify:
	$(STATIC) ./hack/verify-codegen.sh
	./hack/verify-manifests.sh
	$(STATIC) ./hack/verify-docs.sh
	@out="$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go' | grep -v '^pkg/generated/' | grep -v '/zz_generated'))"; \
	  if [[ -n "$$out" ]]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(STATIC) $(GO) vet ./... $(CLIENT_PACKAGES)
	$(CGO) $(GO) vet ./pkg/kmsplugin/pkcs11token/

## unit: the unit tests, every package outside test/ (the client modules' too), with the race detector
## (RACE= : without it, on make build's compiled packages). They start no process and need no tools, so
## this does not build them.
unit:
	$(if $(RACE),,$(STATIC)) $(GO) test $(RACE) $(TEST_FLAGS) -count=1 $$($(GO) list ./... $(CLIENT_PACKAGES) | grep -v /test/)

## integration: only test/integration (one component against a real etcd and/or kube-apiserver)
integration: tools
	$(STATIC) $(GO) test $(TEST_FLAGS) -count=1 -timeout $(E2E_TIMEOUT) ./test/integration/...

## e2e: everything under test/ (test/integration, test/e2e and test/framework's own tests) against a
## real etcd and kube-apiserver from _output/bin and the certapi just built; test/release against a
## release for TEST_PLATFORMS. The packages under test/node run one after another (one node at a time on a
## machine) beside the others (e2e-node, e2e-other, e2e-tools): go test runs two packages at a time on two
## cores, and a node package waiting for another's node held one of those two for its whole run. The
## packages that need a tool of tools-other (e2e-tools) wait for its build; the rest (e2e-other) for the
## release and the key plugin, which build while the node packages that need neither run.
e2e: tools-first build images
	$(MAKE) --no-print-directory -j3 --output-sync=target PLATFORMS=$(TEST_PLATFORMS) e2e-node e2e-other e2e-tools

.PHONY: e2e-node e2e-node-first e2e-node-release e2e-other e2e-tools e2e-oldest unit-then-oldest tools-first tools-other tools-helm
E2E_ENV = CERTAPI_BIN=$(BIN)/certapi CERTAPI_KMS_PKCS11_BIN=$(BIN)/certapi-kms-pkcs11 $(STATIC)
# The node packages that install the release (and the key plugin's image) or run helm: the others run
# first, on the node, while the release, the plugin and helm build beside them. The node packages are the
# longest chain of make test: none waits for what it does not use.
NODE_RELEASE_PACKAGES = ./test/node/custody/... ./test/node/etcdcluster/... ./test/node/ha/... ./test/node/migrate/...
e2e-node: e2e-node-release
e2e-node-first:
	$(E2E_ENV) $(GO) test $(TEST_FLAGS) -count=1 -p 1 -timeout $(E2E_TIMEOUT) $$($(GO) list ./test/node/... | grep -v -F -x -f <($(GO) list $(NODE_RELEASE_PACKAGES)))
e2e-node-release: e2e-node-first release kms-plugin
	$(E2E_ENV) $(GO) test $(TEST_FLAGS) -count=1 -p 1 -timeout $(E2E_TIMEOUT) $(NODE_RELEASE_PACKAGES)
e2e-other: release kms-plugin
	$(E2E_ENV) $(GO) test $(TEST_FLAGS) -count=1 -timeout $(E2E_TIMEOUT) $$($(GO) list ./test/... | grep -v /test/node | grep -v -F -x -f <($(GO) list $(TOOLS_OTHER_PACKAGES)))
e2e-tools: tools-other release
	$(E2E_ENV) $(GO) test $(TEST_FLAGS) -count=1 -timeout $(E2E_TIMEOUT) $(TOOLS_OTHER_PACKAGES)
## e2e-oldest: the core end-to-end cases of test-matrix against the oldest supported minor; its results go to
## _output/matrix (docs/matrix is written only by make test-matrix)
e2e-oldest: tools-oldest tools-helm
	CERTAPI_BIN=$(BIN)/certapi $(STATIC) $(GO) run ./hack/matrix -minors "$(OLDEST_MINOR)" -results _output/matrix -timeout $(E2E_TIMEOUT)
## unit-then-oldest, make test's first job: every unit test without the race detector (they share make
## build's compiled packages), RACE_PACKAGES under it, then the core cases against the oldest minor,
## whose tools it builds first.
unit-then-oldest:
	$(MAKE) --no-print-directory unit RACE=
	$(CGO) $(GO) test -race $(TEST_FLAGS) -count=1 $(RACE_PACKAGES)
	$(MAKE) --no-print-directory e2e-oldest

## test: everything CI runs: the tools, certapi and the images; then five jobs side by side (each one's
## output printed whole when it ends): verify; the unit tests (RACE_PACKAGES under the race detector) and
## after them the tools of the oldest minor and the core cases against it (e2e-oldest); the packages of
## test/node one after another, those that install the release or run helm (NODE_RELEASE_PACKAGES) last;
## the rest of test/ but those that need tools-other; and those after its build. helm, the release (for
## TEST_PLATFORMS) and the key plugin build beside the first tests, before the tests that use them (go
## test's own vet is off: verify vets them all): the node packages are the
## longest chain, and start once the node's images are there. The builds of the jobs keep both cores busy
## while the tests under test/ mostly wait on their processes (docs/development.md, "Build times"). The
## unit tests bind only ephemeral ports, test/framework's processes ports below that range.
test: tools-first build images
	$(MAKE) --no-print-directory -j4 --output-sync=target PLATFORMS=$(TEST_PLATFORMS) verify unit-then-oldest e2e-node e2e-other e2e-tools

## chaos: test/node/multinode built with the tag chaos, on three worker nodes, under the checker's workload:
## seeded schedules of node faults (TestChaos: CHAOS_SEEDS (comma-separated) schedules of CHAOS_FAULTS faults
## each, every fault on a worker the seed chooses, for 10-40 s, the cluster healed before the next), then
## TestDrainSlowMember (a drain under the PodDisruptionBudget while another member is slow), TestNodeLost (in
## make test too), TestNodeReplaced (the leader's node lost for good with its volume, a new node added) and
## TestZoneLost (five replicas, a zone of two nodes lost); each history is held against the end (nothing
## acknowledged lost, one line of CAs, at most one replica signing at any moment).
## Writes _output/chaos/report.md. Needs root, as make test's node tests; about an hour with the defaults.
CHAOS_SEEDS ?= 1,2,3,4,5
CHAOS_FAULTS ?= 8
chaos: tools-first build images
	mkdir -p _output/chaos
	CERTAPI_CHAOS_SEEDS=$(CHAOS_SEEDS) CERTAPI_CHAOS_FAULTS=$(CHAOS_FAULTS) CERTAPI_CHAOS_REPORT=$(CURDIR)/_output/chaos/report.md \
	  $(E2E_ENV) $(GO) test $(TEST_FLAGS) -tags chaos -count=1 -timeout 180m -v ./test/node/multinode/

## test-matrix: the core end-to-end cases (hack/internal/matrix: issuance, Secrets, injection into every target
## kind, rotation and distrust, ClusterTrustBundles, pod certificates, the plugins, the deploy manifests and
## the chart with a server-side dry run, the admission policies) against kube-apiserver and kubectl of each
## Kubernetes minor of MINORS, one minor after another: each older minor is built from its own module
## hack/tools/kube-<minor> (hack/tools/new-kube-minor.sh writes it) into _output/kube/v<minor>/bin. Writes
## docs/matrix/kubernetes-<minor>.json and the supported-versions table of docs/install.md from them (commit
## both). `make test` runs the same cases against OLDEST_MINOR only (e2e-oldest), writing no docs.
test-matrix: build
	CERTAPI_BIN=$(BIN)/certapi $(STATIC) $(GO) run ./hack/matrix -minors "$(MINORS)" -timeout $(E2E_TIMEOUT); \
	  status=$$?; $(STATIC) $(GO) run ./hack/docgen && exit $$status

## local-up: the demo: etcd, kube-apiserver, certapi and the example webhook on loopback, a walkthrough, until Ctrl-C.
## NODE=1 adds a real node (needs root) and runs certapi on it as a pod from artifacts/deploy/overlays/single-replica;
## NODE=1 HA=1 installs the HA default there instead, artifacts/deploy/base: three replicas forming one etcd cluster.
## NODE=3 (any N > 1) adds N worker nodes, each in a network namespace of its own, and runs certapi's pods on them:
## NODE=3 HA=1 puts one replica, with its local volume, on each.
## It builds only the tools it runs (hack/local-up.sh: hack/build-tools.sh kube, and node with NODE=1), not
## Prometheus or helm.
local-up: build $(if $(NODE),images)
	$(STATIC) ./hack/local-up.sh $(if $(NODE),--node$(if $(filter-out 1,$(NODE)), --workers=$(NODE))) $(if $(HA),--ha)

clean:
	rm -rf _output
