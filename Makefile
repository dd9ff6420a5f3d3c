# Every module in the repository: the library at the root, its go-micro v5
# flavour (gomicro5), and the modules that hold heavier parts (the etcd and
# NATS registries, the metrics packages prometheus and otel and their v5
# flavours in gomicro5/, the demos, the integration suites, the status
# page's browser test in admin/browsertest).
SHELL := /bin/bash

MODULES := . $(patsubst %/go.mod,%,$(wildcard */go.mod */*/go.mod))

# The modules whose tests need a real registry (embedded etcd, NATS, mdns in
# a network namespace), a browser or a long run: `make integration` runs
# them. Every other module's tests are unit tests, in `make test`.
HEAVY := integration integration5 demo demo5 admin/browsertest
# The submodules of unit tests: in `make test` their tests run with -short
# and the unit tag, which compiles no embedded etcd or NATS server and skips
# the tests that start one (those run in `make integration`).
SUBMODULES := $(filter-out . gomicro5 $(HEAVY),$(MODULES))

.PHONY: test integration gen gen-check vet vet-all tidy-check proxy-check unit unit-v5 unit-norace unit-submodules unit-heavy unit-long unit-v5-long unit-newest model mutants demo demo-etcd bench fuzz soak unit-v5-newest unit-v5-long-newest tidy-check-v5-newest

## test: what to run before every commit, in a few minutes: the generated
## v5 flavour up to date, go vet, the root and v5 suites with -race, the
## root suite once more without it (as production runs), and the unit
## tests of the other modules, two at a time (the v5 suite without its
## slowest tests, which `make integration` runs)
test:
	@$(MAKE) --no-print-directory -j2 --output-sync=target gen-check vet
	@$(MAKE) --no-print-directory -j2 --output-sync=target unit unit-v5-newest unit-norace unit-submodules

## integration: the rest, which CI runs after `make test`: vet and a
## go.mod tidiness check in every module, the suites on real registries
## (embedded etcd and NATS, mdns), the status page in a headless browser,
## the demos' tests, the submodules' whole suites with -race, and the
## core against its reference model over a million random sequences
integration: vet-all tidy-check tidy-check-v5-newest proxy-check unit-heavy unit-long unit-v5-long-newest unit-newest model mutants

## gen: generate the go-micro v5 flavour (gomicro5/, demo5/internal/storm)
## from the v4 source
gen:
	go run ./internal/gen5

## gen-check: fails, naming the files, if `make gen` would change anything
gen-check:
	@echo "== go run ./internal/gen5 -check"; go run ./internal/gen5 -check

# The generated v5 modules get go test's vet checks in `make test`, and
# the whole of go vet in `make integration` (vet-all).
vet:
	@for m in . $(filter-out gomicro5/%,$(SUBMODULES)); do echo "== go vet -tags unit ($$m)"; (cd $$m && go vet -tags unit ./...) || exit 1; done

vet-all:
	@for m in $(MODULES); do echo "== go vet ($$m)"; (cd $$m && go vet ./...) || exit 1; done

unit:
	@$(call gotest,.,-race ./...)

# The slowest tests of the root module (2 s to 13 s each under -race, 95
# s in all): the v5 suite of `make test` skips them, since the v5 flavour
# is the same code generated for go-micro v5, and `make integration` runs
# them (unit-v5-long).
V5_LONG := TestConcurrentInitsLeaveOptionsAndHealthAgreeing|TestGoMicroClientRetriesAroundADeadNodeOnTrial|TestChangeSequencesAreTheMerge|TestChangeMemoryIsBounded|TestChurnKeepsTheShareAccountingExact|TestLookupReadersAreNeverDisturbed|TestChangeConcurrent|TestTTLJitterSpreadsExpiriesAndTheRefreshStorm|TestOffListFailuresUseBoundedMemory|TestTheSweepForgetsTheTrialsOfADeregisteredService|TestHealRefreshRaced|TestEveryNodeFailing|TestEverNewNamesDoNotGrowMemory|TestOutageBound|TestDeadNodeGetsFewPicks|TestRecoveryConvergesWithinASecond|TestAdaptiveRetryShedsOutageLoad|TestIdleEvictionBoundsAGatewaysMemory|TestWatcherEventsThroughTheMemoAreTheMerge|TestLargeCachePageLockWait|TestPageAllocatesForItsRowsNotTheCache|TestChangeThroughAMemoIsTheMerge|TestChangeIsTheMerge

unit-v5:
	@$(call gotest,gomicro5,-race -skip '^($(V5_LONG))$$' ./...)

unit-v5-long:
	@$(call gotest,gomicro5,-race -run '^($(V5_LONG))$$' ./...)

# The v5 suites run on go-micro v5.30.0, the newest v5, while
# gomicro5/go.mod keeps the oldest the library supports (v5.12.0), which
# is what its users' builds start from: go.newest.mod is gomicro5/go.mod
# with go-micro.dev/v5 at v5.30.0 (docs/decisions.md, D141). No workspace:
# the gomicro5 module requires no other module of the repository.
V5_NEWEST := -modfile=go.newest.mod
unit-v5-newest unit-v5-long-newest tidy-check-v5-newest: export GOWORK := off

## unit-v5-newest: unit-v5 on go-micro v5.30.0 (gomicro5/go.newest.mod)
unit-v5-newest:
	@$(call gotest,gomicro5,$(V5_NEWEST) -race -skip '^($(V5_LONG))$$' ./...)

## unit-v5-long-newest: unit-v5-long on go-micro v5.30.0
unit-v5-long-newest:
	@$(call gotest,gomicro5,$(V5_NEWEST) -race -run '^($(V5_LONG))$$' ./...)

## tidy-check-v5-newest: fails if `go mod tidy` would change gomicro5/go.newest.mod or its go.sum
tidy-check-v5-newest:
	@echo "== go mod tidy $(V5_NEWEST) -diff (gomicro5)"; cd gomicro5 && go mod tidy $(V5_NEWEST) -diff

## unit-norace: the root suite without -race: the race detector slows and
## reshuffles every goroutine, so a test that passes only under it hides a
## scheduling bug that production meets
unit-norace:
	@$(call gotest,.,.)

## model: the core (internal/core) and its reference model fed the same
## MODEL_SEQS random sequences (10 000 run in `make test`); a failing
## sequence is shrunk and printed, to keep in internal/core/testdata/model
MODEL_SEQS ?= 1000000
model:
	@$(call gotest,.,-run '^TestModel$$' ./internal/core -args -model.seqs=$(MODEL_SEQS) -model.seed=1000000)

## unit-newest: the metrics modules' suites again, on the newest versions
## of OpenTelemetry, client_golang and go-micro v5 (internal/newest pins
## them; its go.work raises every library module to them), where go.mod
## keeps the oldest that work
NEWEST_WORK := $(CURDIR)/internal/newest/go.work
unit-newest:
	@export GOWORK=$(NEWEST_WORK); for m in otel prometheus gomicro5/otel gomicro5/prometheus; do $(call gotest,$$m,./...) || exit 1; done

## mutants: each plausible bug in internal/core/testdata/mutants.txt,
## built through an overlay, must fail the core's or the root's tests
mutants:
	@$(call gotest,.,-tags mutants -run '^TestMutants$$' -timeout 60m -v ./internal/core)

unit-submodules:
	@for m in $(SUBMODULES); do $(call gotest,$$m,-short -tags unit ./...) || exit 1; done

unit-heavy:
	@for m in $(HEAVY); do $(call gotest,$$m,-race ./...) || exit 1; done

unit-long:
	@for m in $(SUBMODULES); do $(call gotest,$$m,-race ./...) || exit 1; done

# gotest runs go test -count=1 in module $(1) with arguments $(2). The
# suites log a lot; a failure is repeated at the end, where a truncated CI
# log still shows it.
gotest = echo "== go test $(2) ($(1))"; log=$$(mktemp); \
	(cd $(1) && go test -count=1 -timeout 15m $(2)) 2>&1 | tee $$log; \
	if [ "$${PIPESTATUS[0]}" != 0 ]; then echo "== what failed:"; \
		grep -E -A14 -- '^--- FAIL|^panic:|^FAIL|build failed' $$log | grep -v '^[0-9]\{4\}-[0-9][0-9]-[0-9][0-9] ' | head -150; \
		rm -f $$log; exit 1; fi; rm -f $$log

## tidy-check: fails if `go mod tidy` would change a go.mod or go.sum, each
## module built on its own with the library modules published from the tree
tidy-check:
	@cd internal/release && go run . tidy

## proxy-check: the library modules published from the tree into a
## file-system module proxy; fresh modules outside the checkout go get them
## from it (go-micro v4, and v5 at its oldest supported and newest), build
## and vet every README snippet and example, and read a user's module graph
proxy-check:
	@cd internal/release && go run . check

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
# The units the table shows, in order (empty: every unit reported).
BENCH_METRICS ?=

## bench: regcache against go-micro's registry/cache and default selector,
## in v4 and in v5, interleaved run by run, then a table of medians and ratios
bench:
	@for i in $$(seq $(BENCH_COUNT)); do \
		for m in $(BENCH_MODULES); do \
			(cd $$m && go test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCH_TIME) . ./internal/svcdata) || exit 1; \
		done; \
	done | go run ./internal/benchtab -tee -metrics '$(BENCH_METRICS)'

FUZZTIME ?= 1m
# Each fuzz target as package:Target: go test fuzzes one target of one
# package at a time.
FUZZ_TARGETS := ./internal/svcdata:FuzzApplyEvent .:FuzzReadPath ./internal/snapfile:FuzzParseSnapshot ./internal/svcdata:FuzzPrints

## fuzz: each fuzz target for FUZZTIME (CI runs them briefly); a failure
## found becomes a file under its package's testdata/fuzz, to turn into a
## plain test
fuzz:
	@for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; f=$${t##*:}; echo "== $$f in $$pkg ($(FUZZTIME))"; \
		go test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; done

DURATION ?= 1m

## soak: 64 readers over 200 services for $(DURATION), with random registry
## faults and watch breaks, checking the invariants as it runs
soak:
	go test -tags soak -race -run '^TestSoak$$' -timeout 0 -count=1 -v . -soak.duration=$(DURATION)
