#!/usr/bin/env bash
# End-to-end check of the container deployment, with real containers:
#
#   build the images (deploy/build.sh), compose up (deploy/compose.yaml plus
#   deploy/compose.rpc.yaml for the managers' status), wait for /readyz on both
#   gates, submit a job through gate1, replay it through gate2 (same job_id,
#   same bytes), find the Raft leader through every manager's
#   GET /rpc/v1/status, docker kill it, submit more through both gates, read the
#   first job back, restart the killed manager and check it catches up, then
#   compose down -v.
#
# Exit status 0 when every check passed, non-zero otherwise. The whole run is
# bounded (ONCE_TEST_TIMEOUT, default 165 s, plus the final cleanup). It is not
# part of make test: it needs a Docker engine and docker-compose.
#
# It runs as its own compose project with its own subnet, and its published
# ports (127.0.0.1 only) are picked by Docker, so it does not disturb a stack
# started from deploy/compose.yaml with the defaults, nor anything on 8080:
#   ONCE_TEST_PROJECT     compose project name          (oncetest)
#   ONCE_TEST_NET         /24 prefix of its network     (172.28.9)
#   ONCE_TEST_SKIP_BUILD  1: use the existing once-*:dev images
#   ONCE_TEST_TIMEOUT     seconds for everything but the cleanup (165)
#   ONCE_TEST_TLS         0: plain HTTP and TCP; by default (1) the stack runs
#                         with TLS everywhere (compose.tls.yaml, certificates
#                         from deploy/tls.sh): HTTPS at the gates, mutual TLS
#                         for RPC and Raft, and the checks also see a caller
#                         without a client certificate refused by a manager
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
project=${ONCE_TEST_PROJECT:-oncetest}
export ONCE_NET=${ONCE_TEST_NET:-172.28.9}
# Set and empty: Docker picks free host ports (on 127.0.0.1).
export ONCE_GATE1_PORT= ONCE_GATE2_PORT= ONCE_RPC1_PORT= ONCE_RPC2_PORT= ONCE_RPC3_PORT=
export ONCE_TAG=dev
budget=${ONCE_TEST_TIMEOUT:-165}

if docker-compose version >/dev/null 2>&1; then
	compose=(docker-compose)
elif docker compose version >/dev/null 2>&1; then
	compose=(docker compose)
else
	echo "deploy/test.sh: neither docker-compose nor docker compose is available" >&2
	exit 2
fi
tls=${ONCE_TEST_TLS:-1}
files=(-f "$here/compose.yaml" -f "$here/compose.rpc.yaml")
if [ "$tls" = 1 ]; then
	files+=(-f "$here/compose.tls.yaml")
	# TLS files without a cluster secret: the gossip pools need a key.
	ONCE_GOSSIP_KEY=${ONCE_GOSSIP_KEY:-$(head -c 32 /dev/urandom | base64)}
	export ONCE_GOSSIP_KEY
fi
dc() { "${compose[@]}" -p "$project" "${files[@]}" "$@"; }

