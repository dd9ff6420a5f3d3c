# Every module in the repository: the library at the root, its go-micro v5
# flavour (gomicro5), and the modules that hold heavier parts (the demos,
# the etcd integration tests, the status page's browser test in
# admin/browsertest, the metrics packages prometheus and otel and their v5
# flavours in gomicro5/).
SHELL := /bin/bash

MODULES := . $(patsubst %/go.mod,%,$(wildcard */go.mod */*/go.mod))

.PHONY: test gen gen-check vet tidy-check unit unit-norace demo demo-etcd bench fuzz soak

## test: the generated v5 flavour up to date, then vet, race-enabled tests
## and a go.mod tidiness check, in every module, and the root suite three
## times more without the race detector, as production runs
test: gen-check vet tidy-check unit unit-norace

## gen: generate the go-micro v5 flavour (gomicro5/, demo5/internal/storm)
## from the v4 source
gen:
	go run ./internal/gen5

## gen-check: fails, naming the files, if `make gen` would change anything
gen-check:
	@echo "== go run ./internal/gen5 -check"; go run ./internal/gen5 -check

vet:
	@for m in $(MODULES); do echo "== go vet ($$m)"; (cd $$m && go vet ./...) || exit 1; done

unit:
	@for m in $(MODULES); do echo "== go test -race ($$m)"; \
		(cd $$m && go test -race -count=1 -timeout 15m ./...) 2>&1 | tee $(TESTLOG); \
		if [ "$${PIPESTATUS[0]}" != 0 ]; then $(FAILED); exit 1; fi; done; rm -f $(TESTLOG)

## unit-norace: the root suite without -race, three times: the race
## detector slows and reshuffles every goroutine, so a test that passes only
## under it hides a scheduling bug that production meets
unit-norace:
	@echo "== go test -count=3 (. without -race)"; \
		go test -count=3 -timeout 15m . 2>&1 | tee $(TESTLOG); \
		if [ "$${PIPESTATUS[0]}" != 0 ]; then $(FAILED); exit 1; fi; rm -f $(TESTLOG)

# The suites log a lot; a failure is repeated at the end, where a
# truncated log still shows it.
TESTLOG := $(shell mktemp -u /tmp/regcache-test.XXXXXX)
FAILED = echo "== what failed:"; grep -E -A14 -- '^--- FAIL|^panic:|^FAIL|build failed' $(TESTLOG) | grep -v '^[0-9]\{4\}-[0-9][0-9]-[0-9][0-9] ' | head -150; rm -f $(TESTLOG)

## tidy-check: fails if `go mod tidy` would change go.mod or go.sum
tidy-check:
	@for m in $(MODULES); do echo "== go mod tidy -diff ($$m)"; (cd $$m && go mod tidy -diff) || exit 1; done

## demo: regcache, go-micro's cache and no cache through a cold-start storm,
## a rolling deployment, a restart, a registry outage, the recovery, and
## go-micro RPCs with a dead node; DEMOFLAGS=-v5 runs it against go-micro v5
## (demo5/)
demo:
	cd $(if $(filter -v5,$(DEMOFLAGS)),demo5,demo) && go run . $(filter-out -v5,$(DEMOFLAGS))

## demo-etcd: the same scenarios against an embedded etcd (downloads etcd's modules)
demo-etcd:
	cd demo && go run ./etcd $(DEMOFLAGS)

BENCH_COUNT ?= 5
BENCH_TIME ?= 200ms
BENCH ?= .
# The flavours benchmarked: . (go-micro v4) and gomicro5 (go-micro v5),
# whose rows are named gomicro5/...
BENCH_MODULES ?= . gomicro5

## bench: regcache against go-micro's registry/cache and default selector,
## in v4 and in v5, interleaved run by run, then a table of medians and ratios
bench:
	@for i in $$(seq $(BENCH_COUNT)); do \
		for m in $(BENCH_MODULES); do \
			(cd $$m && go test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCH_TIME) .) || exit 1; \
		done; \
	done | go run ./internal/benchtab -tee

FUZZTIME ?= 1m
FUZZ_TARGETS := FuzzApplyEvent FuzzReadPath FuzzParseSnapshot FuzzPrints

## fuzz: each fuzz target for FUZZTIME (CI runs them briefly); a failure
## found becomes a file under testdata/fuzz, to turn into a plain test
fuzz:
	@for f in $(FUZZ_TARGETS); do echo "== $$f ($(FUZZTIME))"; \
		go test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) . || exit 1; done

DURATION ?= 1m

## soak: 64 readers over 200 services for $(DURATION), with random registry
## faults and watch breaks, checking the invariants as it runs
soak:
	go test -tags soak -race -run '^TestSoak$$' -timeout 0 -count=1 -v . -soak.duration=$(DURATION)
