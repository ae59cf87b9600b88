package secret

import (
	"context"
	"maps"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
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

// TestSyncGenerates: the first sync generates the credentials Secret; later
// syncs keep its password.
func TestSyncGenerates(t *testing.T) {
	ctx := context.Background()
	db := facettest.Database()
	c := facettest.Client(t, db)
	s := newSyncer(c, c, facet.WriterFor(c, &events.FakeRecorder{}, Name), instancetest.New())
	key := client.ObjectKey{Namespace: db.Namespace, Name: resources.GeneratedSecretName(db)}

	out, err := s.Sync(ctx, db)
	require.NoError(t, err)
	assert.Equal(t, dbv1.ReasonSecretGenerated, out.Condition.Reason, out.Condition.Message)
	assert.Equal(t, key.Name, *out.Status.CredentialsSecret)
	sec := &corev1.Secret{}
	require.NoError(t, c.Get(ctx, key, sec))
	password := string(sec.Data[engine.PasswordKey])
	require.NotEmpty(t, password)

	out, err = s.Sync(ctx, db)
	require.NoError(t, err)
	assert.Equal(t, dbv1.ReasonSecretGenerated, out.Condition.Reason, out.Condition.Message)
	require.NoError(t, c.Get(ctx, key, sec))
	assert.Equal(t, password, string(sec.Data[engine.PasswordKey]), "regenerated the password")
}

// TestSyncChecksTheUsersSecret: the Secret of spec.credentials.secretName
// is reported missing, incomplete or in use, and never written.
func TestSyncChecksTheUsersSecret(t *testing.T) {
	secret := func(data map[string][]byte, optIn string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "mine", ResourceVersion: "7"}, Data: data}
		if optIn != "" {
			s.Annotations = map[string]string{dbv1.AnnotationCredentialsFor: optIn}
		}
		return s
	}
	both := map[string][]byte{engine.UsernameKey: []byte("app"), engine.PasswordKey: []byte("s3cret")}
	for name, tc := range map[string]struct {
		secret *corev1.Secret
		// inUse: its password was set on the server before (status)
		inUse  bool
		status metav1.ConditionStatus
		reason string
		says   string
	}{
		"missing":     {secret: nil, status: metav1.ConditionFalse, reason: dbv1.ReasonSecretNotFound},
		"incomplete":  {secret: secret(map[string][]byte{engine.UsernameKey: []byte("app")}, "orders"), status: metav1.ConditionFalse, reason: dbv1.ReasonSecretInvalid},
		"complete":    {secret: secret(both, "orders"), status: metav1.ConditionTrue, reason: dbv1.ReasonSecretProvided},
		"for several": {secret: secret(both, "billing, orders"), status: metav1.ConditionTrue, reason: dbv1.ReasonSecretProvided},
		"not opted in": {secret: secret(both, ""), status: metav1.ConditionFalse, reason: dbv1.ReasonSecretNotOptedIn,
			says: dbv1.AnnotationCredentialsFor + ": orders"},
		"for another Database": {secret: secret(both, "billing"), status: metav1.ConditionFalse, reason: dbv1.ReasonSecretNotOptedIn},
		"in use before the opt-in": {secret: secret(both, ""), inUse: true, status: metav1.ConditionTrue, reason: dbv1.ReasonSecretProvided,
			says: "it lacks the annotation " + dbv1.AnnotationCredentialsFor},
	} {
		t.Run(name, func(t *testing.T) {
			db := facettest.Database()
			db.Spec.Credentials = &dbv1.CredentialsSpec{SecretName: "mine"}
			if tc.inUse {
				db.Status.Credentials = &dbv1.CredentialsStatus{Secret: "mine", AppliedResourceVersion: "6"}
			}
			objs := []client.Object{db}
			if tc.secret != nil {
				objs = append(objs, tc.secret)
			}
			c := facettest.Client(t, objs...)
			out, err := newSyncer(c, c, facet.WriterFor(c, &events.FakeRecorder{}, Name), instancetest.New()).Sync(context.Background(), db)
			require.NoError(t, err)
			assert.Equal(t, tc.status, out.Condition.Status)
			assert.Equal(t, tc.reason, out.Condition.Reason, out.Condition.Message)
			assert.Contains(t, out.Condition.Message, tc.says)
			if tc.secret != nil {
				live := &corev1.Secret{}
				require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(tc.secret), live))
				assert.Equal(t, tc.secret.ResourceVersion, live.ResourceVersion, "wrote the user's Secret")
			}
		})
	}
}

