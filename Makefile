# Entry points for developers and CI. `make test` is the test command: it
# installs the test servers first (scripts/deps.sh), so it works on a fresh
# machine.

export PATH := /usr/local/go/bin:$(PATH)

.PHONY: run test test-valkey generate lint vet build fuzz chaos

# Runs gateway, worker, market maker, Redis and PostgreSQL locally; Ctrl-C
# stops them all.
run:
	bash scripts/run.sh

# The second run, the cluster leg, repeats every package whose tests start a
# Redis on a 3-master Redis Cluster (EMQ_TEST_REDIS=cluster): each package's
# tests share one cluster (testserver.QueueRedisServer), so a script touching
# keys of two slots (CROSSSLOT) fails the build, and the instruments' queues
# are on at least two masters (TestInstrumentQueuesLandOnSeveralMasters).
# The chaos run goes on a cluster with replicas of its own (one random
# seed, 500 orders, no Redis faults: testkit/chaos Run). A test that
# needs a server of its own (an outage, a replica, tracking, a proxy) skips
# there, saying so. Left out, as they would only run again what the first
# run ran: testkit/testserver (its tests pick their mode themselves), and
# postgres's tests but the three that place through Redis.
#
# go test starts the packages' tests in the order it is given them, two at
# a time on 2 cores (-p is the core count), so each leg names its longest
# packages first (LONGEST): in alphabetical order testkit/chaos came last
# and ran alone beside an idle core at the end of a leg (60 s of the first
# leg, 45 s of the cluster leg). The first leg gains little by it (its
# small packages' builds now come last instead), the cluster and Valkey
# legs, with fewer packages, more. Naming a package twice runs it once.
#
# Then each fuzz target runs briefly: 50,000 executions each (seconds), about
# 45 s with the builds (see `fuzz` below). A count, not a duration: on Go 1.26
# a duration's deadline can race a busy worker and fail the run with a bare
# "context deadline exceeded" and no failing input (golang/go#75804).
test:
	bash scripts/deps.sh
	$(MAKE) --no-print-directory lint
	go test -race -count=1 -timeout 15m $(LONGEST) ./...
	$(RERUN_ENV) EMQ_TEST_REDIS=cluster go test -race -count=1 -timeout 15m $(call longest_first,$(CLUSTER_PACKAGES))
	$(RERUN_ENV) EMQ_TEST_REDIS=cluster go test -race -count=1 -timeout 10m -run '$(POSTGRES_REDIS_TESTS)' ./postgres/
	$(MAKE) --no-print-directory fuzz FUZZTIME=50000x
	$(MAKE) --no-print-directory test-valkey

# The legs after the first run the suites again on another Redis, for its
# slots, redirects, commands and scripts; ORDERGATE_TEST_RERUN=1 tells a
# long test whose size proves nothing about the Redis under it to run
# smaller there (testserver.RerunLeg). Only these legs set it.
RERUN_ENV := ORDERGATE_TEST_RERUN=1

# Every package whose tests start a Redis, found by grep, so a new one is not
# forgotten.
REDIS_PACKAGES = $(sort $(dir $(shell grep -rlE 'testserver\.(StartRedis|QueueRedis|SharedRedisCluster|SingleRedis)' --include='*_test.go' .)))
CLUSTER_PACKAGES = $(filter-out ./postgres/ ./testkit/testserver/,$(REDIS_PACKAGES)) ./testkit/chaos/
# The packages whose tests take longest (a minute or more of wall in some
# leg), longest first; longest_first puts those of a list first, in this
# order.
LONGEST = ./emq/ ./postgres/ ./placement/ ./gateway/ ./testkit/chaos/ ./settlement/
longest_first = $(strip $(foreach p,$(LONGEST),$(filter $(p),$(1))) $(filter-out $(LONGEST),$(1)))
# postgres's tests that place through Redis (placerWithHistory).
POSTGRES_REDIS_TESTS = ^(TestPlacerReadsTheOrdersTableFirst|TestCancelRecordsTheCanceledOrder|TestCanceledRowIsWrittenByTheNextReadWhenTheCancelCouldNot)$$

