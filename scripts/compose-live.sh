#!/usr/bin/env bash
# The deploy shape run as users run it: a private Docker daemon,
# the project's image, `docker-compose up`, and a job trained in the
# containers, watched by a real Prometheus.
#
#   bash scripts/compose-live.sh            # after the README's test command
#   bash scripts/compose-live.sh --full     # the image's own multi-stage build
#   bash scripts/compose-live.sh --quick    # CI's: no wait for an hour-long alert
#   bash scripts/compose-live.sh --keep     # keep the images (and the base
#                                           # image's tarball) for the next run
#
# It starts dockerd with its own socket, data root and exec root under one
# work folder (--work, default /var/tmp/petra-compose-live; the machine's
# own Docker, if any, is not touched), with the overlay2 storage driver
# (vfs where overlayfs cannot be mounted) and no iptables or default
# bridge. No registry is reachable: the Debian base image is made here with
# debootstrap (kept as a tarball beside the work folder with --keep) and
# tagged as the names the Dockerfiles expect. The project's image takes the
# binaries of `build/` by default (the Dockerfile's BINARIES=prebuilt: CI
# built them already), or builds them itself with --full (BINARIES=build,
# the image users build); every runtime line is the same. Prometheus runs
# from deploy/prometheus/Dockerfile (Debian's package); Grafana's image
# cannot be had here, so its service is left out and its provisioning is
# checked on disk by tests/deploy.
#
# --quick (CI's form) does not wait until Prometheus holds 5 minutes of a
# job's history, so the one alert that compares the last 5 minutes with the
# hour before them (PetraThroughputCollapsed) has no series to show and is
# named as not fed; the full form waits for it (about 3 minutes more).
#
# Each check prints one line, "compose-live: ok ..." or "compose-live: FAIL
# ...", and the first failure ends the run with exit 1. Whatever it
# started (daemon, containers, networks, volumes, images unless --keep, the
# work folder's mounts) is stopped and removed on exit, also when killed.
set -euo pipefail
cd "$(dirname "$0")/.."
SOURCE=$PWD

usage() {
  sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
  echo "Options: --full, --quick, --keep, --work DIR, --bin-dir DIR (default build/bin)"
}
full=0 keep=0 quick=0
work=${COMPOSE_LIVE_DIR:-/var/tmp/petra-compose-live}
bin=${BUILD_DIR:-build}/bin
while (($#)); do
  case $1 in
    --full) full=1 ;;
    --keep) keep=1 ;;
    --quick) quick=1 ;;
    --work) work=${2:?--work needs a folder}; shift ;;
    --bin-dir) bin=${2:?--bin-dir needs a folder}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "compose-live: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
# 77: skipped (CTest's SKIP_RETURN_CODE), not failed, on a machine that cannot run it.
[[ $EUID -eq 0 ]] || { echo "compose-live: skipped: needs root (it runs a Docker daemon)" >&2; exit 77; }
bin=$(cd "$bin" 2>/dev/null && pwd) ||
  { echo "compose-live: no build at ${BUILD_DIR:-build}/bin: run bash scripts/test.sh first" >&2; exit 2; }
for p in petra petra-coordinator petra-stage-server petra-health; do
  [[ -x $bin/$p ]] || { echo "compose-live: $bin/$p is missing: build first" >&2; exit 2; }
