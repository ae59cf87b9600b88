#!/usr/bin/env bash
# Builds the test control plane, the real node's binaries (kubelet,
# kube-proxy, CoreDNS, crictl), the S3 store (versitygw) and the code
# generators from the Go module proxy, at the versions pinned by the go.mod
# files beside this script, into a per-user cache outside the clone; and
# Prometheus' rule checker (promtool) from Debian's prometheus package
# (downloaded and unpacked, not installed: the package would start a
# Prometheus server). A binary already there at its version is not made
# again, so only the first run on a machine pays (42 minutes on 2 cores with
# the images building beside it, before CoreDNS was trimmed).
#
#   test/tools/install.sh            build what is missing, print the bin dir
#   test/tools/install.sh --print    print the bin dir only
#
# The bin dir holds one symlink per tool (etcd, kube-apiserver, kubectl, ...),
# pointing at the versioned binary; it is what KUBEBUILDER_ASSETS names.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${DBKEEPER_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dbkeeper/tools}
bin=$cache/bin

if [[ ${1:-} == --print ]]; then
	echo "$bin"
	exit 0
fi

# module-dir  binary-name  package  version-module
tools=(
	"etcd            etcd                     go.etcd.io/etcd/server/v3                     go.etcd.io/etcd/server/v3"
	"kubernetes      kube-apiserver           k8s.io/kubernetes/cmd/kube-apiserver          k8s.io/kubernetes"
	"kubernetes      kube-controller-manager  k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes"
	"kubernetes      kube-scheduler           k8s.io/kubernetes/cmd/kube-scheduler          k8s.io/kubernetes"
	"kubernetes      kubectl                  k8s.io/kubernetes/cmd/kubectl                 k8s.io/kubernetes"
	"kubernetes      kubelet                  k8s.io/kubernetes/cmd/kubelet                 k8s.io/kubernetes"
	"kubernetes      kube-proxy               k8s.io/kubernetes/cmd/kube-proxy              k8s.io/kubernetes"
	"coredns         coredns                  .                                             github.com/coredns/coredns"
	"crictl          crictl                   sigs.k8s.io/cri-tools/cmd/crictl              sigs.k8s.io/cri-tools"
	"kwok            kwok                     sigs.k8s.io/kwok/cmd/kwok                     sigs.k8s.io/kwok"
	"helm            helm                     helm.sh/helm/v3/cmd/helm                      helm.sh/helm/v3"
	"controller-gen  controller-gen           sigs.k8s.io/controller-tools/cmd/controller-gen sigs.k8s.io/controller-tools"
	"crd-ref-docs    crd-ref-docs             github.com/elastic/crd-ref-docs               github.com/elastic/crd-ref-docs"
	"helm-docs       helm-docs                github.com/norwoodj/helm-docs/cmd/helm-docs   github.com/norwoodj/helm-docs"
	"versitygw       versitygw                github.com/versity/versitygw/cmd/versitygw    github.com/versity/versitygw"
)

# build LINE...: builds the tools of these lines of $tools that are missing,
# one after another, and links them into $bin.
build() {
	local line dir name pkg mod version target start ldflags minor
	for line in "$@"; do
		read -r dir name pkg mod <<<"$line"
		version=$(cd "$here/$dir" && go list -m -f '{{.Version}}' "$mod")
		# a main of our own (CoreDNS's) is part of what the binary is
		if [[ $pkg == . ]]; then
			version+=-$(cat "$here/$dir"/*.go | sha256sum | cut -c1-8)
		fi
		target=$cache/$name-$version
		if [[ ! -x $target ]]; then
			echo "building $name $version (first run on this machine; cached in $cache)" >&2
			start=$SECONDS
			ldflags='-s -w'
			if [[ $mod == k8s.io/kubernetes ]]; then
				# the version a node reports (nodeInfo.kubeletVersion) and
				# `kubectl version` prints; unstamped it is v0.0.0-master
				minor=${version#v1.} minor=${minor%%.*}
				ldflags+=" -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
			fi
			# a file of this run's own: another make on the machine may be
			# building the same tool at once
			(cd "$here/$dir" && go build -trimpath -ldflags="$ldflags" -o "$target.tmp.$$" "$pkg")
			mv "$target.tmp.$$" "$target"
			echo "built $name $version in $((SECONDS - start))s" >&2
		fi
		ln -sfn "../$name-$version" "$bin/$name"
	done
}

# Kubernetes' six binaries share most of their packages and build one after
# another; the other tools build beside them, so that one build's link (a
# single core) and module downloads overlap the other's compiling.
kube=() other=()
for line in "${tools[@]}"; do
	if [[ $line == kubernetes* ]]; then kube+=("$line"); else other+=("$line"); fi
done
mkdir -p "$bin"
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
build "${kube[@]}" &
kube_pid=$!
build "${other[@]}"
wait "$kube_pid"
trap - EXIT

# kwok's ready-made Stages (node lifecycle, pods becoming Ready, deletion)
# come from the kwok module itself, at the version built above; the local
# cluster (test/framework/cluster) reads them from $bin/kwok-stages.
kwok_version=$(cd "$here/kwok" && go list -m -f '{{.Version}}' sigs.k8s.io/kwok)
stages=$cache/kwok-stages-$kwok_version
if [[ ! -d $stages ]]; then
	src=$(cd "$here/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage
	mkdir -p "$stages.tmp"
	cp "$src/node/fast/node-initialize.yaml" "$src/node/heartbeat/node-heartbeat.yaml" \
		"$src/pod/fast/pod-ready.yaml" "$src/pod/fast/pod-delete.yaml" "$stages.tmp/"
	chmod u+w "$stages.tmp"/*
	mv "$stages.tmp" "$stages"
fi
ln -sfn "../kwok-stages-$kwok_version" "$bin/kwok-stages"

# promtool and the Prometheus server from the Debian package of the
# machine's release (bookworm: Prometheus 2.42), unpacked from the .deb apt
# downloads (a second, 20 MB; building them from the module proxy took 4 to
# 19 minutes on 2 cores), not installed (the package would start a server
# at boot). The server is what the alert tests run on loopback against real
# agents. Not on a system without apt: the monitoring tests say so.
if command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null; then
	prom_version=$(apt-cache policy prometheus 2>/dev/null | awk '/Candidate:/ {print $2}')
	if [[ -n $prom_version && $prom_version != "(none)" ]]; then
		suffix=${prom_version//[:+~]/_}
		if [[ ! -x $cache/promtool-$suffix || ! -x $cache/prometheus-$suffix ]]; then
			deb=$(mktemp -d)
			(cd "$deb" && apt-get download -qq "prometheus=$prom_version" 2>/dev/null)
			dpkg-deb -x "$deb"/prometheus_*.deb "$deb/x"
			for name in promtool prometheus; do
				cp "$deb/x/usr/bin/$name" "$cache/$name-$suffix.tmp.$$"
				mv "$cache/$name-$suffix.tmp.$$" "$cache/$name-$suffix"
			done
			rm -rf "$deb"
			echo "unpacked promtool and prometheus $prom_version from Debian's prometheus package" >&2
		fi
		ln -sfn "../promtool-$suffix" "$bin/promtool"
		ln -sfn "../prometheus-$suffix" "$bin/prometheus"
	fi
fi
echo "$bin"
