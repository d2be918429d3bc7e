# make test is what CI runs (.ci/run): vet, then every test under -race
# against real redis-servers, installed first where missing.

GO ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
# FUZZTIME is how long make test runs each fuzz target.
FUZZTIME ?= 3s

.PHONY: test redis chromium lint build bench fuzz

## test: go vet, then all tests with the race detector, then the bench's
## builds with a floor in admit.lua's place (lua.AdmitStandIn), counter.lua's
## (lua.CounterStandIn), fair.lua's fronts (lua.FrontStandIn), and the
## dispatcher's park and turn (lua.DispatchStandIn). ADMITQ_REQUIRE_REDIS=1
## turns "redis-server missing" from a skip into a failure, and
## ADMITQ_REQUIRE_BROWSER=1 does the same for the dashboard's Chromium.
test: redis chromium
	$(GO) vet ./...
	ADMITQ_REQUIRE_REDIS=1 ADMITQ_REQUIRE_BROWSER=1 $(GO) test -race -count=1 -timeout 20m ./...
	$(GO) vet -tags admitq_floor ./lua/ ./internal/bench/ ./cmd/admitq/
	$(GO) vet -tags admitq_free ./lua/ ./internal/bench/ ./cmd/admitq/
	ADMITQ_REQUIRE_REDIS=1 $(GO) test -count=1 -tags admitq_floor -run '^(TestStandIn|TestAdmitCarriesItsFile|TestAdmitTakesItsLogsFromARGV)$$' ./lua/ ./internal/bench/
	ADMITQ_REQUIRE_REDIS=1 $(GO) test -count=1 -tags admitq_free -run '^(TestStandIn|TestAdmitCarriesItsFile|TestAdmitTakesItsLogsFromARGV)$$' ./lua/ ./internal/bench/
	$(GO) vet -tags admitq_counterfloor ./lua/ ./internal/bench/ ./cmd/admitq/
	ADMITQ_REQUIRE_REDIS=1 $(GO) test -count=1 -tags admitq_counterfloor -run '^(TestCounterStandIn|TestCounterScriptsCarryTheirFiles|TestCounterTakesItsWindowsFromARGV)$$' ./lua/ ./internal/bench/
	$(GO) vet -tags admitq_frontfloor ./lua/ ./internal/bench/ ./cmd/admitq/
	ADMITQ_REQUIRE_REDIS=1 $(GO) test -count=1 -tags admitq_frontfloor -run '^(TestFairCarriesItsFronts|TestRunDispatchTiny)$$' ./lua/ ./internal/bench/
	$(GO) vet -tags admitq_dispatchfloor ./lua/ ./internal/bench/ ./cmd/admitq/
	ADMITQ_REQUIRE_REDIS=1 $(GO) test -count=1 -tags admitq_dispatchfloor -run '^(TestFairCarriesItsParkAndTurn|TestRunDispatchTiny)$$' ./lua/ ./internal/bench/
	$(GO) test -run '^$$' -fuzz '^FuzzTenant$$' -fuzztime $(FUZZTIME) ./admission/
	$(GO) test -run '^$$' -fuzz '^FuzzQuota$$' -fuzztime $(FUZZTIME) ./admission/
	$(GO) test -run '^$$' -fuzz '^FuzzRedisQuotas$$' -fuzztime $(FUZZTIME) ./admission/
	$(GO) test -run '^$$' -fuzz '^FuzzScriptMatchesModel$$' -fuzztime $(FUZZTIME) ./admission/

## fuzz: each fuzz target for a minute; make fuzz FUZZTIME=10m for longer.
## A failing input lands in admission/testdata/fuzz, where go test replays it.
fuzz: FUZZTIME = 1m
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzTenant$$' -fuzztime $(FUZZTIME) ./admission/
	$(GO) test -run '^$$' -fuzz '^FuzzQuota$$' -fuzztime $(FUZZTIME) ./admission/
	$(GO) test -run '^$$' -fuzz '^FuzzRedisQuotas$$' -fuzztime $(FUZZTIME) ./admission/
	$(GO) test -run '^$$' -fuzz '^FuzzScriptMatchesModel$$' -fuzztime $(FUZZTIME) ./admission/

## redis: make sure redis-server and redis-cli are installed (apt-get as root).
redis:
	@./scripts/install-redis.sh

## chromium: make sure a headless Chromium is installed (apt-get as root),
## for the dashboard's browser tests.
chromium:
	@./scripts/install-chromium.sh

## lint: gofmt, go vet and staticcheck.
lint:
	@files="$$(gofmt -l .)"; \
	if [ -n "$$files" ]; then echo "gofmt -l: these files need gofmt -w:"; echo "$$files"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

## build: compile every package and command.
build:
	$(GO) build ./...

## bench: the Go benchmarks (gate and script) against a real redis-server, no tests.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./internal/bench/
