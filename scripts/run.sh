#!/usr/bin/env bash
# Runs ordergate locally (what `make run` does): its own Redis and PostgreSQL
# under .state/ unless REDIS_URL / DATABASE_URL point elsewhere, then the
# gateway, the worker and the market maker (cmd/marketmaker, quoting every
# instrument with its own account), and prints a ready-to-paste order that
# trades against its quotes.
# Ctrl-C stops everything this script started.
#
# Settings (environment): REDIS_URL, REDIS_PORT (6380), DATABASE_URL,
# PG_PORT (5433), SIGNING_KEY_ENCRYPTION_KEY (one kept in
# .state/signing.key), GATEWAY_ADDR (127.0.0.1:8080), GATEWAY_METRICS_ADDR
# (127.0.0.1:9090) and WORKER_METRICS_ADDR (127.0.0.1:9091): each process's
# METRICS_ADDR, named apart since both read the one variable (empty serves
# no metrics). METRICS_ADDR itself is refused: it would name both. Port 0
# (127.0.0.1:0) takes a free port; the summary prints the one bound, read
# from the process's log.
# shellcheck disable=SC2317 # functions called from traps and wait_for
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo_root=$PWD
export PATH="/usr/local/go/bin:$PATH"

REDIS_PORT=${REDIS_PORT:-6380}
PG_PORT=${PG_PORT:-5433}
export GATEWAY_ADDR=${GATEWAY_ADDR:-127.0.0.1:8080}
GATEWAY_METRICS_ADDR=${GATEWAY_METRICS_ADDR-127.0.0.1:9090}
WORKER_METRICS_ADDR=${WORKER_METRICS_ADDR-127.0.0.1:9091}

state_dir=$repo_root/.state
log_dir=$state_dir/logs
redis_dir=$state_dir/redis
pg_home=$state_dir/postgres
pg_data=$pg_home/data

log() { echo "run.sh: $*" >&2; }
die() {
	log "$*"
	exit 1
}

# What this script started, so that shutdown stops exactly that.
gateway_pid=""
worker_pid=""
marketmaker_pid=""
redis_pid=""
postgres_started=0
pg_bin=""