// TestSyncRestoresKeys: keys derived from the password that somebody else
// changed are put back, and an Event on the Database names those keys and
// holds no value of the Secret.
func TestSyncRestoresKeys(t *testing.T) {
	ctx := context.Background()
	db := facettest.Database()
	c := facettest.Client(t, db)
	rec := events.NewFakeRecorder(10)
	s := newSyncer(c, c, facet.WriterFor(c, rec, Name), instancetest.New())
	key := client.ObjectKey{Namespace: db.Namespace, Name: resources.GeneratedSecretName(db)}

	_, err := s.Sync(ctx, db)
	require.NoError(t, err)
	drain(rec) // the role and database created on the new server
	sec := &corev1.Secret{}
	require.NoError(t, c.Get(ctx, key, sec))
	want := maps.Clone(sec.Data)
	require.NotEmpty(t, want["uri"], "the uri key, which holds the password")
	sec.Data[engine.UsernameKey] = []byte("mallory")
	sec.Data["uri"] = []byte("postgres://elsewhere")
	require.NoError(t, c.Update(ctx, sec))
	require.Empty(t, rec.Events, "an Event before any repair")

	out, err := s.Sync(ctx, db)
	require.NoError(t, err)
	assert.Equal(t, dbv1.ReasonSecretGenerated, out.Condition.Reason, out.Condition.Message)
	require.NoError(t, c.Get(ctx, key, sec))
	assert.Equal(t, want, sec.Data, "the keys were not restored")

	require.Len(t, rec.Events, 1)
	event := <-rec.Events
	assert.Equal(t, "Normal "+ReasonSecretKeysRestored+" Restored keys uri, username of Secret "+key.Name+" changed by somebody else", event)
	for k, v := range want {
		assert.NotContains(t, event, string(v), "the Event holds the value of key %s", k)
	}
	assert.NotContains(t, event, "mallory")
	assert.NotContains(t, event, "elsewhere")

	_, err = s.Sync(ctx, db)
	require.NoError(t, err)
	assert.Empty(t, rec.Events, "an Event without a repair")
}

// drain empties the recorder's Events and returns them.
func drain(rec *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// TestSyncGeneratesTheReplicationSecret: the first sync creates
// <name>-replication, owned by the Database, with a random replication
// password and agent token that differ from each other and from another
// Database's; later syncs never change them, and a user's credentials
// Secret gets one all the same.
func TestSyncGeneratesTheReplicationSecret(t *testing.T) {
	ctx := context.Background()
	read := func(t *testing.T, c client.Client, db *dbv1.Database) *corev1.Secret {
		t.Helper()
		sec := &corev1.Secret{}
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: resources.ReplicationSecretName(db)}, sec))
		return sec
	}
	db := facettest.Database()
	c := facettest.Client(t, db)
	s := newSyncer(c, c, facet.WriterFor(c, &events.FakeRecorder{}, Name), instancetest.New())
	_, err := s.Sync(ctx, db)
	require.NoError(t, err)
	sec := read(t, c, db)
	password, token := string(sec.Data[resources.ReplicationPasswordKey]), string(sec.Data[resources.AgentTokenKey])
	assert.GreaterOrEqual(t, len(password), 40, "256 bits")
	assert.GreaterOrEqual(t, len(token), 40, "256 bits")
	assert.NotEqual(t, password, token)
	assert.True(t, metav1.IsControlledBy(sec, db), "owned by the Database")
	assert.Equal(t, resources.Labels(db, resources.ComponentReplication), sec.Labels)

	_, err = s.Sync(ctx, db)
	require.NoError(t, err)
	again := read(t, c, db)
	assert.Equal(t, sec.Data, again.Data, "regenerated")

	other := facettest.Database()
	other.Name = "other"
	other.UID = "uid-other"
	other.Spec.Credentials = &dbv1.CredentialsSpec{SecretName: "mine"}
	c2 := facettest.Client(t, other)
	_, err = newSyncer(c2, c2, facet.WriterFor(c2, &events.FakeRecorder{}, Name), instancetest.New()).Sync(ctx, other)
	require.NoError(t, err)
	assert.NotEqual(t, password, string(read(t, c2, other).Data[resources.ReplicationPasswordKey]), "the same password twice")
}
