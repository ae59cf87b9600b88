#!/usr/bin/env bash
# Installs from apt the Debian packages `make test` and `make demo` need on
# this machine, once (a package already installed is not touched):
# PostgreSQL and pgBackRest for the tests that run a local server and the
# agent's archive tests, and, as root (the real node needs it), containerd,
# runc, the CNI plugins, nftables and the tools images/build.sh builds the
# images with. Not root and no password-less sudo: it names what is missing
# and goes on (the suites that need it say so).
set -euo pipefail

need=()
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need+=(postgresql)
pkgs=(pgbackrest)
[[ $(id -u) == 0 ]] && pkgs+=(containerd runc containernetworking-plugins nftables iptables conntrack mmdebstrap umoci skopeo)
if ! command -v dpkg-query >/dev/null || ! command -v apt-get >/dev/null; then
	echo "host-deps: not a Debian system: install ${pkgs[*]} (and PostgreSQL) yourself" >&2
	exit 0
fi
for pkg in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || need+=("$pkg")
done
((${#need[@]})) || exit 0

sudo=()
if [[ $(id -u) != 0 ]]; then
	if ! sudo -n true 2>/dev/null; then
		echo "host-deps: missing ${need[*]}: install them with: sudo apt-get install --no-install-recommends ${need[*]}" >&2
		exit 0
	fi
	sudo=(sudo -n)
fi
echo "host-deps: installing ${need[*]} from apt"
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}"
