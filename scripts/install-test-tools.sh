#!/usr/bin/env bash
# Installs the deployment tests' tools that are not Debian packages on this
# machine's PATH, into the repository (ignored by git):
#  * Debian's kubectl (package kubernetes-client) unpacked into
#    .tools/kubernetes-client: installing the package can clash with a kubectl
#    from elsewhere (Google Cloud SDK's owns /usr/bin/kubectl), and the tests
#    must render with Debian's.
#  * npm's kubernetes-models, pinned by tests/deploy/package-lock.json, into
#    tests/deploy/node_modules.
# Idempotent: present tools are kept. scripts/test.sh runs it.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
  --help|-h)
    echo "Usage: scripts/install-test-tools.sh"
    echo "Installs Debian's kubectl into .tools/ and the npm validators into tests/deploy/."
    exit 0 ;;
  "") ;;
  *) echo "install-test-tools.sh: unknown argument '$1'" >&2; exit 2 ;;
esac

KUBECTL=.tools/kubernetes-client/usr/bin/kubectl
if [[ ! -x "$KUBECTL" ]]; then
  echo "install-test-tools: unpacking Debian's kubernetes-client into .tools/"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  chmod 755 "$tmp"  # apt's download user must be able to write there
  if ! (cd "$tmp" && apt-get download -q kubernetes-client >/dev/null 2>&1); then
    # The package lists may be missing (a fresh or cleaned machine).
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
    $SUDO apt-get update -q
    (cd "$tmp" && apt-get download -q kubernetes-client)
  fi
  mkdir -p .tools/kubernetes-client
  dpkg-deb -x "$tmp"/kubernetes-client_*.deb .tools/kubernetes-client
fi
"$KUBECTL" version --client >/dev/null

# npm ci reinstalls from the lock file; skip it when that is already done.
if [[ ! -f tests/deploy/node_modules/.package-lock.json ||
      tests/deploy/package-lock.json -nt tests/deploy/node_modules/.package-lock.json ]]; then
  echo "install-test-tools: npm ci in tests/deploy"
  npm ci --prefix tests/deploy --no-audit --no-fund --loglevel=error
fi
echo "install-test-tools: done"
