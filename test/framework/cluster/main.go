package cluster

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
)

// RunTests is the body of a TestMain whose tests share one local cluster:
// it starts the cluster (printing its progress), hands it to use, runs the
// tests, stops the cluster and exits with the tests' code. suite prefixes
// its error messages.
func RunTests(m *testing.M, suite string, use func(*Cluster)) {
	ctrl.SetLogger(logr.Discard())
	c, err := Start(context.Background(), Options{Progress: os.Stdout})
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", suite, err)
		os.Exit(1)
	}
	use(c)
	code := m.Run()
	if err := c.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: stopping the cluster: %v\n", suite, err)
		code = max(code, 1)
	}
	os.Exit(code)
}
