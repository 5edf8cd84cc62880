#!/usr/bin/env bash
# FIRST DRAFT (2026-12-03): written, not yet run end to end; issue 69 says
# what it must show before it is relied on.
#
# The deploy shape run as users run it (issue 69): a private Docker daemon,
# the project's image, `docker-compose up`, and a job trained in the
# containers, watched by a real Prometheus.
#
#   bash scripts/compose-live.sh            # after the README's test command
#   bash scripts/compose-live.sh --full     # the image's own multi-stage build
#   bash scripts/compose-live.sh --keep     # keep the images for the next run
#
# It starts dockerd with its own socket, data root and exec root under one
# work folder (--work, default /var/tmp/petra-compose-live; the machine's
# own Docker, if any, is not touched), with the vfs storage driver and no
# iptables or default bridge. No registry is reachable: the Debian base
# image is made here with debootstrap (cached as a tarball beside the work
# folder) and tagged as the names the Dockerfiles expect. The project's
# image takes the binaries of `build/` by default (the Dockerfile's
# BINARIES=prebuilt: CI built them already), or builds them itself with
# --full (BINARIES=build, the image users build); every runtime line is the
# same. Prometheus runs from deploy/prometheus/Dockerfile (Debian's
# package); Grafana's image cannot be had here, so its service is left out
# and its provisioning is checked on disk by tests/deploy.
#
# Each check prints one line, "compose-live: ok ..." or "compose-live: FAIL
# ...", and the first failure ends the run with exit 1. Whatever it
# started (daemon, containers, networks, volumes, images unless --keep, the
# work folder's mounts) is stopped and removed on exit, also when killed.
set -euo pipefail
cd "$(dirname "$0")/.."
SOURCE=$PWD

usage() {
  sed -n "5,28p" "$0" | sed 's/^# \{0,1\}//'
  echo "Options: --full, --keep, --work DIR, --bin-dir DIR (default build/bin)"
}
full=0 keep=0
work=${COMPOSE_LIVE_DIR:-/var/tmp/petra-compose-live}
bin=${BUILD_DIR:-build}/bin
while (($#)); do
  case $1 in
    --full) full=1 ;;
    --keep) keep=1 ;;
    --work) work=${2:?--work needs a folder}; shift ;;
    --bin-dir) bin=${2:?--bin-dir needs a folder}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "compose-live: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ $EUID -eq 0 ]] || { echo "compose-live: needs root (it runs a Docker daemon)" >&2; exit 2; }
bin=$(cd "$bin" 2>/dev/null && pwd) ||
  { echo "compose-live: no build at ${BUILD_DIR:-build}/bin: run bash scripts/test.sh first" >&2; exit 2; }
for p in petra petra-coordinator petra-stage-server petra-health; do
  [[ -x $bin/$p ]] || { echo "compose-live: $bin/$p is missing: build first" >&2; exit 2; }
done
PETRA=$bin/petra
PROJECT=petralive
COMPOSE_DIR=$SOURCE/deploy/compose
STAGED=$SOURCE/deploy/docker/prebuilt
cache=$(dirname "$work")/petra-compose-live-cache

say() { echo "compose-live: $*"; }
fail() { say "FAIL $*"; exit 1; }
# check NAME COMMAND...: runs a check, prints its line with its time.
check() {
  local name=$1 t0=$SECONDS
  shift
  if "$@"; then say "ok   $name ($((SECONDS - t0)) s)"; else fail "$name"; fi
}
# wait_for SECONDS WHAT COMMAND...: until COMMAND succeeds.
wait_for() {
  local limit=$1 what=$2 end=$((SECONDS + $1))
  shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < end)) || { say "timed out after ${limit} s waiting for $what" >&2; return 1; }
    sleep 1
  done
}

