#!/usr/bin/env bash
# The dependency table of docs/ARCHITECTURE.md ("Folders"), checked on the
# sources:
#  - each folder's code includes only the project folders its row names
#    (read from the table; its own folder and services/base are always
#    allowed), and every folder has a row.
#    Tests (*_test.cc, *_test_support.*) may also use what sits beside them
#    in the table, to build their inputs;
#  - domain code (services/model, engine, data, job, schedule, catalog,
#    sim) includes no gRPC header, and the no-torch folders no torch;
#  - no Python module of python/petra or bench/ imports one that imports it
#    back (no import cycle);
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

# What each folder may include of the project: read from the rows of
# docs/ARCHITECTURE.md's table (one source), the folders in code font
# before the first semicolon of the "depends on" cell.
declare -A FLOORS=()
while IFS='=' read -r folder deps; do
  FLOORS[$folder]=$deps
done < <(python3 - docs/ARCHITECTURE.md <<'EOF'
import os, re, sys
text = open(sys.argv[1]).read()
top = {"stage_server", "coordinator", "client"}
for row in re.finditer(r"^\| `([a-z_/]+?)/?` \|.*\| ([^|]*) \|$", text, re.M):
    folder, cell = row.group(1), row.group(2)
    if not (folder.startswith("services/") or folder in top):
        continue
    deps = []
    for name in re.findall(r"`([a-z_]+)`", cell.split(";")[0]):
        path = name if name in top else "services/" + name
        if os.path.isdir(path):
            deps.append(path)
    print(folder + "=" + " ".join(deps))
EOF
)
is_test() { [[ $1 =~ (_test\.cc|_test_support\.(h|cc)|_gpu_test\.cc)$ ]]; }
for folder in "${!FLOORS[@]}"; do
  allowed=" $folder services/base ${FLOORS[$folder]} "
  report "$folder includes a folder its row does not name" < <(
    for file in "$folder"/*.cc "$folder"/*.h; do
      [[ -e $file ]] || continue
      { grep -HnoE '#include "(services/[a-z_]+|stage_server|coordinator|client)/' \
        "$file" || true; } | while IFS= read -r hit; do
          dep=${hit##*#include \"}
          dep=${dep%/}
          [[ $allowed == *" $dep "* ]] && continue
          # A test may build its inputs with a folder beside its own.
          if is_test "$file" && [[ $dep != client && $dep != coordinator &&
            $dep != stage_server ]]; then
            continue
          fi
          echo "$hit"
        done
    done)
done
report "a folder the table does not know" < <(
  for folder in services/*/ stage_server/ coordinator/ client/; do
    folder=${folder%/}
    [[ -n ${FLOORS[$folder]+x} ]] || echo "$folder"
  done)

report "domain code includes a gRPC header" < <(
  grep -nE '#include [<"](grpcpp/|grpc/|[^">]*\.grpc\.pb\.h)' \
    services/model/* services/engine/* services/data/* services/job/* \
    services/schedule/* services/catalog/* services/sim/* || true)
report "a no-torch folder includes torch" < <(
  grep -nE '#include [<"](torch/|ATen/|c10/|services/torch_)' \
    services/base/* services/catalog/* services/schedule/* services/job/* \
    services/sim/* services/metrics/* || true)

report "a Python import cycle" < <(python3 - <<'EOF'
import ast, os, sys

def cycles(folder, package):
    """Import cycles among the modules of `folder` (a package's relative
    imports, or a folder of scripts importing each other by name)."""
    names = {f[:-3] for f in os.listdir(folder) if f.endswith(".py")}
    graph = {}
    for name in names:
        tree = ast.parse(open(os.path.join(folder, name + ".py")).read())
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if package and node.level == 1:
                    if node.module:
                        deps.add(node.module.split(".")[0])
                    else:
                        deps |= {a.name for a in node.names}
                elif node.module and node.module.split(".")[0] == package:
                    parts = node.module.split(".")
                    deps.add(parts[1] if len(parts) > 1 else "")
                elif not package and node.level == 0 and node.module in names:
                    deps.add(node.module)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    top = a.name.split(".")
                    if not package and top[0] in names:
                        deps.add(top[0])
                    elif package and top[0] == package and len(top) > 1:
                        deps.add(top[1])
        graph[name] = deps & names - {name}
    found = set()
    def walk(node, path):
        for dep in graph[node]:
            if dep in path:
                loop = path[path.index(dep):] + [dep]
                found.add(" -> ".join(loop))
            elif len(path) < len(graph):
                walk(dep, path + [dep])
    for name in sorted(graph):
        walk(name, [name])
    return sorted(found)

for folder, package in (("python/petra", "petra"), ("bench", None)):
    for loop in cycles(folder, package):
        print(f"{folder}: {loop}")
EOF
)
report "std::filesystem::remove_all (use petra::base::RemoveTree)" < <(
  grep -rnE --include='*.cc' --include='*.h' '(filesystem|fs)::remove_all\(' \
    services client coordinator stage_server bench tests || true)
((bad == 0)) && echo "check_layers: the include rules hold"
exit "$bad"
