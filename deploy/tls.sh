#!/usr/bin/env bash
# Issues a cluster CA and every certificate deploy/compose.tls.yaml mounts,
# with openssl, into DIR (default deploy/.tls):
#
#   ca.pem                          the cluster CA (its key, ca-key.pem, stays here)
#   manager.pem, manager-key.pem    every manager: DNS manager.once (and 127.0.0.1, localhost for
#                                   the RPC ports published on the host), server and client use
#   gate.pem, gate-key.pem          the gates' HTTPS: 127.0.0.1, localhost, gate1, gate2
#   gate-client.pem, -key.pem       the gates' client certificate for the managers' RPC
#   client.pem, client-key.pem      an operator's (oncectl, curl, Prometheus) client certificate,
#                                   with the operator role (URI SAN spiffe://once/role/operator)
#
#   deploy/tls.sh [DIR]
#
# The keys are made readable by every user (the containers run as 65532):
# fine for a test; in production mount each key only into its container,
# owned by the container's user, mode 0400.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$here/.tls}
mkdir -p "$dir"
cd "$dir"
days=30
ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)

openssl req -x509 "${ec[@]}" -days "$days" -subj /CN=once-cluster-ca -keyout ca-key.pem -out ca.pem 2>/dev/null

# issue NAME CN EXTENSIONS
issue() {
	openssl req "${ec[@]}" -subj "/CN=$2" -keyout "$1-key.pem" -out "$1.csr" 2>/dev/null
	openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days "$days" -out "$1.pem" \
		-extfile <(printf '%s\n' "$3") 2>/dev/null
	rm -f "$1.csr"
}
issue manager manager.once "subjectAltName=DNS:manager.once,IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth,clientAuth"
issue gate localhost "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:gate1,DNS:gate2
extendedKeyUsage=serverAuth"
issue gate-client gate "extendedKeyUsage=clientAuth"
issue client operator "subjectAltName=URI:spiffe://once/role/operator
extendedKeyUsage=clientAuth"
rm -f ca.srl
chmod 0755 "$dir"
chmod 0644 "$dir"/*.pem
chmod 0600 "$dir"/ca-key.pem
echo "deploy/tls.sh: certificates in $dir"
