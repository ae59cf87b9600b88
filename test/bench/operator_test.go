package bench

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dbkeeper/dbkeeper/test/framework"
	"github.com/dbkeeper/dbkeeper/test/framework/operator"
)

// controllers is how many controllers the manager runs with the default
// --controllers=*.
const controllers = 7

// operatorProcess is the manager binary watching one namespace, with its
// /metrics on a loopback port.
type operatorProcess struct {
	proc    *operator.Process
	metrics string
	hc      *http.Client
}

// startOperator runs binary against the local cluster as its admin and
// waits until every controller has started its workers.
func startOperator(ctx context.Context, b *testing.B, binary, namespace string) (*operatorProcess, error) {
	port, err := framework.FreePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	op := &operatorProcess{
		proc: operator.StartProcess(b, binary,
			"--kubeconfig="+local.Kubeconfig,
			"--watch-namespaces="+namespace,
			"--metrics-bind-address="+addr,
			"--health-probe-bind-address=0",
			"--agent-image="+operator.FakeAgentImage,
			"--sync-period="+resync.String(),
			// kwok's pods have addresses nothing answers on.
			"--tls-server-probe=false",
		),
		metrics: "http://" + addr + "/metrics",
		hc:      &http.Client{Timeout: 10 * time.Second},
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		if op.proc.Exited() {
			return false, fmt.Errorf("the operator exited:\n%s", op.proc.Output())
		}
		return strings.Count(op.proc.Output(), "Starting workers") >= controllers, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for the operator's controllers to start: %w", err)
	}
	return op, nil
}

func (op *operatorProcess) scrape(ctx context.Context) (scrape, error) {
	return scrapeURL(ctx, op.hc, op.metrics)
}

// writeMethods are the HTTP methods of client-go requests that change
// something.
var writeMethods = map[string]bool{http.MethodPost: true, http.MethodPut: true, http.MethodPatch: true, http.MethodDelete: true}

// clientWrites is the number of writing requests the operator's clients
// made, from client-go's rest_client_requests_total: children, status,
// finalizers and Events alike.
func (s scrape) clientWrites() float64 {
	return s.sum("rest_client_requests_total", func(l map[string]string) bool { return writeMethods[l["method"]] })
}

// clientGets is the number of reading requests (gets, lists and watches)
// the operator's clients made.
func (s scrape) clientGets() float64 {
	return s.sum("rest_client_requests_total", func(l map[string]string) bool { return l["method"] == http.MethodGet })
}

// reconciles is the number of reconciles of every controller.
func (s scrape) reconciles() float64 { return s.sum("controller_runtime_reconcile_total", nil) }

// reconcileErrors is the number of reconciles that returned an error.
func (s scrape) reconcileErrors() float64 {
	return s.sum("controller_runtime_reconcile_total", func(l map[string]string) bool { return l["result"] == "error" })
}
