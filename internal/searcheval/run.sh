#!/usr/bin/env bash
# Runs micra's search-quality evaluation on a fresh machine: installs what it
# needs with apt when it is missing (PostgreSQL 15 for the full-text
# reference, the manuals that are the corpora), then runs
#   go run ./cmd/micra bench search "$@"
# from the repository's root. Needs root for apt (as .ci/run); the
# PostgreSQL server it starts runs as the postgres user.
#
# Usage: internal/searcheval/run.sh [--corpus django,octave,zsh,python] [--json] ...
set -euo pipefail
cd "$(dirname "$0")/../.."

pkgs=()
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then pkgs+=(postgresql-15); fi
corpora="django,octave"
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
	case "${args[$i]}" in
	--corpus=*) corpora="${args[$i]#--corpus=}" ;;
	--corpus) corpora="${args[$((i + 1))]:-}" ;;
	esac
done
IFS=, read -ra names <<<"$corpora"
for n in "${names[@]}"; do
	case "$n" in
	django) [ -f /usr/share/doc/python-django-doc/html/index.html ] || pkgs+=(python-django-doc) ;;
	octave) [ -f /usr/share/doc/octave/octave.html/index.html ] || pkgs+=(octave-doc) ;;
	zsh) [ -f /usr/share/doc/zsh-doc/html/index.html ] || pkgs+=(zsh-doc) ;;
	python) [ -f /usr/share/doc/python3.11/html/index.html ] || pkgs+=(python3.11-doc) ;;
	esac
done
if [ ${#pkgs[@]} -gt 0 ]; then
	echo "installing ${pkgs[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
fi
exec go run ./cmd/micra bench search "$@"