# The Redis-side suites again on Valkey, whose binaries are kept beside the
# repository in ../shared/valkey/ (its README says why; a checkout without
# ../shared skips this leg and says so). testkit/testserver runs the binaries
# that ORDERGATE_REDIS_SERVER and ORDERGATE_REDIS_CLI name. Two go tests:
#   - every package whose tests start a Redis (REDIS_PACKAGES), each test on
#     its own single server, and testkit/chaos, whose one run there (seed 1,
#     500 orders, a schedule that kills Redis and fails it over twice:
#     Valkey restarted from its AOF, appendfsync always, and its replica
#     promoted, under load) TestChaos picks itself on a repeat leg, so it
#     runs beside the other packages, not alone after them;
#   - of postgres, only the tests that use Redis.
# What the cluster leg's growth cost is paid here, to keep make test under
# 20 minutes: measured on the shared 2-core box (load 9-17), the new cluster
# packages take ~345 s of CPU (gateway 157, placement 59, chaos 57,
# settlement 29, cmd/* 34, postgres 8). This leg no longer runs the emq and
# coherence suites on a Valkey cluster (72 s of CPU, 139 s wall): slots and
# redirects are the cluster leg's, Valkey's commands and scripts this leg's
# single servers' (make test-valkey-cluster runs the cluster leg on Valkey,
# outside make test); and of postgres it runs only the three tests that use
# Redis, not its 71 others again (the whole package: 129 s of CPU, 276 s).
VALKEY_DIR := $(abspath ../shared/valkey)
VALKEY_ENV := $(RERUN_ENV) ORDERGATE_REDIS_SERVER='$(VALKEY_DIR)/valkey-server' ORDERGATE_REDIS_CLI='$(VALKEY_DIR)/valkey-cli'
test-valkey:
ifeq ($(wildcard $(VALKEY_DIR)/valkey-server),)
	@echo "test-valkey: skipped the Valkey leg: no $(VALKEY_DIR)/valkey-server (it comes with ../shared; see CONTRIBUTING.md, On Valkey)"
else
	'$(VALKEY_DIR)/valkey-server' --version
	$(VALKEY_ENV) go test -race -count=1 -timeout 15m $(call longest_first,$(filter-out ./postgres/,$(REDIS_PACKAGES)) ./testkit/chaos/)
	$(VALKEY_ENV) go test -race -count=1 -timeout 10m -run '$(POSTGRES_REDIS_TESTS)' ./postgres/
endif

.PHONY: test-valkey-cluster
test-valkey-cluster:
	$(VALKEY_ENV) EMQ_TEST_REDIS=cluster go test -race -count=1 -timeout 15m $(call longest_first,$(CLUSTER_PACKAGES))

generate:
	go generate ./...

# bench/asynq is a module of its own (cmd/bench builds and runs it), so each
# check covers it too.
MODULES := . bench/asynq

vet:
	@for module in $(MODULES); do \
		echo "go vet ./... in $$module"; \
		(cd $$module && go vet ./...) || exit 1; \
	done

# go vet, then: go.mod and go.sum are what `go mod tidy` would write (a direct
# dependency marked // indirect, a missing or stale line fails; `go mod tidy`
# fixes it), and gofmt has nothing to reformat.
lint: vet
	@for module in $(MODULES); do \
		if ! (cd $$module && go mod tidy -diff); then \
			echo "go mod tidy would change $$module/go.mod or go.sum (run go mod tidy there)"; \
			exit 1; \
		fi; \
	done
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then \
		echo "gofmt would reformat these files (run gofmt -w):"; \
		echo "$$unformatted"; \
		exit 1; \
	fi

# Every command under cmd/ (gateway, worker, admin, inspect, bench,
# marketmaker) as a binary in bin/ (git-ignored), where the README, the docs
# and scripts/run.sh (which runs the same command) expect them.
build:
	go build -o bin/ ./cmd/...

