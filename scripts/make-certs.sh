#!/usr/bin/env bash
# Makes what a PETRA fleet with mutual TLS and a bearer token needs, with
# openssl only: a CA, a coordinator, a stage and a client certificate, and a
# random token. Prints how to create the Kubernetes Secrets and how to call
# the coordinator.
#
# Usage: scripts/make-certs.sh [OUT_DIR]        (default: ./petra-certs)
# Environment:
#   PETRA_NAMESPACE   Kubernetes namespace in the DNS names (default: petra)
#   DAYS              validity of every certificate (default: 365)
#   EXTRA_COORDINATOR_SANS, EXTRA_STAGE_SANS
#                     more subjectAltName entries, comma-separated
#                     (e.g. DNS:petra.example.com,IP:10.0.0.5); the stage
#                     default names docker-compose's stage-0 and stage-1
#
# OUT_DIR/ca.crt, ca.key      the CA (keep ca.key offline)
# OUT_DIR/coordinator/        tls.crt, tls.key, ca.crt: CN petra-coordinator
# OUT_DIR/stage/              the same for every stage server: CN petra-stage
# OUT_DIR/client/             the same for `petra` users: CN petra-client
# OUT_DIR/token               the coordinator's bearer token
# Each folder is the layout of a kubernetes.io/tls Secret plus ca.crt.
set -euo pipefail

OUT=${1:-petra-certs}
NS=${PETRA_NAMESPACE:-petra}
DAYS=${DAYS:-365}
EXTRA_COORDINATOR_SANS=${EXTRA_COORDINATOR_SANS:-}
EXTRA_STAGE_SANS=${EXTRA_STAGE_SANS-DNS:stage-0,DNS:stage-1}

command -v openssl >/dev/null || {
  echo "make-certs.sh: openssl is not installed (apt-get install openssl)" >&2
  exit 1
}
if [[ -e "$OUT/ca.key" || -e "$OUT/ca.crt" ]]; then
  echo "make-certs.sh: $OUT already holds a CA; remove it or pick another" \
    "directory" >&2
  exit 1
fi
mkdir -p "$OUT"
umask 077

# The coordinator's names: its Service inside the cluster, docker-compose's
# service name, and loopback (kubectl port-forward, probes in the pod).
COORDINATOR_SANS="DNS:petra-coordinator,DNS:petra-coordinator.$NS"
COORDINATOR_SANS+=",DNS:petra-coordinator.$NS.svc"
COORDINATOR_SANS+=",DNS:petra-coordinator.$NS.svc.cluster.local"
COORDINATOR_SANS+=",DNS:coordinator,DNS:localhost,IP:127.0.0.1,IP:::1"
# Every stage pod is <statefulset>-<i>.petra-stage: one wildcard covers any
# replica count.
STAGE_SANS="DNS:*.petra-stage,DNS:*.petra-stage.$NS"
STAGE_SANS+=",DNS:*.petra-stage.$NS.svc,DNS:*.petra-stage.$NS.svc.cluster.local"
STAGE_SANS+=",DNS:localhost,IP:127.0.0.1,IP:::1"
[[ -n "$EXTRA_COORDINATOR_SANS" ]] && COORDINATOR_SANS+=",$EXTRA_COORDINATOR_SANS"
[[ -n "$EXTRA_STAGE_SANS" ]] && STAGE_SANS+=",$EXTRA_STAGE_SANS"

new_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 \
  -out "$1" 2>/dev/null; }

new_key "$OUT/ca.key"
openssl req -x509 -new -key "$OUT/ca.key" -out "$OUT/ca.crt" -days "$DAYS" \
  -subj "/CN=petra-fleet-ca" \
  -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
  -addext "keyUsage=critical,keyCertSign,cRLSign"

# issue NAME CN USAGES SANS: OUT/NAME/{tls.crt,tls.key,ca.crt}.
issue() {
  local dir="$OUT/$1" cn=$2 usage=$3 sans=$4
  mkdir -p "$dir"
  new_key "$dir/tls.key"
  openssl req -new -key "$dir/tls.key" -subj "/CN=$cn" -out "$dir/tls.csr"
  cat > "$dir/ext.cnf" <<EXT
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=$usage
subjectAltName=$sans
EXT
  openssl x509 -req -in "$dir/tls.csr" -CA "$OUT/ca.crt" -CAkey "$OUT/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days "$DAYS" \
    -extfile "$dir/ext.cnf" -out "$dir/tls.crt" 2>/dev/null
  rm -f "$dir/tls.csr" "$dir/ext.cnf"
  cp "$OUT/ca.crt" "$dir/ca.crt"
}

# Coordinator and stages serve and call out (to the stages, to the
# neighbours), so their certificates are for both ends.
issue coordinator petra-coordinator serverAuth,clientAuth "$COORDINATOR_SANS"
issue stage petra-stage serverAuth,clientAuth "$STAGE_SANS"
issue client petra-client clientAuth "DNS:petra-client"
openssl rand -hex 32 > "$OUT/token"
# Readable by the owner only; the containers run as uid 10001.
chmod 600 "$OUT"/*/tls.key "$OUT/ca.key" "$OUT/token"
chmod 644 "$OUT/ca.crt" "$OUT"/*/tls.crt "$OUT"/*/ca.crt

cat <<DONE
make-certs.sh: wrote $OUT (CA petra-fleet-ca, valid $DAYS days)

Kubernetes (deploy/k8s mounts these Secrets):
  kubectl create namespace $NS
  kubectl -n $NS create secret generic petra-coordinator-tls \\
    --type=kubernetes.io/tls --from-file=$OUT/coordinator
  kubectl -n $NS create secret generic petra-stage-tls \\
    --type=kubernetes.io/tls --from-file=$OUT/stage
  kubectl -n $NS create secret generic petra-auth --from-file=token=$OUT/token

Clients (petra submit/watch/status/list/cancel/export):
  petra list --coordinator localhost:50050 --tls-ca $OUT/client/ca.crt \\
    --tls-cert $OUT/client/tls.crt --tls-key $OUT/client/tls.key \\
    --auth-token-file $OUT/token
  (or export PETRA_AUTH_TOKEN=\$(cat $OUT/token) instead of --auth-token-file)
Keep $OUT/ca.key off the cluster: it signs new certificates.
DONE
