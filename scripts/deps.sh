#!/usr/bin/env bash
# Installs the servers and tools that the tests (testkit/testserver) and
# `make run` need on a fresh Debian 12, because a new machine or CI starts
# without them. Idempotent and silent when everything is already there.
set -euo pipefail

log() { echo "deps.sh: $*" >&2; }

if ! command -v go >/dev/null 2>&1 && [[ ! -x /usr/local/go/bin/go ]]; then
	log "Go not found on PATH nor at /usr/local/go/bin/go; install Go 1.26 at /usr/local/go"
	exit 1
fi

has_postgres_server() {
	command -v postgres >/dev/null 2>&1 && return 0
	compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null
}

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
has_postgres_server || missing+=(postgresql)
# run.sh waits for the gateway with curl.
command -v curl >/dev/null 2>&1 || missing+=(curl)

if ((${#missing[@]} == 0)); then
	exit 0
fi

if ((EUID != 0)); then
	log "missing packages: ${missing[*]}"
	log "install them as root: apt-get update && apt-get install -y ${missing[*]}"
	exit 1
fi

# The packages' maintainer scripts would start system-wide Redis and
# PostgreSQL services on the default ports; the tests start their own
# servers, so forbid service starts for the duration of the install.
created_policy=0
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
	printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
	chmod +x /usr/sbin/policy-rc.d
	created_policy=1
fi
remove_policy() {
	if ((created_policy)); then
		rm -f /usr/sbin/policy-rc.d
	fi
}
trap remove_policy EXIT

log "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

# Belt and braces where an init system ignored the policy: the auto-created
# Debian cluster and the packaged redis service are not used by anything here.
if command -v pg_lsclusters >/dev/null 2>&1; then
	pg_lsclusters --no-header 2>/dev/null | while read -r version cluster _port status _rest; do
		if [[ $status == online* ]]; then
			log "stopping the Debian PostgreSQL cluster $version/$cluster that the package started"
			pg_ctlcluster "$version" "$cluster" stop || true
		fi
	done
fi
if [[ -s /run/redis/redis-server.pid ]]; then
	log "stopping the redis-server service that the package started"
	kill "$(cat /run/redis/redis-server.pid)" 2>/dev/null || true
fi

log "installed ${missing[*]}"
