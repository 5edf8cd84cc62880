#!/usr/bin/env bash
# CI: a benchmark that fails loses only itself. Runs `scripts/bench.sh
# --smoke memory transport` over a copy of the build's bin directory whose
# petra_bench_memory fails for i-RevNet18 only, and expects: the memory
# section keeps RevNet18's table and marks i-RevNet18's command failed with
# the end of its stderr, the transport section after it is written whole,
# and the script exits 1 naming the command. Then, with BENCH_DEADLINE
# already passed, that nothing runs and the section says why.
# Usage: failure_test.sh BUILD_DIR
set -euo pipefail
build_dir=$(cd "$1" && pwd)
cd "$(dirname "$0")/.."
scratch=$(mktemp -d -t petra-bench-failure-XXXXXX)
trap 'rm -rf "$scratch"' EXIT
mkdir "$scratch/bin"
for f in "$build_dir"/bin/*; do ln -s "$f" "$scratch/bin/"; done
rm "$scratch/bin/petra_bench_memory"
cat > "$scratch/bin/petra_bench_memory" <<STUB
#!/usr/bin/env bash
case " \$* " in
  *" irevnet18 "*) echo "stub: failing on purpose" >&2; exit 3 ;;
esac
exec "$build_dir/bin/petra_bench_memory" "\$@"
STUB
chmod +x "$scratch/bin/petra_bench_memory"

fail() { echo "failure_test: $*" >&2; cat "$scratch/doc.md" >&2; exit 1; }
set +e
BUILD_DIR=$scratch PETRA_SKIP_BUILD=1 BENCH_DOC=$scratch/doc.md \
  bash scripts/bench.sh --smoke memory transport 2> "$scratch/err.txt"
rc=$?
set -e
cat "$scratch/err.txt" >&2
((rc == 1)) || fail "bench.sh exited $rc, not 1"
grep -q '^| PETRA (neither) |' "$scratch/doc.md" ||
  fail "RevNet18's memory table is missing"
grep -q '^\*\*Failed\*\* (exit 3)' "$scratch/doc.md" ||
  fail "the failed command is not marked"
grep -q '^stub: failing on purpose$' "$scratch/doc.md" ||
  fail "the failed command's stderr is not quoted"
grep -Eq '^[|] host to host over gRPC on loopback [|]' "$scratch/doc.md" ||
  fail "the transport section after the failure is missing"
grep -q 'memory: failed (exit 3): .*irevnet18' "$scratch/err.txt" ||
  fail "the script does not name the failed command at the end"

rm "$scratch/doc.md"
set +e
BUILD_DIR=$scratch PETRA_SKIP_BUILD=1 BENCH_DOC=$scratch/doc.md \
  BENCH_DEADLINE=1 bash scripts/bench.sh --smoke transport
rc=$?
set -e
((rc == 1)) || fail "with the deadline passed bench.sh exited $rc, not 1"
grep -q '^Not run: the time budget' "$scratch/doc.md" ||
  fail "a command not run for lack of time is not marked"
echo "failure_test: ok"
