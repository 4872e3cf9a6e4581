#!/usr/bin/env bash
# Makes the certificates of Hubble Relay over xlane (docs/hubble.md,
# deploy/kubernetes/hubble/relay.yaml) into DIR: a CA (ca.crt, ca.key),
# xlaned's server certificate (server.crt, server.key) for every node's
# name as Peer.Notify gives it (*.hubble-grpc.xlane.local) and the name
# Relay checks the Peer service against
# (hubble-peer.CLUSTER.hubble-grpc.cilium.io; CLUSTER is Relay's
# --cluster-name, default "default"), and Relay's client certificate
# (relay.crt, relay.key). Then, on the cluster:
#
#   kubectl -n kube-system create secret generic hubble-server-certs \
#       --from-file=tls.crt=DIR/server.crt --from-file=tls.key=DIR/server.key --from-file=ca.crt=DIR/ca.crt
#   kubectl -n kube-system create secret generic hubble-relay-client-certs \
#       --from-file=tls.crt=DIR/relay.crt --from-file=tls.key=DIR/relay.key --from-file=ca.crt=DIR/ca.crt
#
# Usage: scripts/hubble-certs.sh DIR [DAYS [CLUSTER]]
set -euo pipefail

dir=${1:?usage: hubble-certs.sh DIR [DAYS [CLUSTER]]}
days=${2:-365}
cluster=${3:-default}
mkdir -p "$dir"
cd "$dir"
umask 077
key=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
openssl req -x509 "${key[@]}" -days "$days" -subj /CN=xlane-hubble-ca -keyout ca.key -out ca.crt
openssl req "${key[@]}" -subj /CN=xlane-hubble -keyout server.key -out server.csr
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days "$days" -out server.crt -extfile <(printf \
	'subjectAltName=DNS:*.hubble-grpc.xlane.local,DNS:hubble-peer.%s.hubble-grpc.cilium.io\nextendedKeyUsage=serverAuth\n' \
	"${cluster//./-}")
openssl req "${key[@]}" -subj /CN=hubble-relay -keyout relay.key -out relay.csr
openssl x509 -req -in relay.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days "$days" -out relay.crt -extfile <(printf \
	'extendedKeyUsage=clientAuth\n')
rm -f server.csr relay.csr ca.srl
echo "$dir: ca.crt ca.key server.crt server.key relay.crt relay.key"
