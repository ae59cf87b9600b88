// Package bench measures the operator on the local cluster of
// test/framework/cluster (kube-apiserver, etcd, kube-controller-manager,
// kube-scheduler, kwok): convergence time of N Databases as a ratio to a
// plain client creating the same objects in the same run, API writes per
// Database against the design floor, reads that bypass the cache, writes
// while idle, memory, and reconcile latency. `make bench` runs it and writes
// docs/benchmarks.md and docs/convergence.png (drawn by test/bench/plot)
// from its own numbers.
package bench
