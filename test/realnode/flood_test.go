package realnode

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
)

// floodRequests and floodWorkers are issue 29's flood: 2,000 requests to
// the agent's API, 200 at a time.
const (
	floodRequests = 2000
	floodWorkers  = 200
)

// TestAgentFlood (issue 29) floods an engine pod's agent from outside the
// Database, as any pod that can reach it could (the test runs on the
// bridge, where no NetworkPolicy applies): 2,000 requests, 200 at a time,
// to /readyz, /healthz and /status without a token. Throughout, the
// application connects and writes through <name> (each attempt within
// the writer's timeout) and the pod stays Ready. Before the fix every
// /readyz opened a superuser connection, so a flood could fill
// max_connections and fail the readiness probe; now the probes share one
// check at most 500 ms old, and /status refuses without a token.
func TestAgentFlood(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns)
	db := newDatabase(ns, "flooded", "17")
	create(t, db)
	waitReady(t, db)
	pod := getPod(t, db, resources.InstanceName(db, 0))
	rw := serviceTarget(t, db, resources.ClientServiceName(db))
	// Ready before kube-proxy routes <name> to the pod
	require.Eventually(t, func() bool { _, err := sqlWithin(rw, "SELECT 1", 5*time.Second); return err == nil }, timeout, 200*time.Millisecond,
		"<name> reaches the primary")
	w, err := dbtest.StartWriterWithTimeout(ctx, rw, "acks", 3*time.Second)
	require.NoError(t, err)
	defer w.Stop()

	// the pod's Ready condition, watched every 100 ms during the flood
	stop := make(chan struct{})
	var unready atomic.Int32
	var watching sync.WaitGroup
	watching.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			p := &corev1.Pod{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), p); err != nil {
				continue
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status != corev1.ConditionTrue {
					unready.Add(1)
				}
			}
		}
	})

	// the agent's certificate is the Database's, for the pod's DNS name:
	// what the flood sends does not depend on it
	httpc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, MaxIdleConnsPerHost: floodWorkers, MaxConnsPerHost: floodWorkers}}
	paths := []string{agentapi.ReadyPath, agentapi.HealthPath, agentapi.StatusPath}
	var sent, failed atomic.Int64
	codes := sync.Map{}
	acks := w.AckCount()
	start := time.Now()
	var flood sync.WaitGroup
	for range floodWorkers {
		flood.Go(func() {
			for {
				n := sent.Add(1)
				if n > floodRequests {
					return
				}
				url := fmt.Sprintf("https://%s:%d%s", pod.Status.PodIP, agentapi.Port, paths[n%int64(len(paths))])
				resp, err := httpc.Get(url)
				if err != nil {
					failed.Add(1)
					continue
				}
				resp.Body.Close()
				c, _ := codes.LoadOrStore(fmt.Sprintf("%s %d", paths[n%int64(len(paths))], resp.StatusCode), new(atomic.Int64))
				c.(*atomic.Int64).Add(1)
			}
		})
	}
	flood.Wait()
	took := time.Since(start)
	time.Sleep(time.Second) // a probe period after the flood
	close(stop)
	watching.Wait()
	httpc.CloseIdleConnections()

	summary := map[string]int64{}
	codes.Range(func(k, v any) bool { summary[k.(string)] = v.(*atomic.Int64).Load(); return true })
	t.Logf("MEASURED flood: %d requests, %d at a time, in %s (%.0f/s); %d failed; answers %v; the writer acknowledged %d meanwhile, longest gap %s",
		floodRequests, floodWorkers, took.Round(time.Millisecond), float64(floodRequests)/took.Seconds(), failed.Load(), summary,
		w.AckCount()-acks, w.LongestGap(start).Round(time.Millisecond))
	assert.Zero(t, unready.Load(), "the pod went unready during the flood")
	// 5 s: CI measured 3.2 s with the machine loaded far past its two
	// cores (the writer acknowledged 122 writes in the 11 s flood); a
	// connection per request would refuse writes outright (too many
	// clients), which the writer would count as failed
	assert.Less(t, w.LongestGap(start), 5*time.Second, "the application could not write for that long during the flood")
	assert.Zero(t, summary[agentapi.StatusPath+" 200"], "/status answered without a token")
	assert.Positive(t, summary[agentapi.ReadyPath+" 200"], "/readyz answered")
	missing, err := w.Missing(ctx, rw)
	require.NoError(t, err)
	assert.Empty(t, missing)
}
