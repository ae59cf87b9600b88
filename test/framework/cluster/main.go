package cluster

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
)

// RunTests is the body of a TestMain whose tests share one local cluster:
// it starts the cluster (printing its progress), hands it to use, runs the
// tests, stops the cluster and exits with the tests' code. suite prefixes
// its error messages.
func RunTests(m *testing.M, suite string, use func(*Cluster)) {
	RunTestsWith(m, suite, Options{}, use)
}

// RunTestsWith is RunTests with a cluster started with o (its Progress goes
// to stdout): Options{Node: realnode.New(...)} for a suite on a real node,
// which skips the whole package, with the reason, when a real node cannot
// run here (and fails instead when DBKEEPER_REQUIRE_REAL_NODE=1).
func RunTestsWith(m *testing.M, suite string, o Options, use func(*Cluster)) {
	ctrl.SetLogger(logr.Discard())
	if o.Node != nil {
		if err := o.Node.Supported(); err != nil {
			if os.Getenv(RequireRealNodeEnv) == "1" {
				fmt.Fprintf(os.Stderr, "%s: "+RequireRealNodeEnv+"=1 but a real node cannot run here: %v\n", suite, err)
				os.Exit(1)
			}
			fmt.Printf("%s: skipped: a real node cannot run here: %v\n", suite, err)
			os.Exit(0)
		}
	}
	o.Progress = os.Stdout
	// Ctrl-C or a SIGTERM stops the cluster (and undoes a real node's host
	// changes) before the process exits, instead of leaving that to the
	// next Start.
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	c, err := Start(ctx, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", suite, err)
		os.Exit(1)
	}
	var once sync.Once
	stop := func() (err error) {
		once.Do(func() { err = c.Stop() })
		return err
	}
	go func() {
		<-ctx.Done() // only a signal: cancel is never called before os.Exit
		fmt.Fprintf(os.Stderr, "%s: interrupted: stopping the cluster\n", suite)
		if err := stop(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: stopping the cluster: %v\n", suite, err)
		}
		os.Exit(1)
	}()
	use(c)
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: stopping the cluster: %v\n", suite, err)
		code = max(code, 1)
	}
	os.Exit(code)
}

// RequireRealNodeEnv set to 1 makes the real-node tests fail, instead of
// skip, when a real node cannot run (CI sets it): RunTestsWith, and
// realnode.Require.
const RequireRealNodeEnv = "DBKEEPER_REQUIRE_REAL_NODE"
