package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/manager"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
)

// TestControlPlaneRestart stops the kube-apiserver for a few seconds while
// a Database is half-way through its convergence (etcd keeps its data), and
// checks that the operator, left running, converges it and one created after
// the restart within 60 s, with nothing duplicated, and then goes quiet.
func TestControlPlaneRestart(t *testing.T) {
	ns := newNamespace(t)
	op := startOperator(t, ns, "*")
	before := convergeReady(t, newDatabase(ns, "before"))
	during := createDatabase(t, newDatabase(ns, "during"))

	// A restarted API server refuses requests (403) until its authorizer
	// has read the RBAC objects again; those are not missing rules, so the
	// suite's count of refusals pauses until the operator's user is
	// authorized again.
	refused.Mute()
	started := time.Now()
	require.NoError(t, testEnv.RestartAPIServer(3*time.Second))
	t.Logf("kube-apiserver killed and up again in %s", time.Since(started).Round(100*time.Millisecond))
	restarted := time.Now()
	operatorClient, err := client.New(operatorCfg, client.Options{Scheme: manager.Scheme()})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return operatorClient.List(context.Background(), &dbv1.DatabaseList{}, client.InNamespace(ns)) == nil
	}, timeout, tick, "the operator's user is not authorized after the restart")
	refused.Unmute()

	after := createDatabase(t, newDatabase(ns, "after"))
	for _, db := range []*dbv1.Database{during, after} {
		markStatefulSetReady(t, db)
	}
	for _, db := range []*dbv1.Database{before, during, after} {
		dbtest.WaitCondition(t, admin, db, dbv1.ConditionReady, metav1.ConditionTrue, dbv1.ReasonReady,
			time.Until(restarted.Add(time.Minute)))
	}
	t.Logf("every Database Ready %s after the restart", time.Since(restarted).Round(100*time.Millisecond))
	for _, db := range []*dbv1.Database{before, during, after} {
		dbtest.AssertOneOfEach(t, admin, getDatabase(t, db))
	}
	op.WaitQuiet(t, quiet, timeout)
}
