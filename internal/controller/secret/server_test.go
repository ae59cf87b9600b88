package secret

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/instance/instancetest"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// serverFixture is a syncer on a fake API server and in-memory servers.
type serverFixture struct {
	c       client.Client
	rec     *events.FakeRecorder
	servers *instancetest.Servers
	s       *syncer
	db      *dbv1.Database
}

func newServerFixture(t *testing.T, db *dbv1.Database, objs ...client.Object) *serverFixture {
	c := facettest.Client(t, append([]client.Object{db}, objs...)...)
	rec := events.NewFakeRecorder(100)
	servers := instancetest.New()
	return &serverFixture{c: c, rec: rec, servers: servers, s: newSyncer(c, c, facet.WriterFor(c, rec, Name), servers), db: db}
}

// sync runs one Sync and stores its condition and status as the
// reconciler would, so that the next Sync sees them.
func (f *serverFixture) sync(t *testing.T) (metav1.Condition, *dbv1.Database) {
	t.Helper()
	out, err := f.s.Sync(context.Background(), f.db)
	require.NoError(t, err)
	out.Condition.Type = dbv1.ConditionCredentialsReady
	meta.SetStatusCondition(&f.db.Status.Conditions, out.Condition)
	if out.Status != nil && out.Status.Credentials != nil {
		c := out.Status.Credentials
		f.db.Status.Credentials = &dbv1.CredentialsStatus{Secret: *c.Secret, SuperuserSecret: *c.SuperuserSecret}
		if c.AppliedResourceVersion != nil {
			f.db.Status.Credentials.AppliedResourceVersion = *c.AppliedResourceVersion
		}
	}
	if out.Condition.Status == metav1.ConditionTrue {
		assert.Equal(t, Resync, out.RequeueAfter, "no resync")
	}
	return out.Condition, f.db
}

func (f *serverFixture) secret(t *testing.T, name string) *corev1.Secret {
	t.Helper()
	sec := &corev1.Secret{}
	require.NoError(t, f.c.Get(context.Background(), client.ObjectKey{Namespace: f.db.Namespace, Name: name}, sec))
	return sec
}

func (f *serverFixture) setPassword(t *testing.T, name, password string) *corev1.Secret {
	t.Helper()
	sec := f.secret(t, name)
	sec.Data[engine.PasswordKey] = []byte(password)
	require.NoError(t, f.c.Update(context.Background(), sec))
	return sec
}

// assertNoSecret checks that no Event or condition holds the password,
// its base64 or the server's verifier of it.
func (f *serverFixture) assertNoSecret(t *testing.T, password, verifier string, texts ...string) {
	t.Helper()
	texts = append(texts, drain(f.rec)...)
	for _, c := range f.db.Status.Conditions {
		texts = append(texts, c.Message)
	}
	forbidden := []string{password, base64.StdEncoding.EncodeToString([]byte(password))}
	if verifier != "" {
		forbidden = append(forbidden, verifier)
		// StoredKey and ServerKey, the parts after the '$'.
		forbidden = append(forbidden, strings.Split(verifier[strings.LastIndex(verifier, "$")+1:], ":")...)
	}
	for _, text := range texts {
		for _, s := range forbidden {
			if len(s) >= 8 {
				assert.NotContains(t, text, s)
			}
		}
	}
}

