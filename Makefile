# The two commands of the quick start: `make up` runs the local stack, `make test` runs the tests.
.PHONY: up cluster test lint bench deps dist peers

up:
	scripts/up.sh

# The local stack with a real Kubernetes control plane beside it (scripts/up.sh cluster).
cluster:
	scripts/up.sh cluster

# The real peers of the cluster tier, built from their Go modules once per version
# (scripts/peers.sh prints where).
peers:
	scripts/peers.sh

deps:
	scripts/ensure-deps.sh

# Every test. With cargo-nextest (on every machine of this workplace) every test of every tier
# runs in one queue, eight at a time (.config/nextest.toml); without it, cargo test runs the
# binaries one after the other, eight tests at a time: the tests mostly wait on processes and
# Redis, not the CPU. Doc tests, which nextest does not run, run apart. fleet-agent's tests then
# run against fleet built without its features, as machines build the agent: that build, tested.
# The real cluster's programs are built first (scripts/peers.sh, cached by version): the tests
# that start one find them through FLEET_PEERS_BIN.
test: deps
	@export FLEET_PEERS_BIN=$$(scripts/peers.sh) && \
	if cargo nextest --version >/dev/null 2>&1; then \
		set -e; \
		cargo nextest run --workspace --exclude fleet-agent --all-features; \
		cargo test --workspace --exclude fleet-agent --all-features --doc; \
	else \
		RUST_TEST_THREADS=$${RUST_TEST_THREADS:-8} cargo test --workspace --exclude fleet-agent --all-features --no-fail-fast; \
	fi
	cargo test -p fleet-agent

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy -p fleet -p fleet-agent --no-default-features --all-targets -- -D warnings

# Every benchmark, each printing its figures and the ratio to its anchor (docs/measurements.md),
# then fleet at 100 000 slots: the controller's passes over a minute and its memory
# beside the build of ANCHOR (scripts/bench-anchor.sh), the page at that size, and the beat under
# load beside its quiet self.
ANCHOR ?= 0e2d719
bench: deps
	cargo bench --bench presence
	cargo bench --bench controller
	cargo bench --bench faults
	cargo bench --bench provider
	cargo bench --bench wake
	cargo bench --bench page
	FLEET_BENCH_ANCHOR=$$(scripts/bench-anchor.sh $(ANCHOR)) cargo bench --bench controller -- --slots 100000 --minute
	cargo bench --bench page -- --slots 100000
	cargo bench --bench load -- --nice -10 --fifo --apart

# Installable artifacts of fleet and fleet-agent with their unit files (scripts/dist.sh): dist/.
dist:
	scripts/dist.sh