as_postgres() {
	# PostgreSQL refuses to run as root.
	if ((EUID == 0)); then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

stop_process() {
	local name=$1 pid=$2
	[[ -n $pid ]] || return 0
	if kill -0 "$pid" 2>/dev/null; then
		log "stopping $name (pid $pid)"
		kill -TERM "$pid" 2>/dev/null || true
	fi
	wait "$pid" 2>/dev/null || true
}

shut_down() {
	set +e
	# First, while the gateway still answers: it cancels its quotes.
	stop_process marketmaker "$marketmaker_pid"
	stop_process gateway "$gateway_pid"
	stop_process worker "$worker_pid"
	if [[ -n $redis_pid ]]; then
		log "stopping redis-server (pid $redis_pid)"
		# SHUTDOWN flushes the append-only file before exiting.
		redis-cli -h 127.0.0.1 -p "$REDIS_PORT" shutdown >/dev/null 2>&1 || kill -TERM "$redis_pid" 2>/dev/null
		wait "$redis_pid" 2>/dev/null
	fi
	if ((postgres_started)); then
		log "stopping postgres"
		as_postgres "$pg_bin/pg_ctl" --pgdata "$pg_data" --mode fast --wait stop >/dev/null
	fi
}

on_exit() {
	local status=$?
	trap - EXIT INT TERM
	shut_down
	exit "$status"
}
# Ctrl-C and SIGTERM are the normal way to stop a run: exit 0 (via on_exit).
trap 'exit 0' INT TERM
trap on_exit EXIT

# wait_for DESCRIPTION TIMEOUT_SECONDS PID LOG COMMAND...: polls COMMAND until
# it succeeds, failing early with the log tail if the process PID died.
wait_for() {
	local description=$1 timeout=$2 pid=$3 logfile=$4
	shift 4
	local deadline=$((SECONDS + timeout))
	until "$@" >/dev/null 2>&1; do
		if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then
			log "$description exited during startup; last lines of $logfile:"
			tail -n 30 "$logfile" >&2 || true
			if tail -n 5 "$logfile" | grep -q 'holds protocol version'; then
				log "the queue data under .state/ was written by a build that speaks another queue"
				log "protocol; remove .state/ (make run's local data) to start afresh"
			fi
			exit 1
		fi
		if ((SECONDS >= deadline)); then
			log "$description not ready after ${timeout}s; last lines of $logfile:"
			tail -n 30 "$logfile" >&2 || true
			exit 1
		fi
		sleep 0.1
	done
}

# Set, it would be ignored: each process is given its own METRICS_ADDR.
if [[ -n ${METRICS_ADDR+set} ]]; then
	die "METRICS_ADDR is not read by make run: the gateway and the worker each serve metrics; set GATEWAY_METRICS_ADDR and WORKER_METRICS_ADDR (and unset METRICS_ADDR)"
fi

bash scripts/deps.sh
mkdir -p "$log_dir" bin

start_redis() {
	mkdir -p "$redis_dir"
	log "starting redis-server on 127.0.0.1:$REDIS_PORT (data in ${redis_dir#"$repo_root"/})"
	redis-server \
		--port "$REDIS_PORT" --bind 127.0.0.1 --protected-mode no --daemonize no \
		--dir "$redis_dir" --logfile "$log_dir/redis.log" \
		--appendonly yes --appendfsync everysec \
		--maxmemory-policy noeviction &
	redis_pid=$!
	wait_for redis-server 15 "$redis_pid" "$log_dir/redis.log" redis_answers_ping
	export REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0"
}

redis_answers_ping() {
	# PING answers LOADING while the append-only file is replayed.
	[[ $(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]]
}

find_pg_bin() {
	if command -v postgres >/dev/null 2>&1; then
		# Resolved: PATH may hold a symlink without psql beside it.
		dirname "$(readlink -f "$(command -v postgres)")"
		return
	fi
	local newest
	newest=$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
	[[ -x $newest/postgres ]] || die "no PostgreSQL server found; run scripts/deps.sh"
	echo "$newest"
}

start_postgres() {
	pg_bin=$(find_pg_bin)
	mkdir -p "$pg_home"
	chmod 700 "$pg_home"
	if ((EUID == 0)); then
		chown -R postgres:postgres "$pg_home"
		runuser -u postgres -- test -w "$pg_home" ||
			die "user postgres cannot reach $pg_home (a parent directory is closed to other users); set DATABASE_URL to a server of your own"
	fi
	if [[ ! -s $pg_data/PG_VERSION ]]; then
		log "creating a PostgreSQL cluster in ${pg_data#"$repo_root"/}"
		as_postgres "$pg_bin/initdb" --pgdata "$pg_data" --username postgres --auth trust \
			--encoding UTF8 --locale C --no-instructions >"$log_dir/initdb.log" 2>&1 ||
			die "initdb failed; see $log_dir/initdb.log"
		# TCP on loopback only: no socket in a system directory that a
		# non-root user could not write, and nothing reachable from outside.
		cat >>"$pg_data/postgresql.conf" <<-'EOF'
			listen_addresses = '127.0.0.1'
			unix_socket_directories = ''
		EOF
	fi
	if as_postgres "$pg_bin/pg_ctl" --pgdata "$pg_data" status >/dev/null 2>&1; then
		log "a postgres from an earlier run is still running on ${pg_data#"$repo_root"/}; restarting it"
		as_postgres "$pg_bin/pg_ctl" --pgdata "$pg_data" --mode fast --wait stop >/dev/null
	fi
	log "starting postgres on 127.0.0.1:$PG_PORT"
	postgres_started=1
	as_postgres "$pg_bin/pg_ctl" --pgdata "$pg_data" --log "$pg_home/postgres.log" \
		--options "-p $PG_PORT" --wait --timeout 60 start >/dev/null ||
		{
			tail -n 30 "$pg_home/postgres.log" >&2 || true
			die "postgres did not start; see ${pg_home#"$repo_root"/}/postgres.log"
		}
	local psql=("$pg_bin/psql" --host 127.0.0.1 --port "$PG_PORT" --username postgres --no-psqlrc --quiet --tuples-only --no-align)
	if [[ $("${psql[@]}" --dbname postgres --command "SELECT 1 FROM pg_database WHERE datname = 'ordergate'") != 1 ]]; then
		log "creating database ordergate"
		"${psql[@]}" --dbname postgres --command 'CREATE DATABASE ordergate' >/dev/null
	fi
	export DATABASE_URL="postgres://postgres@127.0.0.1:$PG_PORT/ordergate?sslmode=disable"
}

if [[ -z ${REDIS_URL:-} ]]; then
	start_redis
else
	log "using REDIS_URL=$REDIS_URL"
fi
if [[ -z ${DATABASE_URL:-} ]]; then
	start_postgres
else
	log "using DATABASE_URL=$DATABASE_URL"
fi

# What `make build` runs: every command under cmd/, so bin/ holds the same
# binaries whichever of the two wrote it (an up-to-date one is not linked
# again).
log "building bin/ (go build -o bin/ ./cmd/..., as make build)"
go build -o bin/ ./cmd/...

log "migrating the database"
bin/admin migrate

# The key signing secrets are sealed under, for bin/admin issue-key -signed
# and the gateway; kept with the data it seals.
if [[ -z ${SIGNING_KEY_ENCRYPTION_KEY:-} ]]; then
	if [[ ! -s $state_dir/signing.key ]]; then
		(umask 077 && head -c 32 /dev/urandom | base64 >"$state_dir/signing.key")
	fi
	SIGNING_KEY_ENCRYPTION_KEY=$(<"$state_dir/signing.key")
fi
export SIGNING_KEY_ENCRYPTION_KEY

demo_output=$(bin/admin demo)
account_id=$(sed -n 's/^account=//p' <<<"$demo_output")
api_key=$(sed -n 's/^api_key=//p' <<<"$demo_output")
mm_account_id=$(sed -n 's/^mm_account=//p' <<<"$demo_output")
mm_api_key=$(sed -n 's/^mm_api_key=//p' <<<"$demo_output")
[[ -n $account_id && -n $api_key && -n $mm_account_id && -n $mm_api_key ]] ||
	die "bin/admin demo printed no account=/api_key=/mm_account=/mm_api_key= lines; it printed: $demo_output"

# metrics_url NAME ADDR: where NAME's metrics are, for the summary below.
metrics_url() {
	if [[ -n $2 ]]; then
		echo "$1 http://$2/metrics"
	else
		echo "$1 none (empty ${1^^}_METRICS_ADDR)"
	fi
}

# logged_addr LOG OFFSET MESSAGE: the "addr" of the first line MESSAGE
# written to LOG past byte OFFSET (JSON lines: "msg":MESSAGE,"addr":...).
logged_addr() {
	local addr
	addr=$(tail -c +"$(($2 + 1))" "$1" | sed -n "s/.*\"msg\":\"$3\".*\"addr\":\"\([^\"]*\)\".*/\1/p")
	addr=${addr%%$'\n'*}
	[[ -n $addr ]] && echo "$addr"
}

# bound_addr NAME PID LOG OFFSET MESSAGE ADDR: sets bound to where NAME
# listens for ADDR: ADDR itself, or for port 0 (any free one) the address
# NAME logged in its MESSAGE line once listening.
bound_addr() {
	local name=$1 pid=$2 logfile=$3 offset=$4 message=$5 addr=$6
	bound=$addr
	[[ $addr == *:0 ]] || return 0
	wait_for "$name (its \"$message\" log line, at LOG_LEVEL info)" 30 "$pid" "$logfile" logged_addr "$logfile" "$offset" "$message"
	bound=$(logged_addr "$logfile" "$offset" "$message")
}

# The logs are appended to: only what this run's processes write is read.
gateway_log_start=$(stat -c %s "$log_dir/gateway.log" 2>/dev/null || echo 0)
worker_log_start=$(stat -c %s "$log_dir/worker.log" 2>/dev/null || echo 0)
log "starting gateway on $GATEWAY_ADDR and worker (logs in ${log_dir#"$repo_root"/})"
METRICS_ADDR=$GATEWAY_METRICS_ADDR bin/gateway >>"$log_dir/gateway.log" 2>&1 &
gateway_pid=$!
METRICS_ADDR=$WORKER_METRICS_ADDR bin/worker >>"$log_dir/worker.log" 2>&1 &
worker_pid=$!
bound_addr gateway "$gateway_pid" "$log_dir/gateway.log" "$gateway_log_start" "gateway listening" "$GATEWAY_ADDR"
gateway_addr=$bound
wait_for gateway 30 "$gateway_pid" "$log_dir/gateway.log" curl -fsS "http://$gateway_addr/readyz"
bound_addr gateway "$gateway_pid" "$log_dir/gateway.log" "$gateway_log_start" "metrics listening" "$GATEWAY_METRICS_ADDR"
gateway_metrics_addr=$bound
bound_addr worker "$worker_pid" "$log_dir/worker.log" "$worker_log_start" "metrics listening" "$WORKER_METRICS_ADDR"
worker_metrics_addr=$bound

# The venue provides no liquidity: the market maker's quotes are what the
# demo account trades against. Its key goes to its environment only.
log "starting marketmaker (account $mm_account_id)"
MM_API_KEY=$mm_api_key GATEWAY_URL="http://$gateway_addr" bin/marketmaker >>"$log_dir/marketmaker.log" 2>&1 &
marketmaker_pid=$!

cat <<EOF

ordergate is running: gateway http://$gateway_addr (pid $gateway_pid), worker (pid $worker_pid),
marketmaker (pid $marketmaker_pid) quoting every instrument GET /v1/instruments lists, every 2 s
  REDIS_URL=$REDIS_URL
  DATABASE_URL=$DATABASE_URL
  demo account: $account_id
  market maker account: $mm_account_id
  logs: ${log_dir#"$repo_root"/}/gateway.log, ${log_dir#"$repo_root"/}/worker.log, ${log_dir#"$repo_root"/}/marketmaker.log
  metrics: $(metrics_url gateway "$gateway_metrics_addr"), $(metrics_url worker "$worker_metrics_addr")

Buy 0.01 BTC from the market maker's quotes (a market order takes the best asks):

curl -sS -X POST http://$gateway_addr/v1/orders -H "Authorization: Bearer $api_key" -H 'Content-Type: application/json' -d '{"client_order_id":"demo-1","symbol":"BTC-USD","side":"buy","type":"market","quantity":"0.01000"}'

Then look it up with the id from the answer, and see the balances it moved:

curl -sS http://$gateway_addr/v1/orders/<order_id> -H "Authorization: Bearer $api_key"
curl -sS http://$gateway_addr/v1/balances -H "Authorization: Bearer $api_key"

Or follow the account's events as they happen (Server-Sent Events; Ctrl-C leaves):

curl -sS -N http://$gateway_addr/v1/events -H "Authorization: Bearer $api_key"

A key whose requests must be signed (README, Using the API):

DATABASE_URL='$DATABASE_URL' SIGNING_KEY_ENCRYPTION_KEY=\$(cat .state/signing.key) bin/admin issue-key -signed $account_id

Press Ctrl-C to stop.
EOF

# Returns when either service exits by itself, which is an error; a signal
# interrupts the wait and runs the traps instead.
status=0
wait -n "$gateway_pid" "$worker_pid" "$marketmaker_pid" || status=$?
log "a service exited unexpectedly (status $status); see ${log_dir#"$repo_root"/}"
exit 1
