#!/usr/bin/env bash
# Prints the Debian packages that hold the shared libraries the given
# programs load, one per line: the container image's runtime stage installs
# exactly these (deploy/docker/Dockerfile), so the list never goes stale.
# Exits 1, naming them, when a library belongs to no package (a libtorch of
# your own: the runtime image must carry it).
set -euo pipefail

if [[ $# -eq 0 || "$1" == --help || "$1" == -h ]]; then
  echo "Usage: scripts/runtime-packages.sh PROGRAM..."
  echo "Prints the Debian packages holding the shared libraries PROGRAMs load."
  [[ $# -eq 0 ]] && exit 2 || exit 0
fi

libs=()
for program in "$@"; do
  [[ -x "$program" ]] || { echo "runtime-packages: '$program' is not an executable file" >&2; exit 2; }
  # Only the libraries a program names itself (DT_NEEDED): apt brings in
  # what those depend on. ldd prints "name => /path (address)".
  needed=$(objdump -p "$program" | awk '$1 == "NEEDED" {print $2}')
  while read -r name path; do
    grep -qxF "$name" <<<"$needed" && libs+=("$path")
  done < <(ldd "$program" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
done
mapfile -t libs < <(printf '%s\n' "${libs[@]}" | sort -u)

# One dpkg query for all paths; with merged /usr, dpkg may know a library
# under /lib or /usr/lib only, so ask for both spellings.
candidates=()
for lib in "${libs[@]}"; do
  real=$(readlink -f "$lib")
  candidates+=("$lib" "$real" "${real#/usr}" "/usr${real#/usr}")
done
owners=$(dpkg-query -S "${candidates[@]}" 2>/dev/null || true)

declare -A packages=()
unowned=()
for lib in "${libs[@]}"; do
  real=$(readlink -f "$lib")
  owner=$(awk -F': ' -v a="$lib" -v b="$real" -v c="${real#/usr}" -v d="/usr${real#/usr}" \
    '$2 == a || $2 == b || $2 == c || $2 == d {print $1; exit}' <<<"$owners")
  if [[ -z "$owner" ]]; then
    unowned+=("$lib")
  else
    packages["${owner%%:*}"]=1
  fi
done

printf '%s\n' "${!packages[@]}" | sort
if ((${#unowned[@]})); then
  echo "runtime-packages: no Debian package holds: ${unowned[*]}" >&2
  exit 1
fi
