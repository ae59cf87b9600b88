package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
	"github.com/dbkeeper/dbkeeper/test/framework/envtest"
	"github.com/dbkeeper/dbkeeper/test/framework/operator"
)

// leaseNamespace is where the generated Role lets the manager hold its lease.
const leaseNamespace = "dbkeeper-system"

// TestLeaderElection runs two manager binaries (built with -race) as the
// least-privileged user, with the generated Role for the lease: one leads
// and converges a Database while the other does nothing; the leader is
// killed with SIGKILL, so its lease is not released, and the other takes
// the lease once it expires and converges a second Database.
func TestLeaderElection(t *testing.T) {
	ns := newNamespace(t)
	bindLeaseRole(t)
	binary := operator.Build(t, "manager-race", "-race")
	kubeconfig := operator.WriteKubeconfig(t, operatorCfg, t.TempDir())
	leaseName := "dbkeeper-" + ns
	args := []string{
		"--kubeconfig=" + kubeconfig, "--watch-namespaces=" + ns,
		"--metrics-bind-address=0", "--health-probe-bind-address=0", "--agent-image=" + operator.FakeAgentImage,
		"--leader-elect", "--leader-election-namespace=" + leaseNamespace, "--leader-election-id=" + leaseName,
		"--leader-election-lease-duration=4s", "--leader-election-renew-deadline=3s", "--leader-election-retry-period=500ms",
	}
	managers := []*operator.Process{operator.StartProcess(t, binary, args...), operator.StartProcess(t, binary, args...)}

	const acquired = "Successfully acquired lease"
	var leader, follower *operator.Process
	require.Eventually(t, func() bool {
		for i, m := range managers {
			if strings.Contains(m.Output(), acquired) {
				leader, follower = m, managers[1-i]
				return true
			}
		}
		return false
	}, timeout, tick, "no manager acquired the lease")
	holder := leaseHolder(t, leaseName)

	first := convergedWithoutServer(t, createDatabase(t, newDatabase(ns, "led-by-first")))
	assert.NotContains(t, follower.Output(), acquired, "both managers acquired the lease")
	assert.NotContains(t, follower.Output(), "Starting workers", "the follower ran controllers while another led")
	assert.NotContains(t, follower.Output(), "Applying", "the follower wrote while another led")

	leader.Kill()
	killed := time.Now()
	second := createDatabase(t, newDatabase(ns, "led-by-second"))
	convergedWithoutServer(t, second)
	t.Logf("the second manager converged a new Database %s after the leader was killed (lease duration 4s)",
		time.Since(killed).Round(100*time.Millisecond))
	assert.Contains(t, follower.Output(), acquired)
	assert.NotEqual(t, holder, leaseHolder(t, leaseName), "the lease still names the killed leader")
	assert.False(t, follower.Exited(), "the new leader exited")
	for _, db := range []*dbv1.Database{first, second} {
		dbtest.AssertOneOfEach(t, admin, getDatabase(t, db))
	}
}

// convergedWithoutServer waits until every facet of db is True but
// CredentialsReady, which the manager binary (connecting to real pods,
// which envtest has none of) reports as False/RotationPending: the pod
// that would run the server does not exist. It returns db as stored.
func convergedWithoutServer(t *testing.T, db *dbv1.Database) *dbv1.Database {
	t.Helper()
	markStatefulSetStatusReady(t, db)
	for cond, reason := range map[string]string{
		dbv1.ConditionStatefulSetReady: dbv1.ReasonStatefulSetReady,
		dbv1.ConditionServiceReady:     dbv1.ReasonServicesReady,
		dbv1.ConditionBackupReady:      dbv1.ReasonBackupScheduled,
	} {
		dbtest.WaitCondition(t, admin, db, cond, metav1.ConditionTrue, reason, 30*time.Second)
	}
	pending := dbtest.WaitCondition(t, admin, db, dbv1.ConditionCredentialsReady, metav1.ConditionFalse, dbv1.ReasonRotationPending, 30*time.Second)
	assert.Contains(t, pending.Message, "pod "+db.Name+"-0 does not exist")
	return getDatabase(t, db)
}

// leaseHolder is the holder identity of the lease.
func leaseHolder(t *testing.T, name string) string {
	t.Helper()
	lease := &coordinationv1.Lease{}
	require.NoError(t, admin.Get(context.Background(), client.ObjectKey{Namespace: leaseNamespace, Name: name}, lease))
	return *lease.Spec.HolderIdentity
}

// bindLeaseRole creates the namespaced Role of config/rbac/role.yaml (the
// lease and its Events) and binds the operator's user to it, once.
func bindLeaseRole(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	root, err := envtest.RepoRoot()
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "role.yaml"))
	require.NoError(t, err)
	var role *rbacv1.Role
	for _, doc := range strings.Split(string(data), "\n---\n") {
		r := &rbacv1.Role{}
		if err := yaml.Unmarshal([]byte(doc), r); err == nil && r.Kind == "Role" {
			role = r
		}
	}
	require.NotNil(t, role, "no Role in config/rbac/role.yaml")
	require.Equal(t, leaseNamespace, role.Namespace)
	create := func(obj client.Object) {
		if err := admin.Create(ctx, obj); !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err, "creating %T %s", obj, obj.GetName())
		}
	}
	create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leaseNamespace}})
	create(role)
	create(&rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: leaseNamespace, Name: fmt.Sprintf("%s-operator", role.Name)},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: operatorUser}},
	})
}