# --- what it starts, and how it all goes again --------------------------
daemon_pid=""
# dockerd 20.10 writes these whatever its roots (seen 2026-12-03): removed
# again unless they were there before.
outside=(/etc/docker/key.json /var/run/docker)
created=()
for path in "${outside[@]}"; do [[ -e $path ]] || created+=("$path"); done
cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  if [[ -n $daemon_pid ]] && docker info >/dev/null 2>&1; then
    compose down --volumes --remove-orphans --timeout 10 >/dev/null 2>&1
    docker ps -aq | xargs -r docker rm -f >/dev/null 2>&1
    docker network prune -f >/dev/null 2>&1
    docker volume prune -f >/dev/null 2>&1
    ((keep)) || docker image prune -af >/dev/null 2>&1
  fi
  if [[ -n $daemon_pid ]]; then
    kill -TERM "$daemon_pid" 2>/dev/null
    for _ in $(seq 60); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL "$daemon_pid" 2>/dev/null
  fi
  # What the daemon left (containerd, shims, proxies), by their folders.
  local pid
  for pid in $(pgrep -f -- "$work/"); do
    [[ $pid == "$$" ]] || kill -KILL "$pid" 2>/dev/null
  done
  # Mounts under the work folder (volumes, netns, overlays), deepest first.
  awk -v w="$work/" 'index($2, w) == 1 {print $2}' /proc/mounts | sort -r |
    xargs -r -n1 umount -l 2>/dev/null
  rm -rf "$STAGED/bin" "$STAGED/runtime-packages.txt" "$work/tls"
  ((${#created[@]} == 0)) || rm -rf "${created[@]}"
  if ((keep)); then
    rm -rf "$work/exec" "$work/docker.sock"
  else
    rm -rf "$work"
  fi
  ((rc == 0)) || say "stopped everything it started (exit $rc)"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

compose() {
  (cd "$COMPOSE_DIR" && docker-compose -p "$PROJECT" "${compose_files[@]}" "$@")
}
compose_files=(-f docker-compose.yml)

# --- the daemon ---------------------------------------------------------
install_tools() {
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  command -v docker-compose >/dev/null || missing+=(docker-compose)
  command -v curl >/dev/null || missing+=(curl)
  ((${#missing[@]} == 0)) && return 0
  say "installing ${missing[*]} (Debian's)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    "${missing[@]}" >/dev/null
}

start_daemon() {
  mkdir -p "$work/data" "$work/exec"
  dockerd --host "unix://$work/docker.sock" --data-root "$work/data" \
    --exec-root "$work/exec" --pidfile "$work/docker.pid" \
    --storage-driver vfs --iptables=false --ip-masq=false --bridge=none \
    >"$work/dockerd.log" 2>&1 &
  daemon_pid=$!
  export DOCKER_HOST="unix://$work/docker.sock"
  wait_for 60 "dockerd to answer" docker info ||
    { tail -20 "$work/dockerd.log" >&2; return 1; }
}

# debian:bookworm and debian:bookworm-slim, made here: debootstrap's
# minbase from Debian's archive, imported once and cached as a tarball.
base_image() {
  docker image inspect debian:bookworm >/dev/null 2>&1 && return 0
  local tarball=$cache/debian-bookworm-minbase.tar
  if [[ ! -s $tarball ]]; then
    mkdir -p "$cache"
    local mirror
    mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null)
    debootstrap --variant=minbase bookworm "$work/rootfs" \
      "${mirror:-http://deb.debian.org/debian}" >"$work/debootstrap.log" 2>&1 ||
      { tail -20 "$work/debootstrap.log" >&2; return 1; }
    tar -C "$work/rootfs" -cf "$tarball.partial" . && mv "$tarball.partial" "$tarball"
    rm -rf "$work/rootfs"
  fi
  docker import "$tarball" debian:bookworm >/dev/null
  docker tag debian:bookworm debian:bookworm-slim
}

# --- the images ---------------------------------------------------------
build_images() {
  local args=(--network host -f deploy/docker/Dockerfile -t petra-fleet:latest)
  if ((full)); then
    args+=(--build-arg BINARIES=build)
  else
    # The binaries of the build the tests ran, installed as the image's
    # build stage installs its own, with the packages their libraries need.
    rm -rf "$STAGED/bin"
    cmake --install "$(dirname "$bin")" --prefix "$STAGED" >/dev/null
    bash scripts/runtime-packages.sh "$STAGED"/bin/* >"$STAGED/runtime-packages.txt"
    args+=(--build-arg BINARIES=prebuilt)
  fi
  DOCKER_BUILDKIT=1 docker build "${args[@]}" . >"$work/build.log" 2>&1 ||
    { tail -30 "$work/build.log" >&2; return 1; }
  DOCKER_BUILDKIT=1 docker build --network host -t petra-prometheus:local \
    deploy/prometheus >"$work/build-prometheus.log" 2>&1 ||
    { tail -30 "$work/build-prometheus.log" >&2; return 1; }
}

runs_as_10001() {
  [[ $(docker run --rm --network none petra-fleet:latest id -u) == 10001 ]]
}

# --- the fleet ----------------------------------------------------------
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
export PETRA_IMAGE=petra-fleet:latest PROMETHEUS_IMAGE=petra-prometheus:local
PETRA_COORDINATOR_PORT=$(free_port)
PROMETHEUS_PORT=$(free_port)
export PETRA_COORDINATOR_PORT PROMETHEUS_PORT
COORDINATOR=127.0.0.1:$PETRA_COORDINATOR_PORT
client_flags=(--coordinator "$COORDINATOR")
SERVICES=(coordinator stage-0 stage-1 prometheus)

up() { compose up -d --no-build "$@" "${SERVICES[@]}" >"$work/up.log" 2>&1 || { cat "$work/up.log" >&2; return 1; }; }

healthy() {  # every petra container's health check passes
  local ids status
  ids=$(compose ps -q coordinator stage-0 stage-1)
  [[ -n $ids ]] || return 1
  for id in $ids; do
    status=$(docker inspect --format '{{.State.Health.Status}}' "$id")
    [[ $status == healthy ]] || return 1
  done
}

servers_registered() {  # N: at least N servers in `petra servers`
  local n
  n=$("$PETRA" servers "${client_flags[@]}" --json 2>/dev/null |
    python3 -c 'import json, sys; print(len(json.load(sys.stdin).get("servers", [])))')
  ((n >= $1))
}

job_field() {  # JOB FIELD: a field of `petra status JOB --json`
  "$PETRA" status "${client_flags[@]}" --json "$1" |
    python3 -c 'import json, sys; j = json.load(sys.stdin); print(j.get(sys.argv[1], ""))' "$2"
}
job_state_is() { [[ $(job_field "$1" state) == "$2" ]]; }
job_stepped() {  # the job has trained past its first epoch's checkpoint
  [[ $(job_field "$1" state) == JOB_STATE_RUNNING ]] &&
    "$PETRA" status "${client_flags[@]}" --json "$1" |
    python3 -c 'import json, sys; j = json.load(sys.stdin); sys.exit(0 if j.get("lastCheckpoint", j.get("last_checkpoint")) else 1)'
}

SHORT_JOB=(--arch revnet18 --width 0.125 --dataset synthetic --stages 2
  --micro-batch 16 --train-limit 512 --test-limit 64)
submit() {  # EPOCHS [more flags]: prints the job id
  local epochs=$1
  shift
  "$PETRA" submit "${client_flags[@]}" --json "${SHORT_JOB[@]}" --epochs "$epochs" "$@" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])'
}
succeeds() {  # JOB [SECONDS]
  wait_for "${2:-600}" "$1 to succeed" job_state_is "$1" JOB_STATE_SUCCEEDED ||
    { "$PETRA" status "${client_flags[@]}" "$1" >&2; return 1; }
}

train_and_export() {
  local id
  id=$(submit 2) && succeeds "$id" &&
    "$PETRA" export "${client_flags[@]}" "$id" --output "$work/model.pt" >/dev/null &&
    [[ -s $work/model.pt ]]
}

container() { compose ps -q "$1" | head -1; }

a_killed_stage_recovers() {
  local id
  id=$(submit 6)
  wait_for 300 "$id to checkpoint" job_stepped "$id" || return 1
  docker kill "$(container stage-1)" >/dev/null
  # As an orchestrator's restart would (docker kill is a manual stop).
  docker start "$(container stage-1)" >/dev/null
  succeeds "$id" && [[ $(job_field "$id" recoveries) != "" ]]
}

a_restarted_coordinator_resumes() {
  local id
  id=$(submit 6)
  wait_for 300 "$id to checkpoint" job_stepped "$id" || return 1
  docker restart --time 10 "$(container coordinator)" >/dev/null
  wait_for 120 "the coordinator to answer again" "$PETRA" list "${client_flags[@]}"
  succeeds "$id"
}

scaled_member_listed() {
  compose up -d --no-build --scale stage-1=3 "${SERVICES[@]}" >"$work/scale.log" 2>&1 ||
    { cat "$work/scale.log" >&2; return 1; }
  wait_for 120 "4 servers" servers_registered 4
}

# --- Prometheus ---------------------------------------------------------
PROM=http://127.0.0.1:$PROMETHEUS_PORT
targets_up() {
  curl -fsS "$PROM/api/v1/targets" | python3 -c '
import json, sys
t = json.load(sys.stdin)["data"]["activeTargets"]
sys.exit(0 if t and all(x["health"] == "up" for x in t) else 1)'
}

# Every query of the Grafana dashboard and every alert rule's expression
# (its comparisons made "bool", so that it returns its series whatever
# their values) must return a series, but those this run cannot feed, each
# named with the reason.
queries_answer() {
  python3 - "$PROM" "$SOURCE" <<'EOF'
import json, re, sys, urllib.parse, urllib.request
import yaml

prom, source = sys.argv[1], sys.argv[2]
# What this run (CPU, one job kind, no replicas, no alert firing) leaves
# empty, and why.
NOT_FED = {
    'ALERTS{': "no alert fires on a healthy fleet",
    'petra_job_train_tokens_total': "a language model's (the job is RevNet18)",
    'petra_stage_grad_cosine_similarity': "the end-to-end check's (off)",
    'petra_stage_grad_norm_ratio': "the end-to-end check's (off)",
    'deriv(petra_stage_allreduce_seconds': "replicas' (the job has none)",
}

def run(expr):
    url = prom + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(body)
    return body["data"]["result"]

def with_bool(expr):
    # A comparison outside {...} and quotes gets "bool".
    out, depth, quote = [], 0, None
    i = 0
    while i < len(expr):
        c = expr[i]
        if quote:
            out.append(c)
            if c == quote:
                quote = None
            i += 1
            continue
        if c in "\"'":
            quote = c
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif depth == 0:
            m = re.match(r"(==|!=|<=|>=|<|>)(?!\s*bool)", expr[i:])
            if m:
                out.append(m.group(1) + " bool")
                i += len(m.group(1))
                continue
        out.append(c)
        i += 1
    return "".join(out)

exprs = []
with open(source + "/deploy/grafana/dashboards/petra-fleet.json") as f:
    for panel in json.load(f)["panels"]:
        for t in panel.get("targets", []):
            if t.get("expr"):
                exprs.append(("dashboard: " + panel.get("title", "?"),
                              re.sub(r"\$\w+", ".*", t["expr"])))
with open(source + "/deploy/prometheus/alerts.yml") as f:
    for g in yaml.safe_load(f)["groups"]:
        for rule in g["rules"]:
            exprs.append(("alert " + rule["alert"], with_bool(rule["expr"])))
bad = 0
for where, expr in exprs:
    result = run(expr)
    why = next((w for k, w in NOT_FED.items() if k in expr), "")
    if result:
        continue
    if why:
        print("compose-live:      not fed here (%s): %s" % (why, where))
        continue
    print("compose-live:      no series: %s: %s" % (where, expr))
    bad += 1
print("compose-live:      %d queries, %d without a series" % (len(exprs), bad))
sys.exit(1 if bad else 0)
EOF
}

# --- the overrides ------------------------------------------------------
link_transport_is() {  # JOB TRANSPORT: the first stage's link chose it
  "$PETRA" status "${client_flags[@]}" --json "$1" | python3 -c '
import json, sys
s = json.load(sys.stdin)["stages"][0]
t = str(s.get("transportToNext", s.get("transport_to_next", "")))
sys.exit(0 if t.lower().endswith(sys.argv[1]) else 1)' "$2"
}

shm_moves_activations() {
  compose down --timeout 10 >/dev/null 2>&1
  compose_files=(-f docker-compose.yml -f docker-compose.shm.yml)
  up && wait_for 120 "2 servers" servers_registered 2 || return 1
  local id
  id=$(submit 1) && succeeds "$id" && link_transport_is "$id" shm
}

tls_runs_the_job() {
  compose down --timeout 10 >/dev/null 2>&1
  bash scripts/make-certs.sh "$work/tls" >/dev/null
  chown -R 10001:10001 "$work/tls"
  export PETRA_TLS_DIR=$work/tls
  compose_files=(-f docker-compose.yml -f docker-compose.tls.yml)
  client_flags=(--coordinator "$COORDINATOR" --tls-ca "$work/tls/client/ca.crt"
    --tls-cert "$work/tls/client/tls.crt" --tls-key "$work/tls/client/tls.key"
    --auth-token-file "$work/tls/token")
  up && wait_for 120 "2 servers" servers_registered 2 || return 1
  local id
  id=$(submit 1) && succeeds "$id"
}

records_survive_down_and_up() {
  local before after
  before=$("$PETRA" list "${client_flags[@]}" --json | python3 -c 'import json, sys; print(len(json.load(sys.stdin)["jobs"]))')
  compose down --timeout 10 >/dev/null 2>&1 && up || return 1
  wait_for 120 "the coordinator" "$PETRA" list "${client_flags[@]}"
  after=$("$PETRA" list "${client_flags[@]}" --json | python3 -c 'import json, sys; print(len(json.load(sys.stdin)["jobs"]))')
  ((before > 0 && after == before))
}

# --- the run ------------------------------------------------------------
t_start=$SECONDS
check "tools (docker.io, debootstrap, docker-compose)" install_tools
check "a private dockerd ($work)" start_daemon
check "the Debian base image (debootstrap, imported)" base_image
check "the images build ($( ((full)) && echo "full build" || echo "binaries of $bin"))" build_images
check "the image runs as uid 10001" runs_as_10001
check "docker-compose up: coordinator, 2 stage servers, Prometheus" up
check "every health check passes" wait_for 120 "healthy containers" healthy
check "the stage servers register" wait_for 120 "2 servers" servers_registered 2
check "petra submit from the host trains to SUCCEEDED; petra export" train_and_export
check "docker kill of a stage mid-job: the job recovers and finishes" a_killed_stage_recovers
check "a restarted coordinator container resumes its job" a_restarted_coordinator_resumes
check "Prometheus scrapes every target" wait_for 60 "every target up" targets_up
check "every dashboard query and alert expression answers" queries_answer
check "--scale stage-1=3: petra servers lists the new members" scaled_member_listed
check "docker-compose down and up keeps the job records" records_survive_down_and_up
check "the shm override moves activations over shared memory" shm_moves_activations
check "the TLS override runs a job over mutual TLS with the token" tls_runs_the_job
say "all checks passed in $((SECONDS - t_start)) s"
