# The two commands a newcomer needs: `make demo` and `make test`. See README.md; the developer
# loop (`make unit`, `make doc`, `make deny`, `make udeps`) is in docs/development.md.
SHELL := /bin/bash
CARGO ?= cargo
STATE_DIR ?= .state/demo
# The demo and the binaries it starts (found next to it in target/debug).
DEMO_PACKAGES := -p test-cluster -p resource-proxy -p cloudflare-double -p tunnel-proxy -p tunnel-controller -p demo

# Cargo tools pinned and cached by version (scripts/install-cargo-tools.sh prints their bin dir).
TOOL = dir=$$(bash scripts/install-cargo-tools.sh $(1)) && PATH="$$dir:$$PATH"

.PHONY: demo demo-check test test-prepare prepare-cargo prepare-images-test prepare-control-plane prepare-deny prepare-udeps prepare-go-tools go-tools images images-test unit lint doc deny udeps fuzz-smoke fuzz control-plane helm render-deploy conformance conformance-update bench-tunnel-proxy bench-tunnel-controller bench-propagation bench-resource-proxy clean-state

## demo: a local client + target cluster pair (real etcd + kube-apiservers), the client with the
## node agent, and both products installed from deploy/ as Pods on that node (the resource proxy
## between the clusters, the tunnel gateway in the client); prints the commands to try and stays up
## until Ctrl-C. `make demo-check` runs them. Needs root (the node's network namespaces).
demo: control-plane
	$(CARGO) build --quiet $(DEMO_PACKAGES)
	@echo "Starting the demo (Ctrl-C stops it)..."
	./target/debug/demo --state-dir $(STATE_DIR)

demo-check: control-plane
	$(CARGO) build --quiet $(DEMO_PACKAGES)
	./target/debug/demo --state-dir $(STATE_DIR) --check

## test: everything (what CI runs): formatting, clippy, docs, cargo-deny, unused dependencies, then
## unit, integration and e2e tests against real clusters, a short run of every fuzz target and the
## Gateway API conformance suite. First `test-prepare` (the checks and every build, side by side);
## then the test binaries run TEST_JOBS at a time (scripts/tests.py), the fuzz smoke run and the
## conformance suite (its report in target/, not docs/) beside them; the on-node tests run Pods
## from the images `images-test` builds.
TEST_JOBS ?= 3
test: test-prepare
	CARGO=$(CARGO) python3 scripts/tests.py all --jobs $(TEST_JOBS) \
		--also "fuzz-smoke=bash scripts/fuzz.sh smoke" \
		--also "conformance=$(MAKE) --no-print-directory conformance CONFORMANCE_REPORT=target/conformance/report.yaml"

## test-prepare: what `make test` does before its tests, as steps that run PREPARE_JOBS at a time
## (make -j): the cargo steps in one chain (lint, doc, the test build; they share target/debug's
## lock), beside the test images (apt and a musl build), the Go builds (control plane, go-tools) and
## the cargo tools with their checks (deny, udeps). On a fresh machine every step is a build, each
## with idle stretches (downloads, apt, one crate or one link at a time) the others fill: run one
## after another they left a core idle for minutes. Each step's start and duration are logged
## ("== step NAME: ..."); a failed step fails `make test` once the running ones end.
PREPARE_JOBS ?= 3
test-prepare:
	@$(MAKE) --no-print-directory -j$(PREPARE_JOBS) prepare-cargo prepare-images-test \
		prepare-control-plane prepare-deny prepare-udeps prepare-go-tools

STEP = bash scripts/lib/step.sh
prepare-cargo:
	@$(STEP) cargo sh -c '$(MAKE) --no-print-directory lint && $(MAKE) --no-print-directory doc \
		&& $(CARGO) test --workspace --locked --no-run --quiet'
prepare-images-test prepare-control-plane prepare-deny prepare-udeps prepare-go-tools:
	@$(STEP) $(@:prepare-%=%) $(MAKE) --no-print-directory $(@:prepare-%=%)

## images: the images tunnel-gateway-controller, tunnel-proxy and resource-proxy from static (musl)
## release binaries into target/images/ (an OCI layout, a .tar archive and an SPDX SBOM each);
## reproducible. images-test: the same from an unoptimised build into target/images/test/, for the
## tests (the node agent runs Pods from them). See docs/development.md, "Images".
images:
	CARGO=$(CARGO) bash scripts/build-images.sh

images-test:
	CARGO=$(CARGO) PROFILE=image-test IMAGES_OUT=target/images/test bash scripts/build-images.sh

## unit: every test that needs no cluster (unit and doc tests of all crates, and the integration
## test binaries scripts/tests.py lists as cluster-free). `make unit ARGS=name` filters.
unit:
	CARGO=$(CARGO) python3 scripts/tests.py unit -- $(ARGS)

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