// TestServerStepGeneratedRotation: a new Database gets its superuser
// Secret, its role and database (Generated); a changed password reaches the
// server (Rotated, with the Secret's resourceVersion applied), the old one
// no longer logs in; a resync that finds nothing to do writes nothing and
// keeps Rotated.
func TestServerStepGeneratedRotation(t *testing.T) {
	f := newServerFixture(t, facettest.Database())
	cond, db := f.sync(t)
	assert.Equal(t, metav1.ConditionTrue, cond.Status, cond.Message)
	assert.Equal(t, dbv1.ReasonSecretGenerated, cond.Reason, cond.Message)
	app := f.secret(t, resources.GeneratedSecretName(db))
	super := f.secret(t, resources.SuperuserSecretName(db))
	assert.Equal(t, "postgres", string(super.Data[engine.UsernameKey]))
	assert.Equal(t, resources.Labels(db, resources.ComponentSuperuser), super.Labels)
	assert.Empty(t, super.OwnerReferences, "the superuser Secret follows the deletion policy, not garbage collection")
	assert.Equal(t, app.ResourceVersion, db.Status.Credentials.AppliedResourceVersion)
	assert.Equal(t, super.Name, db.Status.Credentials.SuperuserSecret)
	role := string(app.Data[engine.UsernameKey])
	old := string(app.Data[engine.PasswordKey])
	require.True(t, f.servers.CanLogin(db, role, old))
	isSuper, _ := f.servers.Superuser(db, role)
	assert.False(t, isSuper, "the application's role is a superuser")
	superPassword := string(super.Data[engine.PasswordKey])

	stale := db.DeepCopy() // the Database as the cache may still hold it after the rotation
	f.setPassword(t, app.Name, "new-password-of-the-app")
	cond, db = f.sync(t)
	// The uri key, derived from the password, was brought in line first.
	rotated := f.secret(t, app.Name)
	assert.Contains(t, string(rotated.Data["uri"]), ":new-password-of-the-app@")
	assert.Equal(t, dbv1.ReasonPasswordRotated, cond.Reason, cond.Message)
	assert.Contains(t, cond.Message, "resourceVersion "+rotated.ResourceVersion)
	assert.Equal(t, rotated.ResourceVersion, db.Status.Credentials.AppliedResourceVersion)
	assert.True(t, f.servers.CanLogin(db, role, "new-password-of-the-app"))
	assert.False(t, f.servers.CanLogin(db, role, old), "the old password still logs in")
	sets := f.servers.PasswordSets(db)
	f.assertNoSecret(t, "new-password-of-the-app", f.servers.Verifier(db, role))
	f.assertNoSecret(t, old, "")
	f.assertNoSecret(t, superPassword, f.servers.Verifier(db, "postgres"))

	out, err := f.s.Sync(context.Background(), stale)
	require.NoError(t, err)
	assert.Equal(t, dbv1.ReasonPasswordRotated, out.Condition.Reason, "a reconcile of a lagging cached Database took Rotated back")
	assert.Equal(t, cond.Message, out.Condition.Message)
	cond, _ = f.sync(t)
	assert.Equal(t, dbv1.ReasonPasswordRotated, cond.Reason, "a no-op resync changed the reason")
	assert.Equal(t, sets, f.servers.PasswordSets(db), "a converged server was written")
	assert.Equal(t, superPassword, string(f.secret(t, super.Name).Data[engine.PasswordKey]), "the superuser password was regenerated")
}

// TestServerStepRefusesEmptyPassword: an empty password in the user's
// Secret writes nothing to the server and says which Secret and key.
func TestServerStepRefusesEmptyPassword(t *testing.T) {
	db := facettest.Database()
	db.Spec.Credentials = &dbv1.CredentialsSpec{SecretName: "mine"}
	user := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: "mine", Annotations: map[string]string{dbv1.AnnotationCredentialsFor: db.Name}},
		Data: map[string][]byte{engine.UsernameKey: []byte("shop"), engine.PasswordKey: []byte("first-password")}}
	f := newServerFixture(t, db, user)
	cond, db := f.sync(t)
	require.Equal(t, dbv1.ReasonSecretProvided, cond.Reason, cond.Message)
	applied := db.Status.Credentials.AppliedResourceVersion
	sets := f.servers.PasswordSets(db)

	f.setPassword(t, "mine", "")
	cond, db = f.sync(t)
	assert.Equal(t, metav1.ConditionFalse, cond.Status)
	assert.Equal(t, dbv1.ReasonRotationFailed, cond.Reason)
	assert.Contains(t, cond.Message, "Secret mine")
	assert.Contains(t, cond.Message, "key password: the password is empty")
	assert.Equal(t, sets, f.servers.PasswordSets(db), "the server was written")
	assert.True(t, f.servers.CanLogin(db, "shop", "first-password"), "the old password stopped working")
	assert.Equal(t, applied, db.Status.Credentials.AppliedResourceVersion, "the applied version moved")
}

// TestServerStepPending: a server that cannot be reached is
// RotationPending with a growing retry delay, and the password gets there
// once it can be.
func TestServerStepPending(t *testing.T) {
	f := newServerFixture(t, facettest.Database())
	f.servers.SetReady(f.db, false)
	var delays []time.Duration
	for range 3 {
		out, err := f.s.Sync(context.Background(), f.db)
		require.NoError(t, err)
		assert.Equal(t, dbv1.ReasonRotationPending, out.Condition.Reason)
		assert.Contains(t, out.Condition.Message, "pod orders-0 is not ready")
		delays = append(delays, out.RequeueAfter)
	}
	assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}, delays)
	f.servers.SetReady(f.db, true)
	cond, _ := f.sync(t)
	assert.Equal(t, dbv1.ReasonSecretGenerated, cond.Reason, cond.Message)
}

