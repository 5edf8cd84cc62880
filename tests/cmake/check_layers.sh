#!/usr/bin/env bash
# The include rules of DESIGN.md's layout, checked on the sources:
#  - domain code (services/model, engine, data, job) includes no gRPC header;
#  - services/model includes nothing of services/job, and services/job only
#    the model facts it validates against (architecture_catalog.h and
#    device_name.h, the petra_model_facts library): no loop between them
#    (tests of services/model may build job specs);
#  - no C++ source calls std::filesystem::remove_all: a wheel libtorch's
#    copy of it crashed every fleet run on the GPU hosts
#    (services/base/paths.h, RemoveTree).
# Prints each offending line and exits 1; exits 0 when there is none.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root"
bad=0
report() {  # report RULE, then grep's lines on stdin
  local rule=$1 lines
  lines=$(cat)
  if [[ -n "$lines" ]]; then
    echo "check_layers: $rule:"
    sed 's/^/  /' <<<"$lines"
    bad=1
  fi
}
# (report reads a process substitution, not a pipe: a pipe's last command
# runs in a subshell, and its `bad=1` would be lost.)
report "domain code includes a gRPC header" < <(
  grep -nE '#include [<"](grpcpp/|grpc/|[^">]*\.grpc\.pb\.h)' \
    services/model/* services/engine/* services/data/* services/job/* || true)
# Tests may build job specs; the library may not.
report "services/model includes services/job" < <(
  grep -nE '#include "services/job/' services/model/* |
    grep -v '_test\.cc:' || true)
report "services/job includes more of services/model than its facts" < <(
  grep -nE '#include "services/model/' services/job/* |
    grep -vE 'services/model/(architecture_catalog|device_name)\.h"' || true)
report "std::filesystem::remove_all (use petra::base::RemoveTree)" < <(
  grep -rnE --include='*.cc' --include='*.h' '(filesystem|fs)::remove_all\(' \
    services client coordinator stage_server bench tests || true)
((bad == 0)) && echo "check_layers: the include rules hold"
exit "$bad"
