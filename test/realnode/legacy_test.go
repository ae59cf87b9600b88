package realnode

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/controller/secret"
	"github.com/dbkeeper/dbkeeper/internal/controller/statefulset"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
)

// TestLegacyDatabaseUpgrade: a Database as dbkeeper made it before issue
// 17 (its StatefulSet's POSTGRES_USER and POSTGRES_PASSWORD from the
// credentials Secret, so initdb made the application's role the bootstrap
// superuser), made here by hand, is taken over by this operator with its
// data (its pod restarts once, onto the agent, as every pod made before
// replication does): the superuser Secret and role appear,
// CredentialsReady says LegacySuperuser, the application keeps working as
// before. The annotation then demotes the application's role to an
// ordinary owner, with the same password, its rows and tables intact.
func TestLegacyDatabaseUpgrade(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := newNamespace(t)
	db := newDatabase(ns, "old", "17")
	create(t, db)
	eng, err := images.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	password, err := secret.NewPassword()
	require.NoError(t, err)
	creds := resources.CredentialsSecret(db, eng, password, resources.ClientTLS{})
	create(t, creds)

	// The StatefulSet of the previous operator: without the agent (it
	// came with replication), with the old env, applied with the
	// statefulset controller's field manager as that operator did.
	sts := preAgentStatefulSet(t, db)
	ref := func(name, key string, optional bool) corev1.EnvVar {
		sel := &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: creds.Name}, Key: key}
		if optional {
			sel.Optional = ptr.To(true)
		}
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: sel}}
	}
	old := []corev1.EnvVar{ref("POSTGRES_USER", "username", false), ref("POSTGRES_PASSWORD", "password", false),
		ref("POSTGRES_DB", "database", true), {Name: "PGDATA", Value: eng.DataMountPath() + "/pgdata"}}
	sts.Spec.Template.Spec.Containers[0].Env = old
	sts.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"}
	require.NoError(t, k8s.Patch(ctx, sts, client.Apply, client.FieldOwner(facet.FieldOwner(statefulset.Name)), client.ForceOwnership))
	pod := &corev1.Pod{}
	require.Eventually(t, func() bool {
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: db.Name + "-0"}, pod); err != nil {
			return false
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	}, timeout, time.Second, "the pod of the old StatefulSet never became Ready")
	t.Log("the new operator takes over")
	startOperator(t, ns)
	cond := waitCondition(t, db, dbv1.ConditionCredentialsReady, metav1.ConditionTrue, dbv1.ReasonLegacySuperuser)
	t.Logf("CredentialsReady: %s", cond.Message)
	waitReady(t, db)
	conn := generated(db)
	assert.Equal(t, "app|t", queryEventually(t, conn, "SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user"),
		"the legacy application's role is still the superuser, untouched")
	fillItems(t, conn)
	assert.Equal(t, "postgres", secretValue(t, ns, resources.SuperuserSecretName(db), "username"))

	// The pod ran without the agent: the rollout restarted it once onto
	// it, with the initdb env the previous operator gave it (PinLegacyEnv).
	after := &corev1.Pod{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(pod), after))
	assert.NotEqual(t, pod.UID, after.UID, "the pod was restarted onto the agent")
	assert.False(t, resources.PodPredatesAgent(after), "the pod runs the agent")
	// plaintext kept for the server, but not for the agent's endpoint
	agentServesTheDatabaseCertificate(t, db, after)
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(sts), sts))
	var env []corev1.EnvVar
	for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
		if !strings.HasPrefix(e.Name, "DBKEEPER_") {
			env = append(env, e)
		}
	}
	assert.Equal(t, old, env, "the initdb env changed")

	t.Log("the user asks for the demotion")
	dbtest.Patch(t, k8s, db, func(d *dbv1.Database) {
		if d.Annotations == nil {
			d.Annotations = map[string]string{}
		}
		d.Annotations[dbv1.AnnotationDemoteAppRole] = "true"
	})
	cond = waitCondition(t, db, dbv1.ConditionCredentialsReady, metav1.ConditionTrue, dbv1.ReasonSecretGenerated)
	t.Logf("CredentialsReady: %s", cond.Message)
	assert.Equal(t, "app|f", queryEventually(t, conn, "SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user"),
		"the same password logs in, as an ordinary role")
	assert.Equal(t, rows, countItems(t, conn), "the rows")
	assert.Equal(t, "app|app", query(t, conn, "SELECT tableowner, pg_get_userbyid(datdba) FROM pg_tables, pg_database "+
		"WHERE tablename = 'items' AND datname = current_database()"), "the application owns its table and database")
	query(t, conn, "INSERT INTO items VALUES (1000, 'after the demotion'); ALTER TABLE items ADD COLUMN extra int")
	out, err := psql.Query(ctx, conn, "CREATE TEMP TABLE shell (line text); COPY shell FROM PROGRAM 'id'", queryTimeout)
	assert.ErrorContains(t, err, "failed", "COPY FROM PROGRAM ran after the demotion: %s", out)
	assert.Contains(t, out, "permission denied")
	onAgent := after.UID
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(pod), after))
	assert.Equal(t, onAgent, after.UID, "the pod was replaced by the demotion")
}

// agentServesTheDatabaseCertificate: the agent of pod serves its endpoint
// over TLS with a certificate of the Database's CA for the pod's name, and
// refuses a plain HTTP request, whether or not the server itself has TLS
// (its token never travels in clear).
func agentServesTheDatabaseCertificate(t *testing.T, db *dbv1.Database, pod *corev1.Pod) {
	t.Helper()
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM([]byte(secretValue(t, db.Namespace, resources.TLSSecretName(db), resources.CACertKey))))
	addr := net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(agentapi.Port)))
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: instance.PodHost(db, pod.Name)})
	require.NoError(t, err, "the agent's endpoint with the Database's CA")
	require.NoError(t, conn.Close())
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + agentapi.StatusPath)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "plain HTTP reached the agent")
}