// TestServerStepLegacy: a Database made before issue 17 (its application's
// role is the bootstrap superuser, no superuser Secret): dbkeeper creates
// the superuser Secret and role connected as the application, reports
// LegacySuperuser and keeps rotating the password; the annotation demotes
// the role, which keeps its password.
func TestServerStepLegacy(t *testing.T) {
	db := facettest.Database()
	db.Spec.Credentials = &dbv1.CredentialsSpec{SecretName: "mine"}
	user := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: "mine", Annotations: map[string]string{dbv1.AnnotationCredentialsFor: db.Name}},
		Data: map[string][]byte{engine.UsernameKey: []byte("shop"), engine.PasswordKey: []byte("legacy-password")}}
	f := newServerFixture(t, db, user)
	f.servers.Legacy(db, "shop", "legacy-password", "shop")

	cond, db := f.sync(t)
	assert.Equal(t, metav1.ConditionTrue, cond.Status, cond.Message)
	assert.Equal(t, dbv1.ReasonLegacySuperuser, cond.Reason, cond.Message)
	assert.Contains(t, cond.Message, dbv1.AnnotationDemoteAppRole)
	super := f.secret(t, resources.SuperuserSecretName(db))
	isSuper, _ := f.servers.Superuser(db, "postgres")
	assert.True(t, isSuper, "no superuser role made")
	assert.True(t, f.servers.CanLogin(db, "postgres", string(super.Data[engine.PasswordKey])))
	events := drain(f.rec)
	assert.Contains(t, strings.Join(events, "\n"), "Warning "+ReasonLegacySuperuser)
	assert.Contains(t, strings.Join(events, "\n"), "Normal "+ReasonSuperuserCreated)

	f.setPassword(t, "mine", "rotated-legacy-password")
	cond, db = f.sync(t)
	assert.Equal(t, dbv1.ReasonLegacySuperuser, cond.Reason, cond.Message)
	assert.True(t, f.servers.CanLogin(db, "shop", "rotated-legacy-password"), "a legacy role's password does not rotate")

	db.Annotations = map[string]string{dbv1.AnnotationDemoteAppRole: "true"}
	cond, db = f.sync(t)
	assert.Equal(t, dbv1.ReasonSecretProvided, cond.Reason, cond.Message)
	isSuper, bootstrap := f.servers.Superuser(db, "shop")
	assert.False(t, isSuper, "the application's role is still a superuser")
	assert.False(t, bootstrap)
	assert.True(t, f.servers.CanLogin(db, "shop", "rotated-legacy-password"), "the password changed in the demotion")
	assert.Contains(t, strings.Join(drain(f.rec), "\n"), "Normal "+ReasonAppRoleDemoted)
	f.assertNoSecret(t, "rotated-legacy-password", f.servers.Verifier(db, "shop"))
}

// TestServerStepLegacyNamedPostgres: a legacy Database whose application's
// role is itself named postgres gets the superuser dbkeeper, and is not
// demoted by the annotation (an application's role may not be named
// postgres), which the condition says.
func TestServerStepLegacyNamedPostgres(t *testing.T) {
	db := facettest.Database()
	db.Spec.Credentials = &dbv1.CredentialsSpec{SecretName: "mine"}
	db.Annotations = map[string]string{dbv1.AnnotationDemoteAppRole: "true"}
	user := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: "mine", Annotations: map[string]string{dbv1.AnnotationCredentialsFor: db.Name}},
		Data: map[string][]byte{engine.UsernameKey: []byte("postgres"), engine.PasswordKey: []byte("legacy-password")}}
	f := newServerFixture(t, db, user)
	f.servers.Legacy(db, "postgres", "legacy-password", "postgres")

	cond, db := f.sync(t)
	assert.Equal(t, dbv1.ReasonLegacySuperuser, cond.Reason, cond.Message)
	assert.Contains(t, cond.Message, "cannot be demoted in place")
	assert.Equal(t, resources.LegacySuperuserName, string(f.secret(t, resources.SuperuserSecretName(db)).Data[engine.UsernameKey]))
	isSuper, bootstrap := f.servers.Superuser(db, "postgres")
	assert.True(t, isSuper && bootstrap, "the role was demoted")
	isSuper, _ = f.servers.Superuser(db, resources.LegacySuperuserName)
	assert.True(t, isSuper, "no superuser dbkeeper")
}