# ---------------------------------------------------------------------------
# Parent: runs the checks in a child under a hard time limit, then always
# cleans up (logs on failure, compose down -v) and checks nothing is left.
if [ -z "${_ONCE_TEST_CHILD:-}" ]; then
	t0=$SECONDS
	dc down -v --remove-orphans >/dev/null 2>&1 || true # leftovers of an interrupted run
	work=$(mktemp -d)
	if [ "$tls" = 1 ]; then
		"$here/tls.sh" "$work/tls" >/dev/null
		export ONCE_TLS_DIR=$work/tls
	fi
	# In the background, so that Ctrl-C (or a TERM) reaches this shell at once:
	# it stops the checks, then still cleans up.
	_ONCE_TEST_CHILD=1 _ONCE_TEST_WORK=$work timeout -k 5 "$budget" "$0" "$@" &
	child=$!
	interrupted=
	trap 'interrupted=1; kill -TERM "$child" 2>/dev/null || true' INT TERM
	set +e
	wait "$child"
	rc=$?
	if [ -n "$interrupted" ]; then
		wait "$child"
		rc=130
		echo "interrupted"
	fi
	set -e
	trap - INT TERM
	rm -rf "$work"
	if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
		echo "FAIL: the checks did not finish within ${budget}s"
	fi
	if [ "$rc" -ne 0 ]; then
		echo "== logs (last 30 lines of each service)"
		dc logs --no-color --tail=30 2>&1 || true
	fi
	echo "== compose down -v"
	dc down -v --remove-orphans >"${TMPDIR:-/tmp}/oncetest-down.$$" 2>&1 || rc=1
	quiet_down=$(tr -d '\r' <"${TMPDIR:-/tmp}/oncetest-down.$$" | grep -v -e '\.\.\. *$' | sed 's/^/   /' || true)
	rm -f "${TMPDIR:-/tmp}/oncetest-down.$$"
	echo "$quiet_down"
	label="label=com.docker.compose.project=$project"
	left="$(docker ps -aq --filter "$label")$(docker network ls -q --filter "$label")$(docker volume ls -q --filter "$label")"
	if [ -n "$left" ]; then
		echo "FAIL: containers, networks or volumes of project $project are left over"
		rc=1
	fi
	if [ "$rc" -eq 0 ]; then
		echo "PASS deploy/test.sh ($((SECONDS - t0))s)"
	else
		echo "FAIL deploy/test.sh (exit $rc, $((SECONDS - t0))s)"
	fi
	exit "$rc"
fi

# ---------------------------------------------------------------------------
# Child: the checks. Every wait is bounded; any failure exits non-zero.
work=$_ONCE_TEST_WORK
t0=$SECONDS
log() { printf '[%3ds] %s\n' "$((SECONDS - t0))" "$*"; }
fail() {
	log "FAIL: $*" >&2
	exit 1
}

# The scheme and the curl options of the gates' and the managers' listeners.
if [ "$tls" = 1 ]; then
	scheme=https
	gate_tls=(--cacert "$ONCE_TLS_DIR/ca.pem")
	mgr_tls=(--cacert "$ONCE_TLS_DIR/ca.pem" --cert "$ONCE_TLS_DIR/client.pem" --key "$ONCE_TLS_DIR/client-key.pem")
else
	scheme=http
	gate_tls=()
	mgr_tls=()
fi

# quiet FILE: prints FILE indented, without progress and deprecation noise.
quiet() {
	tr -d '\r' <"$1" | grep -v -e '\.\.\. *$' -e DEPRECATED -e 'legacy builder' -e buildx -e 'docs.docker.com' -e '^ *$' | sed 's/^/       /' || true
}

# published SERVICE PORT: the host port Docker picked for it (empty when the
# container is not running). Containers are looked up once (cid_SERVICE).
published() {
	local id
	id=$(cat "$work/cid-$1" 2>/dev/null) || {
		id=$(dc ps -q "$1")
		[ -n "$id" ] || fail "no container for service $1"
		echo "$id" >"$work/cid-$1"
	}
	docker port "$id" "$2/tcp" 2>/dev/null | sed -n 's/^127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' | head -n1
}
gate_port() { cat "$work/port-$1"; }
rpc_port() { published "$1" 7100; }

# json_str FILE FIELD: the value of a top-level string field of compact JSON.
json_str() { sed -n 's/.*"'"$2"'":"\([^"]*\)".*/\1/p' "$1" | head -n1; }
# json_num FILE FIELD
json_num() { sed -n 's/.*"'"$2"'":\([0-9][0-9]*\).*/\1/p' "$1" | head -n1; }

