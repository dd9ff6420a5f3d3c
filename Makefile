# Every module in the repository: the library at the root, its go-micro v5
# flavour (gomicro5), and the modules that hold heavier parts (the etcd and
# NATS registries, the metrics packages regcacheprometheus and regcacheotel
# and their v5 flavours in gomicro5/, the demos, the examples, the
# integration suites, the status page's browser test in admin/browsertest).
SHELL := /bin/bash

MODULES := . $(patsubst %/go.mod,%,$(wildcard */go.mod */*/go.mod))

# The modules whose tests need a real registry (etcd and NATS as child
# processes, mdns in a network namespace), a browser, a long run or the
# build of a program that embeds etcd: `make integration` runs them.
# Every other module's tests are unit tests, in `make test`.
HEAVY := integration integration5 demo demo5 examples admin/browsertest
# The submodules of unit tests: in `make test` their tests run with
# -short, under which the tests that start an etcd or NATS server skip
# (they run in `make integration`, which builds the servers first): `make
# test` needs no server binary.
SUBMODULES := $(filter-out . gomicro5 $(HEAVY),$(MODULES))

# The servers that the tests of etcd/, nats/ and integration/ start as
# child processes, built by `make servers`. Every suite runs on the 3.5
# line; etcd-lines runs the etcd suites on 3.6 and 3.7 too.
SERVERS_BIN := $(CURDIR)/integration/servers/bin
ETCD_LINES := 3.5 3.6 3.7
export REGCACHE_ETCD_SERVER ?= $(SERVERS_BIN)/etcd-3.5
export REGCACHE_NATS_SERVER ?= $(SERVERS_BIN)/nats-server

.PHONY: servers etcd-lines nats-pin etcd-tests nats-tests
.PHONY: test integration gen gen-check vet vet-all tidy-check proxy-check unit unit-v5 unit-norace unit-submodules unit-heavy unit-long unit-v5-long unit-newest model mutants demo demo-etcd figures figures-integration figures-demo-etcd bench fuzz soak unit-v5-newest unit-v5-long-newest tidy-check-v5-newest

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
## (etcd and NATS, child processes from the binaries `make servers`
## builds, and mdns), the etcd module's suite on etcd 3.6 and 3.7 too, the
## nats module's on the newest nats.go, the status page in a headless
## browser, the demos' and the examples' tests, the submodules' whole
## suites with -race, and the core against its reference model over a
## million random sequences
integration: servers vet-all tidy-check tidy-check-v5-newest proxy-check unit-heavy unit-long unit-v5-long-newest unit-newest model mutants etcd-lines nats-pin

## servers: the real etcd of each line (3.5, 3.6, 3.7: their dependencies
## conflict, so each has a module of its own) and the real nats-server,
## built from the test-only modules of integration/servers, which name the
## server's main package as a tool, into integration/servers/bin. Each is
## built with GOWORK=off: it is a module of its own, in no workspace
servers:
	@mkdir -p $(SERVERS_BIN)
	@for l in $(ETCD_LINES); do echo "== go build etcd $$l"; (cd integration/servers/etcd-$$l && GOWORK=off go build -o $(SERVERS_BIN)/etcd-$$l go.etcd.io/etcd/server/v3) || exit 1; done
	@echo "== go build nats-server"; cd integration/servers/nats && GOWORK=off go build -o $(SERVERS_BIN)/nats-server github.com/nats-io/nats-server/v2

## etcd-tests, nats-tests: the etcd and nats modules' whole suites, on the
## servers of the 3.5 line and NATS (`make integration` runs them in
## unit-long)
etcd-tests: servers
	@$(call gotest,etcd,-race ./...)
nats-tests: servers
	@$(call gotest,nats,-race ./...)

# The pins: each run of a newer client is a workspace (GOWORK=its go.work)
# of the library module, the root module and a pin module, whose one
# package imports the newer version (so that go mod tidy keeps it), so
# that MVS raises it, and with it what it needs (etcd's api, gRPC), as in
# a user's build that requires it. The library go.mod files keep their low
# minimums. Each go.work.sum holds the sums that the raised versions add.
ETCD_PIN = $(CURDIR)/integration/pins/etcd-client-$(1)/go.work
NATS_PIN := $(CURDIR)/integration/pins/natsgo-1.56/go.work

## etcd-lines: the etcd module's whole suite on etcd 3.6 and 3.7, each
## with etcd's client of its line (v3.6.16, v3.7.3), and the conformance
## suite's etcd runs (go-micro's plugin and the etcd module, side by side
## with go-micro's cache) on each server (`unit-heavy` runs them on 3.5)
etcd-lines: servers
	@for l in 3.6 3.7; do export REGCACHE_ETCD_SERVER=$(SERVERS_BIN)/etcd-$$l GOWORK=$(call ETCD_PIN,$$l); \
		$(call gotest,etcd,-race ./...) || exit 1; done
	@for l in 3.6 3.7; do export REGCACHE_ETCD_SERVER=$(SERVERS_BIN)/etcd-$$l; \
		$(call gotest,integration,-run '^TestConformanceEtcd' .) || exit 1; done

## nats-pin: the nats module's whole suite with nats.go v1.56.0
nats-pin: servers
	@export GOWORK=$(NATS_PIN); $(call gotest,nats,-race ./...)

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
	@for m in . $(filter-out gomicro5/%,$(SUBMODULES)); do echo "== go vet ($$m)"; (cd $$m && go vet ./...) || exit 1; done

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
	@export GOWORK=$(NEWEST_WORK); for m in regcacheotel regcacheprometheus gomicro5/regcacheotel gomicro5/regcacheprometheus; do $(call gotest,$$m,./...) || exit 1; done

## mutants: each plausible bug in internal/core/testdata/mutants.txt,
## built through an overlay, must fail the core's or the root's tests
mutants:
	@$(call gotest,.,-tags mutants -run '^TestMutants$$' -timeout 60m -v ./internal/core)

unit-submodules:
	@for m in $(SUBMODULES); do $(call gotest,$$m,-short ./...) || exit 1; done

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

## figures: one run of the demo at its defaults, then its -phases runs
## (about 3 min; on a quiet machine), write docs/figures.json and the
## picture docs/demo.png, the one source of the demo's figures; then the
## figures go into the marked blocks of the README and docs
## (internal/figures, whose test in `make test` checks them)
figures:
	cd demo && go run . -figures ../docs/figures.json -png ../docs/demo.png
	go run ./internal/figures -write

## figures-integration: one run, without -race, of the integration tests
## whose figures the README and docs show (about 12 min; on a quiet
## machine): the etcd module against go-micro's plugin (20 nodes in one
## transaction; a new instance after a 2 s and after a 10 s etcd outage),
## a new instance after a NATS restart, and the mass loss on go-micro v4
## and v5. They write docs/figures-integration.json, whose figures then go
## into the marked blocks of the documents
FIGURES_INTEGRATION := $(CURDIR)/docs/figures-integration.json
figures-integration: servers
	cd integration && REGCACHE_WRITE_FIGURES=$(FIGURES_INTEGRATION) go test -count=1 -timeout 30m -v \
		-run '^(TestTwentyNodesInOneTransaction|TestServerRegisteredAfterAnEtcdRestart|TestNodeRegisteredAfterANATSRestart|TestMassLoss)$$' .
	cd integration5 && REGCACHE_WRITE_FIGURES=$(FIGURES_INTEGRATION) go test -count=1 -timeout 30m -v -run '^TestMassLoss$$' .
	cd integration && REGCACHE_WRITE_FIGURES=$(FIGURES_INTEGRATION) REGCACHE_IT_OUTAGE=10s go test -count=1 -timeout 30m -v \
		-run '^TestServerRegisteredAfterAnEtcdRestart$$' .
	go run ./internal/figures -write

## figures-demo-etcd: `make demo-etcd` at its defaults (about 2 min),
## writing its restart scenario's figures to docs/figures-demo-etcd.json,
## which then go into demo/README.md's marked blocks
figures-demo-etcd:
	cd demo && go run ./etcd -figures ../docs/figures-demo-etcd.json
	go run ./internal/figures -write

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
