# Entry points for developers and CI. `make test` is the test command: it
# installs the test servers first (scripts/deps.sh), so it works on a fresh
# machine.

export PATH := /usr/local/go/bin:$(PATH)

.PHONY: run test generate lint vet build fuzz

# Runs gateway, worker, Redis and PostgreSQL locally; Ctrl-C stops them all.
run:
	bash scripts/run.sh

# The second run repeats the emq suite on a shared 3-master Redis Cluster
# (testserver.QueueRedis), so a script touching keys of two slots (CROSSSLOT)
# fails the build.
test:
	bash scripts/deps.sh
	go vet ./...
	go test -race -count=1 -timeout 15m ./...
	EMQ_TEST_REDIS=cluster go test -race -count=1 -timeout 10m ./emq/...

generate:
	go generate ./...

vet:
	go vet ./...

lint: vet
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then \
		echo "gofmt would reformat these files (run gofmt -w):"; \
		echo "$$unformatted"; \
		exit 1; \
	fi

build:
	go build ./...

fuzz:
	@echo "make fuzz: not yet available (no fuzz targets yet)"
	@exit 1