## fuzz-smoke: every fuzz target (fuzz/) for FUZZ_SMOKE_SECONDS (default 12) each; fuzz: for
## FUZZ_SECONDS (default 300) each. Installs cargo-fuzz once. See docs/development.md, "Fuzzing".
fuzz-smoke:
	bash scripts/fuzz.sh smoke

fuzz:
	bash scripts/fuzz.sh long

## doc: the API docs, private items included (intra-doc links are how the code is navigated);
## any rustdoc warning, such as a broken link, fails. Open target/doc/<crate>/index.html.
doc:
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps --document-private-items --locked

## deny: licenses, duplicate versions and sources of every dependency (deny.toml says why
## advisories are not checked).
deny:
	$(call TOOL,cargo-deny) $(CARGO) deny --locked check licenses bans sources

## udeps: dependencies declared in a Cargo.toml but never used (cargo-machete).
udeps:
	$(call TOOL,cargo-machete) $(CARGO) machete

## control-plane: build (once, cached by version) kube-apiserver, kube-controller-manager, kubectl, etcd.
control-plane:
	@bash scripts/build-control-plane.sh >/dev/null

## go-tools: build or fetch (once, cached by version) what the tests take from the Go module proxy
## besides the control plane: helm, echo-basic, the conformance driver, the Gateway API and
## Prometheus Operator CRDs. The tests do it themselves when missing; built here first, it is
## done once, not by several test binaries at the same time.
go-tools:
	@bash scripts/build-helm.sh >/dev/null
	@bash scripts/build-echo-basic.sh >/dev/null
	@bash scripts/build-conformance.sh >/dev/null
	@bash scripts/fetch-gateway-api-crds.sh >/dev/null
	@bash scripts/fetch-prometheus-operator-crds.sh >/dev/null

## helm: build (once, cached by version) helm v3 from the Go module proxy; prints its path.
helm:
	@bash scripts/build-helm.sh

## render-deploy: write deploy/ from the Helm charts (charts/); run after editing a chart. The
## charts' tests fail while deploy/ differs (`scripts/render-deploy.sh --check`).
render-deploy:
	bash scripts/render-deploy.sh

## bench-tunnel-proxy: tunnel-proxy vs nginx vs HAProxy vs direct on loopback (installs them and wrk).
bench-tunnel-proxy:
	bash scripts/bench-tunnel-proxy.sh

## bench-tunnel-controller: 1,000 HTTPRoutes over 100 Gateways against a real kube-apiserver; time to
## convergence, controller memory, Cloudflare writes (release build of the controller).
bench-tunnel-controller: control-plane
	bash scripts/bench-tunnel-controller.sh

## bench-propagation: route propagation with 3,000 HTTPRoutes (write -> first answer from the new
## backend, failed requests, over SWITCHES backend switches), then 10,000 routes / 1,000 Gateways
## created in a burst, and again from a cold start (SCALE=0 skips both, COLD=0 the cold start).
bench-propagation: control-plane
	bash scripts/bench-propagation.sh

## bench-resource-proxy: direct vs nginx pass-through vs proxy vs client+proxy vs nginx terminating TLS
## (with and without the owner selector), and 10,000 idle watches.
bench-resource-proxy: control-plane
	bash scripts/bench-resource-proxy.sh

## conformance: the Gateway API conformance suite (conformance/, built by
## scripts/build-conformance.sh) against the tunnel gateway installed from deploy/ on a cluster with
## the node agent; writes docs/conformance/report.yaml and fails when a test listed in
## docs/conformance/expected-passes.txt does not pass. `make test` runs it too (see
## docs/conformance/README.md). `make conformance CONFORMANCE_ARGS="--run-test NAME"` runs one test;
## `make conformance-update` rewrites the expected passes from a run.
CONFORMANCE_PACKAGES := -p tunnel-controller -p tunnel-proxy -p cloudflare-double -p conformance-run
CONFORMANCE_REPORT ?= docs/conformance/report.yaml
CONFORMANCE_RUN = ./target/debug/conformance --suite "$$(bash scripts/build-conformance.sh)" \
	--report $(CONFORMANCE_REPORT) --expected docs/conformance/expected-passes.txt \
	--skip conformance/skip-tests.txt --races conformance/suite-races.txt
conformance: control-plane
	$(CARGO) build --quiet $(CONFORMANCE_PACKAGES) --bins
	mkdir -p $(dir $(CONFORMANCE_REPORT))
	$(CONFORMANCE_RUN) $(CONFORMANCE_ARGS)

conformance-update: control-plane
	$(CARGO) build --quiet $(CONFORMANCE_PACKAGES) --bins
	$(CONFORMANCE_RUN) --update-expected $(CONFORMANCE_ARGS)

clean-state:
	-./target/debug/test-cluster down --state-dir $(STATE_DIR)
	rm -rf .state