# req NAME METHOD URL [curl args...]: writes $work/NAME.body and NAME.hdr,
# prints the HTTP status (000 when there was no answer).
req() {
	local name=$1 method=$2 url=$3
	shift 3
	rm -f "$work/$name.body" "$work/$name.hdr"
	curl -s -o "$work/$name.body" -D "$work/$name.hdr" -w '%{http_code}' --max-time 30 \
		-X "$method" "$url" "$@" 2>/dev/null || true
}

# submit NAME GATE KEY BODY DEADLINE_SECONDS: POST /v1/jobs, retried with the
# same key (what a client does) on no answer, 502, 503 or 504 until 201.
submit() {
	local name=$1 gate=$2 key=$3 body=$4 until=$((SECONDS + $5)) code tries=0
	while :; do
		tries=$((tries + 1))
		code=$(req "$name" POST "$scheme://127.0.0.1:$(gate_port "$gate")/v1/jobs" "${gate_tls[@]}" \
			-H "Idempotency-Key: $key" -d "$body")
		case $code in
		201) break ;;
		000 | 502 | 503 | 504) ;;
		*) fail "submit $name through $gate: HTTP $code: $(cat "$work/$name.body")" ;;
		esac
		[ "$SECONDS" -lt "$until" ] || fail "submit $name through $gate: still HTTP $code after $tries tries"
		sleep 0.5
	done
	log "submitted $name through $gate: 201 job_id=$(json_str "$work/$name.body" job_id) replayed=$(replayed "$name") tries=$tries"
}
replayed() { tr -d '\r' <"$work/$1.hdr" | sed -n 's/^[Ii]dempotent-[Rr]eplayed: //p'; }

