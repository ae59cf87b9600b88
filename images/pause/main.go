// Command pause is the sandbox ("infra") container of every pod on the local
// cluster's real node: it holds the pod's namespaces, reaps zombies (it is
// PID 1 of the pod when the PID namespace is shared) and exits on SIGINT or
// SIGTERM. It stands in for registry.k8s.io/pause, which no test may pull;
// images/build.sh builds it into the image localhost/dbkeeper/pause.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every child that has exited, without blocking.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
