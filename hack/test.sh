#!/usr/bin/env bash
# The go test runs of `make test`, with the race detector. The real node is
# the long pole: the packages that start one (the harness's own tests in
# test/framework/cluster, the suite in test/realnode), then the failover
# fault injection, run one after the other, beside every other package.
# One at a time because a machine runs one real node (a lock that a second
# one waits for, a limited time); the fault injection last so that none of
# the node's other tests loads the machine while it measures failover times.
#
#   hack/test.sh     (TEST_TIMEOUT, GO_TEST_FLAGS as in the Makefile)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

read -ra extra <<<"${GO_TEST_FLAGS:-}"
flags=(-race -count=1 -timeout "${TEST_TIMEOUT:-45m}" "${extra[@]}")

nodes=(./test/framework/cluster ./test/realnode)
node() {
	go test -p 1 "${flags[@]}" "${nodes[@]}" &&
		go test -tags failover "${flags[@]}" -run '^TestFailover' ./test/realnode
}
node &
node_pid=$!
# Ctrl-C reaches both (one process group); an early exit must not leave
# the node's tests running.
trap 'kill "$node_pid" 2>/dev/null' EXIT

# One package at a time beside the node's chain: at most two test binaries
# run at once, as with go test's default -p 2 on this 2-core machine. With
# two of them beside the node, the integration suite's kube-apiserver did not
# restart within its timeout (TestControlPlaneRestart, a warm run of
# 2026-12-05).
mapfile -t others < <(go list ./... | grep -v -e '/test/realnode$' -e '/test/framework/cluster$')
go test -p 1 "${flags[@]}" "${others[@]}"
rest=$?
wait "$node_pid"
node_rc=$?
trap - EXIT
if ((rest != 0 || node_rc != 0)); then
	echo "FAIL: go test of the other packages exited $rest, of the real node $node_rc" >&2
	exit 1
fi
