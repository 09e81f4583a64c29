# certapi: `make local-up` runs a local control plane with certapi; `make test` runs every test.
SHELL := /usr/bin/env bash
GO ?= go
BIN := $(CURDIR)/_output/bin
# End-to-end tests start real processes; give them room on a 2-core machine.
E2E_TIMEOUT ?= 40m

.PHONY: all build tools test verify unit e2e codegen local-up clean

all: build

## build: certapi and the kubectl plugin kubectl-create-servingcertrequest into _output/bin
build:
	$(GO) build -o $(BIN)/certapi ./cmd/certapi
	$(GO) build -o $(BIN)/kubectl-create-servingcertrequest ./cmd/kubectl-create-servingcertrequest

## install: build, then copy certapi and kubectl-create-servingcertrequest into $(DESTDIR)$(PREFIX)/bin
## (PREFIX defaults to /usr/local; e.g. `make install PREFIX=~/.local`). With that directory on PATH,
## kubectl 1.26 or later runs the plugin for `kubectl create servingcertrequest`.
.PHONY: install
install: PREFIX ?= /usr/local
install: build
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BIN)/certapi $(BIN)/kubectl-create-servingcertrequest $(DESTDIR)$(PREFIX)/bin/

## tools: kube-apiserver, etcd and kubectl from the Go module proxy into _output/bin (skipped when current)
tools:
	./hack/build-tools.sh

## codegen: regenerate pkg/generated and the zz_generated files
codegen:
	./hack/update-codegen.sh

## verify: generated code, formatting and vet
verify:
	./hack/verify-codegen.sh
	@out="$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go' | grep -v '^pkg/generated/' | grep -v '/zz_generated'))"; \
	  if [[ -n "$$out" ]]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

## unit: tests that need no running processes
unit: tools
	$(GO) test -count=1 $$($(GO) list ./... | grep -v /test/)

## e2e: tests against a real kube-apiserver and etcd
e2e: tools build
	CERTAPI_BIN=$(BIN)/certapi $(GO) test -count=1 -timeout $(E2E_TIMEOUT) ./test/...

## test: everything CI runs
test: verify unit e2e

## local-up: the demo: etcd, kube-apiserver, certapi and the example webhook on loopback, a walkthrough, until Ctrl-C
local-up: tools build
	./hack/local-up.sh

clean:
	rm -rf _output