# leader_of M...: the manager among M... whose status says is_leader, when
# exactly one does and the others agree on it; empty otherwise.
leader_of() {
	local m p found="" n=0
	for m in "$@"; do
		p=$(rpc_port "$m")
		[ -n "$p" ] || continue
		[ "$(req "st-$m" GET "$scheme://127.0.0.1:$p/rpc/v1/status" "${mgr_tls[@]}")" = 200 ] || continue
		[ "$(json_str "$work/st-$m.body" node_id)" = "$m" ] || fail "$m's status names another node: $(cat "$work/st-$m.body")"
		if grep -q '"is_leader":true' "$work/st-$m.body"; then
			found=$m
			n=$((n + 1))
		fi
	done
	[ "$n" -eq 1 ] || return 0
	for m in "$@"; do
		[ -s "$work/st-$m.body" ] || continue
		[ "$(json_str "$work/st-$m.body" leader_id)" = "$found" ] || return 0
	done
	echo "$found"
}

# wait_leader DEADLINE_SECONDS M...: waits until leader_of M... names one.
wait_leader() {
	local until=$((SECONDS + $1)) l
	shift
	while :; do
		l=$(leader_of "$@")
		[ -z "$l" ] || {
			echo "$l"
			return
		}
		[ "$SECONDS" -lt "$until" ] || fail "no single leader among $* within the deadline"
		sleep 0.5
	done
}

# wait_ready GATE DEADLINE_SECONDS [LEADER]: /readyz 200 (naming LEADER, if given).
wait_ready() {
	local gate=$1 until=$((SECONDS + $2)) want=${3:-} code
	while :; do
		code=$(req "ready-$gate" GET "$scheme://127.0.0.1:$(gate_port "$gate")/readyz" "${gate_tls[@]}")
		if [ "$code" = 200 ] && { [ -z "$want" ] || [ "$(json_str "$work/ready-$gate.body" leader)" = "$want" ]; }; then
			log "$gate /readyz: $(cat "$work/ready-$gate.body")"
			return
		fi
		[ "$SECONDS" -lt "$until" ] || fail "$gate /readyz: HTTP $code $(cat "$work/ready-$gate.body" 2>/dev/null) after $2s"
		sleep 0.5
	done
}

# get_job NAME GATE JOB_ID: GET /v1/jobs/{id} must answer 200 with that job.
get_job() {
	local code
	code=$(req "$1" GET "$scheme://127.0.0.1:$(gate_port "$2")/v1/jobs/$3" "${gate_tls[@]}")
	[ "$code" = 200 ] || fail "GET /v1/jobs/$3 through $2: HTTP $code $(cat "$work/$1.body")"
	[ "$(json_str "$work/$1.body" job_id)" = "$3" ] || fail "GET /v1/jobs/$3 through $2 answered another job: $(cat "$work/$1.body")"
	[ "$(json_str "$work/$1.body" status)" = committed ] || fail "job $3 is not committed: $(cat "$work/$1.body")"
	log "read $3 back through $2: 200, committed"
}

if [ "${ONCE_TEST_SKIP_BUILD:-}" != 1 ]; then
	log "build: deploy/build.sh"
	"$here/build.sh" >"$work/build.log" 2>&1 || {
		cat "$work/build.log"
		fail "deploy/build.sh failed"
	}
	quiet "$work/build.log"
fi

log "compose up: project $project, network $ONCE_NET.0/24"
dc up -d >"$work/up.log" 2>&1 || {
	cat "$work/up.log"
	fail "compose up failed"
}
quiet "$work/up.log"
for g in gate1 gate2; do
	published "$g" 8080 >"$work/port-$g"
	[ -s "$work/port-$g" ] || fail "$g is not published on 127.0.0.1"
done
log "published: gate1 127.0.0.1:$(gate_port gate1), gate2 127.0.0.1:$(gate_port gate2), manager RPC 127.0.0.1:$(rpc_port manager1),$(rpc_port manager2),$(rpc_port manager3)"

wait_ready gate1 60
wait_ready gate2 30

leader=$(wait_leader 20 manager1 manager2 manager3)
log "raft leader (GET /rpc/v1/status on each manager): $leader; voters: $(sed -n 's/.*"voters":\[\([^]]*\)\].*/\1/p' "$work/st-$leader.body")"
term1=$(json_num "$work/st-$leader.body" term)
grep -q '"voters":\["manager1","manager2","manager3"\]' "$work/st-$leader.body" || fail "the leader's voters are not manager1..3: $(cat "$work/st-$leader.body")"
for g in gate1 gate2; do
	wait_ready "$g" 10 "$leader"
done

if [ "$tls" = 1 ]; then
	# With TLS: the gates answered over HTTPS with the cluster CA above, and the
	# managers over mutual TLS with a client certificate. Without one a manager
	# refuses the caller during the handshake; plain HTTP gets nothing either.
	p=$(rpc_port "$leader")
	code=$(req notls-cert GET "https://127.0.0.1:$p/rpc/v1/status" --cacert "$ONCE_TLS_DIR/ca.pem")
	[ "$code" = 000 ] || fail "a caller without a client certificate got HTTP $code from $leader"
	code=$(req notls-plain GET "http://127.0.0.1:$p/rpc/v1/status")
	[ "$code" = 000 ] || [ "$code" = 400 ] || fail "a plain-HTTP caller got HTTP $code from $leader"
	code=$(req notls-gate GET "https://127.0.0.1:$(gate_port gate1)/readyz")
	[ "$code" = 000 ] || fail "a client that does not trust the cluster CA got HTTP $code from gate1"
	log "TLS: gates serve HTTPS; $leader refuses a caller without a client certificate (and plain HTTP)"
fi

# A client ID unique to this run: the ledger outlives nothing here (down -v),
# but keys stay distinct across reruns anyway.
cid="deploytest.dc1:$$"
nonce=0123456789abcdef

submit A gate1 "$cid:1:$nonce" '{"type":"deploy-test","payload":{"n":1}}' 20
[ "$(replayed A)" = false ] || fail "first submission of A was a replay"
jobA=$(json_str "$work/A.body" job_id)
[ -n "$jobA" ] || fail "no job_id in $(cat "$work/A.body")"

submit A2 gate2 "$cid:1:$nonce" '{"type":"deploy-test","payload":{"n":1}}' 20
[ "$(replayed A2)" = true ] || fail "the replay of A through gate2 is not marked Idempotent-Replayed: true"
cmp -s "$work/A.body" "$work/A2.body" || fail "the replay through gate2 differs: $(cat "$work/A2.body") vs $(cat "$work/A.body")"
log "replayed A through gate2: same job_id, byte-identical body, Idempotent-Replayed: true"

code=$(req A3 POST "$scheme://127.0.0.1:$(gate_port gate2)/v1/jobs" "${gate_tls[@]}" -H "Idempotency-Key: $cid:1:$nonce" -d '{"type":"deploy-test","payload":{"n":999}}')
[ "$code" = 422 ] && grep -q idempotency_key_reused "$work/A3.body" || fail "same key, other body: want 422 idempotency_key_reused, got HTTP $code $(cat "$work/A3.body")"
log "same key with another body through gate2: 422 idempotency_key_reused"

published "$leader" 7100 >/dev/null
cid_killed=$(cat "$work/cid-$leader")
docker kill "$cid_killed" >/dev/null
log "docker kill $leader (container ${cid_killed:0:12})"
others=()
for m in manager1 manager2 manager3; do [ "$m" = "$leader" ] || others+=("$m"); done

# Right away, through both gates: the gates follow the leader change.
submit B gate1 "$cid:2:$nonce" '{"type":"deploy-test","payload":{"n":2}}' 40
submit C gate2 "$cid:3:$nonce" '{"type":"deploy-test","payload":{"n":3}}' 40

leader2=$(wait_leader 20 "${others[@]}")
term2=$(json_num "$work/st-$leader2.body" term)
[ "$leader2" != "$leader" ] || fail "the killed manager is still the leader"
[ "$term2" -gt "$term1" ] || fail "term did not advance ($term1 -> $term2)"
log "new raft leader: $leader2 (term $term1 -> $term2)"
wait_ready gate1 20 "$leader2"
wait_ready gate2 20 "$leader2"

for i in 4 5 6; do
	g=gate1
	[ $((i % 2)) -eq 0 ] || g=gate2
	submit "J$i" "$g" "$cid:$i:$nonce" "{\"type\":\"deploy-test\",\"payload\":{\"n\":$i}}" 20
done

get_job GA1 gate1 "$jobA"
get_job GA2 gate2 "$jobA"
get_job GB2 gate2 "$(json_str "$work/B.body" job_id)"
submit A4 gate2 "$cid:1:$nonce" '{"type":"deploy-test","payload":{"n":1}}' 20
cmp -s "$work/A.body" "$work/A4.body" || fail "replay of A after the failover differs: $(cat "$work/A4.body")"
log "replayed A after the failover: byte-identical"

# The killed manager comes back on its volume and catches up.
dc start "$leader" >"$work/start.log" 2>&1 || {
	cat "$work/start.log"
	fail "compose start $leader failed"
}
log "started $leader again"
until=$((SECONDS + 40))
while :; do
	l=$(leader_of manager1 manager2 manager3)
	if [ -n "$l" ] && [ -s "$work/st-$leader.body" ]; then
		jl=$(json_num "$work/st-$l.body" jobs)
		jk=$(json_num "$work/st-$leader.body" jobs)
		if [ "$(json_str "$work/st-$leader.body" leader_id)" = "$l" ] && [ "$jk" = "$jl" ] &&
			grep -q '"voters":\["manager1","manager2","manager3"\]' "$work/st-$l.body"; then
			break
		fi
	fi
	[ "$SECONDS" -lt "$until" ] || fail "$leader did not catch up: $(cat "$work/st-$leader.body" 2>/dev/null)"
	sleep 0.5
done
log "$leader is back: follower of $l, $jk jobs like the leader, voters manager1..3"
[ "$jl" -eq 6 ] || fail "the leader holds $jl jobs, want 6 (A, B, C, J4-J6)"

log "all checks passed"