done
PETRA=$bin/petra
# Debian's docker.io client, whatever else PATH holds: a newer client (as a
# docker-ce-cli in /usr/local/bin) wants the buildx plugin for BuildKit,
# which Debian 12 does not package; 20.10's client builds with BuildKit
# itself.
docker() { /usr/bin/docker "$@"; }
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
# What a daemon of this work folder left (containerd, shims, proxies: found
# by their folders) and its mounts (volumes, netns), deepest first: after
# this run, and at the start, after a run killed too hard to clean up.
clear_leftovers() {
  local pid
  for pid in $(pgrep -f -- "$work/"); do
    [[ $pid == "$$" ]] || kill -KILL "$pid" 2>/dev/null
  done
  awk -v w="$work/" 'index($2, w) == 1 {print $2}' /proc/mounts | sort -r |
    xargs -r -n1 umount -l 2>/dev/null
  rm -rf "$work/exec" "$work/docker.sock" "$work/docker.pid"
}
cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  if [[ -n $daemon_pid ]] && docker info >/dev/null 2>&1; then
    compose down --volumes --remove-orphans --timeout 10 >/dev/null 2>&1
    local ids
    ids=$(docker ps -aq)
    [[ -z $ids ]] || docker rm -f $ids >/dev/null 2>&1
    docker network prune -f >/dev/null 2>&1
    docker volume prune -f >/dev/null 2>&1
    ((keep)) || docker image prune -af >/dev/null 2>&1
  fi
  if [[ -n $daemon_pid ]]; then
    kill -TERM "$daemon_pid" 2>/dev/null
    for _ in $(seq 60); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.5; done
  fi
  clear_leftovers
  rm -rf "$STAGED/bin" "$STAGED/runtime-packages.txt" "$work/tls"
  ((${#created[@]} == 0)) || rm -rf "${created[@]}"
  ((keep)) || rm -rf "$work" "$cache"
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
  clear_leftovers
  local path
  for path in "${outside[@]}"; do [[ -e $path ]] || created+=("$path"); done
  mkdir -p "$work/data" "$work/exec"
  # overlay2 where the kernel mounts overlayfs on the work folder's file
  # system (a container then costs no copy of the image), else vfs (a full
  # copy per container: slower, and works everywhere).
  local driver=vfs probe=$work/overlay-probe
  mkdir -p "$probe"/{lower,upper,work,merged}
  if mount -t overlay overlay -o "lowerdir=$probe/lower,upperdir=$probe/upper,workdir=$probe/work" \
    "$probe/merged" 2>/dev/null; then
    umount "$probe/merged"
    driver=overlay2
  fi
  rm -rf "$probe"
  say "     storage driver $driver"
  dockerd --host "unix://$work/docker.sock" --data-root "$work/data" \
    --exec-root "$work/exec" --pidfile "$work/docker.pid" \
    --storage-driver "$driver" --iptables=false --ip-masq=false --bridge=none \
    >"$work/dockerd.log" 2>&1 &
  daemon_pid=$!
  export DOCKER_HOST="unix://$work/docker.sock"
  wait_for 60 "dockerd to answer" docker info ||
    { tail -20 "$work/dockerd.log" >&2; return 1; }
}

# debian:bookworm and debian:bookworm-slim, made here: debootstrap's
# minbase from Debian's archive, imported (and with --keep, kept as a tarball).
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
    # The host's archive and its apt settings (a snapshot mirror may need
    # Check-Valid-Until off), so the image's apt-get reaches what the host's does.
    rm -f "$work/rootfs/etc/apt/sources.list"
    cp -a /etc/apt/sources.list.d/. "$work/rootfs/etc/apt/sources.list.d/" 2>/dev/null || true
    [[ ! -e /etc/apt/sources.list ]] || cp /etc/apt/sources.list "$work/rootfs/etc/apt/"
    grep -l '^Acquire::' /etc/apt/apt.conf.d/* 2>/dev/null |
      xargs -r cp -t "$work/rootfs/etc/apt/apt.conf.d/"
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

runs_as_10001() {  # the running servers' processes, not a fresh container
  local service uid
  for service in coordinator stage-0 stage-1; do
    # The owner of each /proc/PID is that process's user.
    uid=$(docker exec "$(container "$service")" sh -c 'stat -Lc %u /proc/[0-9]*' | sort -u)
    [[ $uid == 10001 ]] || { say "     $service runs as uid $uid" >&2; return 1; }
  done
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

# Epochs of 8 micro-batches: each job's CPU is what the machine's other
# work (CI's suite beside it) does not get.
SHORT_JOB=(--arch revnet18 --width 0.125 --dataset synthetic --stages 2
  --micro-batch 16 --train-limit 128 --test-limit 32)
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
  first_job_at=$SECONDS
  id=$(submit 2) && succeeds "$id" &&
    "$PETRA" export "${client_flags[@]}" "$id" --output "$work/model.pt" >/dev/null &&
    [[ -s $work/model.pt ]] || return 1
  # Each container has its own 64 MiB /dev/shm here: the link must not be
  # shared memory (the shm override's check below is then a real change).
  ! link_transport_is "$id" shm
}

container() { compose ps -q "$1" | head -1; }

recovered() {  # JOB: running again after at least one recovery
  "$PETRA" status "${client_flags[@]}" --json "$1" | python3 -c '
import json, sys
j = json.load(sys.stdin)
sys.exit(0 if j.get("recoveries") and j.get("state") == "JOB_STATE_RUNNING" else 1)'
}

# One job takes both blows in turn: a stage killed mid-job, then the
# coordinator restarted mid-job; it must recover from the first, resume
# after the second, and finish.
faulted_job=""
a_killed_stage_recovers() {
  faulted_job=$(submit 12) || return 1
  wait_for 300 "$faulted_job to checkpoint" job_stepped "$faulted_job" || return 1
  docker kill "$(container stage-1)" >/dev/null
  # As an orchestrator's restart would (docker kill is a manual stop).
  docker start "$(container stage-1)" >/dev/null
  wait_for 300 "$faulted_job to recover" recovered "$faulted_job"
}

a_restarted_coordinator_resumes() {
  job_state_is "$faulted_job" JOB_STATE_RUNNING ||
    { say "     $faulted_job finished before the coordinator's restart: give it more epochs" >&2; return 1; }
  docker restart --time 10 "$(container coordinator)" >/dev/null
  wait_for 120 "the coordinator to answer again" "$PETRA" list "${client_flags[@]}"
  succeeds "$faulted_job"
}

scaled_member_listed() {
  compose up -d --no-build --scale stage-1=3 "${SERVICES[@]}" >"$work/scale.log" 2>&1 ||
    { cat "$work/scale.log" >&2; return 1; }
  wait_for 120 "4 servers" servers_registered 4
}

# --- Prometheus ---------------------------------------------------------
PROM=http://127.0.0.1:$PROMETHEUS_PORT
targets_up() {  # N: N targets, every one up
  curl -fsS "$PROM/api/v1/targets" | python3 -c '
import json, sys
t = json.load(sys.stdin)["data"]["activeTargets"]
sys.exit(0 if len(t) == int(sys.argv[1]) and all(x["health"] == "up" for x in t) else 1)' "$1"
}

# The queries run while a job trains, once Prometheus holds more than
# PetraThroughputCollapsed's 5 minutes offset of the first job's samples
# (its expression compares the last 5 minutes with the hour before them).
first_job_at=""
queries_during_a_job() {
  local id wait
  # With both gradient checks, so that their panels have series too.
  id=$(submit 200 --grad-diagnostics 5 --e2e-diagnostics 5) || return 1
  wait_for 300 "$id to checkpoint" job_stepped "$id" || return 1
  wait=15  # three scrapes of the running job
  if ((!quick && first_job_at + 330 - SECONDS > wait)); then
    wait=$((first_job_at + 330 - SECONDS))
    say "     waiting ${wait} s for 5 minutes of history and the running job's scrapes"
  fi
  sleep "$wait"
  job_state_is "$id" JOB_STATE_RUNNING || { say "     $id is no longer running" >&2; return 1; }
  queries_answer || return 1
  "$PETRA" cancel "${client_flags[@]}" "$id" >/dev/null &&
    wait_for 60 "$id to cancel" job_state_is "$id" JOB_STATE_CANCELLED
}

# Every query of the Grafana dashboard and every alert rule's expression
# (its comparisons made "bool", so that it returns its series whatever
# their values) must return a series, but those this run cannot feed, each
# named with the reason.
queries_answer() {
  python3 - "$PROM" "$SOURCE" "$quick" <<'EOF'
import json, re, sys, urllib.parse, urllib.request
import yaml

prom, source, quick = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
# What this run (CPU, one job kind, no replicas, no alert firing) leaves
# empty, and why.
NOT_FED = {
    'ALERTS{': "no alert fires on a healthy fleet",
    'petra_job_train_tokens_total': "a language model's (the job is RevNet18)",
    'deriv(petra_stage_allreduce_seconds': "replicas' (the job has none)",
}
if quick:
    NOT_FED['[1h] offset 5m'] = ("needs 5 minutes of history, which --quick "
                                 "does not wait for")

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

def panels(within):  # rows hold panels of their own
    for panel in within:
        yield panel
        yield from panels(panel.get("panels", []))

exprs = []
with open(source + "/deploy/grafana/dashboards/petra-fleet.json") as f:
    for panel in panels(json.load(f)["panels"]):
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

job_count() {
  "$PETRA" list "${client_flags[@]}" --json |
    python3 -c 'import json, sys; print(len(json.load(sys.stdin)["jobs"]))'
}

# docker-compose down, then up again with both overrides (each new set of
# containers costs a start-up; with vfs also a copy of the image): the
# coordinator's job records are still there (named volume), and a job runs
# over mutual TLS with the token, its activations in shared memory.
jobs_before_down=""
down_then_up_with_shm_and_tls() {
  jobs_before_down=$(job_count) || return 1
  compose down --timeout 10 >/dev/null 2>&1
  bash scripts/make-certs.sh "$work/tls" >/dev/null
  chown -R 10001:10001 "$work/tls"
  export PETRA_TLS_DIR=$work/tls
  compose_files=(-f docker-compose.yml -f docker-compose.shm.yml -f docker-compose.tls.yml)
  client_flags=(--coordinator "$COORDINATOR" --tls-ca "$work/tls/client/ca.crt"
    --tls-cert "$work/tls/client/tls.crt" --tls-key "$work/tls/client/tls.key"
    --auth-token-file "$work/tls/token")
  up && wait_for 120 "2 servers" servers_registered 2 &&
    wait_for 120 "healthy containers (TLS health checks)" healthy
}

records_survive() {
  local after
  after=$(job_count) || return 1
  ((jobs_before_down > 0 && after == jobs_before_down)) ||
    { say "     $jobs_before_down job records before down, $after after" >&2; return 1; }
}

tls_refuses_and_shm_carries() {
  # A plaintext client, and one with certificates but no token, are refused.
  if "$PETRA" list --coordinator "$COORDINATOR" >/dev/null 2>&1 ||
    "$PETRA" list "${client_flags[@]:0:8}" >/dev/null 2>&1; then
    say "     the coordinator answered a client without TLS or without the token" >&2
    return 1
  fi
  local id
  id=$(submit 1) && succeeds "$id" && link_transport_is "$id" shm
}

# --- the run ------------------------------------------------------------
t_start=$SECONDS
check "tools (docker.io, debootstrap, docker-compose)" install_tools
check "a private dockerd ($work)" start_daemon
check "the Debian base image (debootstrap, imported)" base_image
check "the images build ($( ((full)) && echo "full build" || echo "binaries of $bin"))" build_images
check "docker-compose up: coordinator, 2 stage servers, Prometheus" up
check "every health check passes" wait_for 120 "healthy containers" healthy
check "every petra process runs as uid 10001" runs_as_10001
check "the stage servers register" wait_for 120 "2 servers" servers_registered 2
check "petra submit from the host trains to SUCCEEDED; petra export" train_and_export
check "docker kill of a stage mid-job: the job recovers" a_killed_stage_recovers
check "a restarted coordinator container resumes that job, which finishes" a_restarted_coordinator_resumes
check "--scale stage-1=3: petra servers lists the new members" scaled_member_listed
check "Prometheus scrapes every target (coordinator, 4 stage servers)" wait_for 90 "5 targets up" targets_up 5
check "every dashboard query and alert expression answers during a job" queries_during_a_job
check "docker-compose down, then up with the shm and TLS overrides" down_then_up_with_shm_and_tls
check "the job records survive down and up (named volume)" records_survive
check "TLS: a client without certificates or token is refused; a job runs with them, activations in shared memory" tls_refuses_and_shm_carries
say "all checks passed in $((SECONDS - t_start)) s"
