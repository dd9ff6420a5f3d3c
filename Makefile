# Every module in the repository: the library at the root, and the modules
# that hold heavier parts (the demo, the etcd integration tests).
MODULES := . $(patsubst %/go.mod,%,$(wildcard */go.mod))

.PHONY: test vet tidy-check unit demo demo-etcd bench fuzz soak

## test: vet, race-enabled tests and a go.mod tidiness check, in every module
test: vet tidy-check unit

vet:
	@for m in $(MODULES); do echo "== go vet ($$m)"; (cd $$m && go vet ./...) || exit 1; done

unit:
	@for m in $(MODULES); do echo "== go test -race ($$m)"; (cd $$m && go test -race -count=1 -timeout 15m ./...) || exit 1; done

## tidy-check: fails if `go mod tidy` would change go.mod or go.sum
tidy-check:
	@for m in $(MODULES); do echo "== go mod tidy -diff ($$m)"; (cd $$m && go mod tidy -diff) || exit 1; done

## demo: regcache, go-micro's cache and no cache through a cold-start storm,
## a slow rolling deployment, a 10 s registry outage and the recovery
demo:
	cd demo && go run . $(DEMOFLAGS)

## demo-etcd: the same scenarios against an embedded etcd (downloads etcd's modules)
demo-etcd:
	cd demo && go run ./etcd $(DEMOFLAGS)

BENCH_COUNT ?= 5
BENCH_TIME ?= 200ms
BENCH ?= .

## bench: regcache against go-micro's registry/cache and default selector,
## interleaved run by run, then a table of medians and ratios
bench:
	@for i in $$(seq $(BENCH_COUNT)); do \
		go test -run '^$$' -bench '$(BENCH)' -benchtime $(BENCH_TIME) . || exit 1; \
	done | go run ./internal/benchtab -tee

FUZZTIME ?= 1m
FUZZ_TARGETS := FuzzApplyEvent FuzzReadPath FuzzParseSnapshot

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
