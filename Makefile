# The two commands of the quick start: `make up` runs the local stack, `make test` runs the tests.
.PHONY: up test lint bench deps

up:
	scripts/up.sh

deps:
	scripts/ensure-deps.sh

test: deps
	cargo test --workspace --all-features --no-fail-fast

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

# Every benchmark, each printing its figures and the ratio to its anchor (docs/measurements.md).
bench: deps
	cargo bench --bench presence
	cargo bench --bench controller
	cargo bench --bench faults
	cargo bench --bench provider
	cargo bench --bench wake
	cargo bench --bench page
	cargo bench --bench load