# Fuzzes the untrusted-input paths, each target for FUZZTIME (default 60s;
# `make fuzz FUZZTIME=5m`, or a count such as 2000000x). With a duration, a
# bare "context deadline exceeded" at the very end with no failing input
# written is the Go 1.26 coordinator race above, not a finding. `go test -fuzz` takes one target per run, hence
# one line per target:
#   FuzzDecodePlaceRequest  gateway: body → decode → validate → amounts → instrument rules
#   FuzzParseAmount         orders: exact decimal strings
#   FuzzInstrumentCheck     orders: tick/lot grid, scale, minimum notional
# Seeds: the f.Add calls and the files in <pkg>/testdata/fuzz/<Target>/.
# New coverage-widening inputs stay in the build cache ($(go env GOCACHE)/fuzz).
# A failing input is written to <pkg>/testdata/fuzz/<Target>/<hash> and the
# run fails; reproduce it with
#   go test -run '^<Target>/<hash>$' ./<pkg>/
# Keep that file (commit it with the fix): plain `go test` runs every corpus
# file as a subtest, so the crasher stays a regression test.
FUZZTIME ?= 60s
fuzz:
	go test -run '^$$' -fuzz '^FuzzDecodePlaceRequest$$' -fuzztime $(FUZZTIME) ./gateway/
	go test -run '^$$' -fuzz '^FuzzParseAmount$$' -fuzztime $(FUZZTIME) ./orders/
	go test -run '^$$' -fuzz '^FuzzInstrumentCheck$$' -fuzztime $(FUZZTIME) ./orders/
	go test -run '^$$' -fuzz '^FuzzUnmarshalOrder$$' -fuzztime $(FUZZTIME) ./orders/

# The seeded chaos run (testkit/chaos) on its own: gateway + 3 workers +
# a Redis primary and replica (AOF, appendfsync always) + PostgreSQL as real
# processes, ORDERS orders while a schedule drawn from SEED kills and stops
# workers, restarts Redis and PostgreSQL and fails Redis over to its replica
# and back; then the checker reads the books. `make test`
# runs it too (seeds 1, 2, 3 and a random one, under -race). Every run prints
# its seed; replay a failing schedule with
#   make chaos SEED=1234 ORDERS=2000
# (the same seed draws the same faults and orders; process timing is not
# replayed, so a timing-dependent failure may need a few runs).
SEED ?= random
ORDERS ?= 2000
chaos:
	bash scripts/deps.sh
	go test -run '^TestChaos$$' -count=1 -v -timeout 60m ./testkit/chaos/ -args -seed=$(SEED) -orders=$(ORDERS)

# The benchmark (cmd/bench), all in one run on throwaway servers (or
# REDIS_URL / DATABASE_URL): HTTP admission against the real gateway beside
# the bare admit script (plus an open-loop sweep drawn as a latency chart),
# emq against asynq (bench/asynq, its own module) on the same Redis,
# settlement against pgbench on the same PostgreSQL, Redis memory per order
# job, and how soon a dead worker's jobs are claimed again. A few minutes;
# prints a table and writes JSON, Markdown and SVG under bench/results/. Pass
# flags through BENCHFLAGS, e.g. `make bench BENCHFLAGS='-phases admission
# -duration 30s -concurrency 64'` (`go run ./cmd/bench -h` lists them).
.PHONY: bench
BENCHFLAGS ?=
bench:
	bash scripts/deps.sh
	go run ./cmd/bench $(BENCHFLAGS)

# The soak (cmd/bench -phases soak), in no other target: a gateway process
# and a worker with their defaults, orders over HTTP at a steady rate
# (SOAKFLAGS='-soak-rate 500 -soak-accounts 2000 -soak-streams 50', the
# defaults), Redis's used_memory, the dedup windows, the accounts' event
# logs and the history's size in PostgreSQL sampled every 10 s and printed
# as they come, then a row a minute and the growth before and after the
# hot tail (10 minutes) is full. SOAK is its length, at least 20m to see
# the memory level off.
.PHONY: soak
SOAK ?= 20m
SOAKFLAGS ?=
soak:
	bash scripts/deps.sh
	go run ./cmd/bench -phases soak -soak-duration $(SOAK) $(SOAKFLAGS)
