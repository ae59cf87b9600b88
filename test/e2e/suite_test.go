// Package e2e runs the dbkeeper manager against the local cluster of
// test/framework/cluster, where the StatefulSet, Job, CronJob,
// garbage-collection and PV controllers run and kwok plays the kubelets: pods
// become Ready, Jobs finish, owned objects are collected. Each test has its
// own namespace and an operator watching only it.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/test/framework/cluster"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
	"github.com/dbkeeper/dbkeeper/test/framework/operator"
)

const (
	timeout = 90 * time.Second
	tick    = 100 * time.Millisecond
)

var (
	local *cluster.Cluster
	k8s   client.Client
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("skipping the end-to-end suite under -short: it starts a local cluster")
		return
	}
	cluster.RunTests(m, "e2e", func(c *cluster.Cluster) { local, k8s = c, c.Client })
}

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	return dbtest.NewNamespace(t, k8s, "e2e-")
}

// startOperator runs an operator with every controller on namespace; its
// log goes to a file that a failing test prints.
func startOperator(t *testing.T, namespace string) *operator.Operator {
	t.Helper()
	return startOperatorWith(t, namespace, "*")
}

// startOperatorWith is startOperator with a --controllers value.
func startOperatorWith(t *testing.T, namespace, controllers string) *operator.Operator {
	t.Helper()
	return operator.Start(t, local.Config, operator.Options{
		Controllers: controllers,
		Namespaces:  []string{namespace},
		Logger:      operator.FileLogger(t, 60),
		// kwok's pods have addresses nothing answers on.
		SkipTLSServerProbe: true,
	})
}

// newDatabase is dbtest.New.
var newDatabase = dbtest.New

func getDatabase(t require.TestingT, db *dbv1.Database) *dbv1.Database { return dbtest.Get(t, k8s, db) }

func waitCondition(t *testing.T, db *dbv1.Database, condType string, status metav1.ConditionStatus, reason string) metav1.Condition {
	t.Helper()
	return dbtest.WaitCondition(t, k8s, db, condType, status, reason, timeout)
}

func waitReady(t *testing.T, db *dbv1.Database) *dbv1.Database {
	t.Helper()
	waitCondition(t, db, dbv1.ConditionReady, metav1.ConditionTrue, dbv1.ReasonReady)
	return getDatabase(t, db)
}

func patchDatabase(t *testing.T, db *dbv1.Database, mutate func(*dbv1.Database)) *dbv1.Database {
	t.Helper()
	return dbtest.Patch(t, k8s, db, mutate)
}

func password(t require.TestingT, namespace, name string) string {
	sec := &corev1.Secret{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, sec))
	return string(sec.Data["password"])
}
