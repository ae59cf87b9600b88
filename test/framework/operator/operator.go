// Package operator runs the dbkeeper manager inside a test process, the way
// cmd/manager builds it, with every write it makes recorded (WriteLog) and
// its logs sent where the test wants them. Integration and end-to-end
// suites share it.
package operator

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"

	"github.com/dbkeeper/dbkeeper/internal/controller"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/instance/agentstest"
	"github.com/dbkeeper/dbkeeper/internal/instance/instancetest"
	"github.com/dbkeeper/dbkeeper/internal/manager"
	"github.com/dbkeeper/dbkeeper/internal/marker"
)

// Options of one operator run.
type Options struct {
	// Controllers is the --controllers value; empty means "*".
	Controllers string
	// Namespaces are watched; empty means every namespace.
	Namespaces []string
	// Logger receives the operator's logs; the zero value discards them.
	Logger logr.Logger
	// Faults, when set, makes some of the operator's writes fail.
	Faults *Faults
	// Engines is the image catalog (--engine-registry, --engine-images);
	// the zero value is the built-in one.
	Engines engine.Catalog
	// MetricsBindAddress serves /metrics (--metrics-bind-address); empty
	// means none.
	MetricsBindAddress string
	// InstanceMetricsInterval is how often the manager scrapes the
	// instances' agents for the series it serves again
	// (--instance-metrics-interval); zero, or no MetricsBindAddress, turns
	// the scrapes off.
	InstanceMetricsInterval time.Duration
	// MetricsSecure serves it over HTTPS to authorized callers only
	// (--metrics-secure), checked with cfg's credentials.
	MetricsSecure bool
	// RealInstances connects to the Databases' real servers and agents
	// (the pods' IPs), as the manager does; without it (envtest and kwok
	// run no PostgreSQL and no agent) the operator talks to in-memory
	// servers and agents, Operator.Servers and Operator.Agents.
	RealInstances bool
	// Instances, when set, is how the operator connects to the Databases'
	// servers (the agents stay in memory unless RealInstances): a suite
	// that runs a local PostgreSQL as every Database's primary.
	Instances instance.Connector
	// AllowPrivilegedRoles runs the manager with
	// --allow-privileged-roles.
	AllowPrivilegedRoles bool
	// SkipTLSServerProbe keeps the tls controller from connecting to the
	// engine pods (--tls-server-probe=false): for fake nodes.
	SkipTLSServerProbe bool
	// TLSCertDuration is the lifetime of the certificates the operator
	// issues (--tls-cert-duration); zero is the default, 90 days.
	TLSCertDuration time.Duration
	// AgentImage is the image the engine pods copy the instance agent
	// from (--agent-image); empty means FakeAgentImage, which only a fake
	// node (whose pods run nothing) may use. A real node passes the
	// manager image it imported (cluster.Cluster.ManagerImage).
	AgentImage string
	// NoNetworkPolicies runs the manager with --network-policies=false;
	// by default it keeps one per Database, as the chart's manager does
	// (the test process is no pod: a cluster that enforced them would shut
	// it out, and none of the test clusters does).
	NoNetworkPolicies bool
}

// markerKey marks the Secrets of every operator of the test process, as
// one manager's key does in a cluster: a Database made again after a
// Retain deletion, by another operator of the process, adopts what was kept.
var markerKey = func() marker.Key {
	k, err := marker.NewKey()
	if err != nil {
		panic(err)
	}
	return k
}()

// FakeAgentImage is the agent image of operators whose pods never run: the
// envtest and fake-node suites.
const FakeAgentImage = "localhost/dbkeeper/manager:fake"

// Operator is one running manager.
type Operator struct {
	// Writes holds every write the manager's client sent.
	Writes *WriteLog
	// Servers are the in-memory servers the operator reaches, unless
	// Options.RealInstances.
	Servers *instancetest.Servers
	// Agents are the in-memory agents of the instances, unless
	// Options.RealInstances; shared by the operators of the test process.
	Agents *agentstest.Agents
	stop   func()
}

// sharedAgents are the in-memory agents of every operator of the test
// process: like the volumes they stand for, the instances' data outlives
// an operator, so a restarted one finds the primary it left (they are
// kept per Database UID).
var sharedAgents = agentstest.New()

// Start runs the manager against cfg until Stop is called or the test ends.
func Start(t testing.TB, cfg *rest.Config, o Options) *Operator {
	t.Helper()
	if o.Controllers == "" {
		o.Controllers = "*"
	}
	set, err := controller.ParseControllers(o.Controllers, controller.Names())
	require.NoError(t, err)
	logger := o.Logger
	if logger.GetSink() == nil {
		logger = logr.Discard()
	}
	if o.Faults != nil {
		cfg = rest.CopyConfig(cfg)
		cfg.Wrap(o.Faults.Wrap)
	}
	if o.AgentImage == "" {
		o.AgentImage = FakeAgentImage
	}
	if o.MetricsBindAddress == "" {
		o.MetricsBindAddress = "0"
	}
	writes := &WriteLog{}
	var servers *instancetest.Servers
	var instances instance.Connector
	var fakeAgents *agentstest.Agents
	var agents instance.Agents
	if !o.RealInstances {
		servers = instancetest.New()
		instances = servers
		fakeAgents = sharedAgents
		agents = fakeAgents
	}
	if o.Instances != nil {
		instances, servers = o.Instances, nil
	}
	mgr, err := manager.New(cfg, manager.Options{
		Instances:               instances,
		Agents:                  agents,
		Controllers:             set,
		WatchNamespaces:         o.Namespaces,
		MetricsBindAddress:      o.MetricsBindAddress,
		MetricsSecure:           o.MetricsSecure,
		InstanceMetricsInterval: o.InstanceMetricsInterval,
		HealthProbeBindAddress:  "0",
		NewClient:               writes.NewClient,
		Logger:                  logger,
		SkipNameValidation:      true,
		Engines:                 o.Engines,
		SkipTLSServerProbe:      o.SkipTLSServerProbe,
		TLSCertDuration:         o.TLSCertDuration,
		AgentImage:              o.AgentImage,
		NetworkPolicies:         !o.NoNetworkPolicies,
		MarkerKey:               markerKey,
		AllowPrivilegedRoles:    o.AllowPrivilegedRoles,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	op := &Operator{Writes: writes, Servers: servers, Agents: fakeAgents}
	op.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				assert.NoError(t, err, "manager stopped with an error")
			case <-time.After(30 * time.Second):
				t.Error("manager did not stop within 30s")
			}
		})
	}
	t.Cleanup(op.stop)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("operator writes:\n%s", strings.Join(writes.Since(0), "\n"))
		}
	})
	return op
}

// Stop stops the manager and waits for it; calling it again does nothing.
func (op *Operator) Stop() { op.stop() }

// WaitQuiet waits until the operator has made no write for the quiet
// period, failing after timeout, and returns the number of writes so far.
func (op *Operator) WaitQuiet(t testing.TB, quiet, timeout time.Duration) int {
	t.Helper()
	const tick = 50 * time.Millisecond
	n := op.Writes.Len()
	deadline := time.Now().Add(timeout)
	for last := time.Now(); time.Since(last) < quiet; {
		require.True(t, time.Now().Before(deadline), "the operator kept writing:\n%s", strings.Join(op.Writes.Since(n), "\n"))
		time.Sleep(tick)
		if m := op.Writes.Len(); m != n {
			n, last = m, time.Now()
		}
	}
	return n
}
