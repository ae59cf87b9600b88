package integration

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

func password(t require.TestingT, namespace, secretName string) string {
	sec := &corev1.Secret{}
	require.NoError(t, admin.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: secretName}, sec))
	return string(sec.Data["password"])
}

// TestPasswordIsNeverRegenerated checks the generated password survives a
// spec edit, the Secret falling out of the operator's cache, and a restart
// of the operator; and that it appears in no log, Event or status.
func TestPasswordIsNeverRegenerated(t *testing.T) {
	ns := newNamespace(t)
	op := startOperator(t, ns, "*")
	db := convergeReady(t, newDatabase(ns, "stable"))
	ctx := context.Background()
	secretName := resources.GeneratedSecretName(db)
	original := password(t, ns, secretName)
	raw, err := base64.RawURLEncoding.DecodeString(original)
	require.NoError(t, err, "password is unpadded base64url")
	assert.GreaterOrEqual(t, len(raw)*8, 128, "password entropy in bits")

	// A spec edit: new generation, every facet reconciles.
	patchDatabase(t, db, func(d *dbv1.Database) { d.Spec.Storage.Size = ptr.To(resource.MustParse("20Gi")) })
	markStatefulSetReady(t, db)
	waitCondition(t, db, dbv1.ConditionReady, metav1.ConditionTrue, dbv1.ReasonReady)
	assert.Equal(t, original, password(t, ns, secretName), "after a spec edit")

	// Without the managed-by label the Secret leaves the label-selected
	// cache; the operator must find it on the server, not make a new one.
	sec := &corev1.Secret{}
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: secretName}, sec))
	patch := client.MergeFrom(sec.DeepCopy())
	delete(sec.Labels, resources.LabelManagedBy)
	require.NoError(t, admin.Patch(ctx, sec, patch))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &corev1.Secret{}
		if assert.NoError(c, admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: secretName}, got)) {
			assert.Equal(c, resources.ManagedBy, got.Labels[resources.LabelManagedBy], "label restored")
		}
	}, timeout, tick)
	assert.Equal(t, original, password(t, ns, secretName), "after the Secret left the cache")
	waitCondition(t, db, dbv1.ConditionCredentialsReady, metav1.ConditionTrue, dbv1.ReasonSecretGenerated)

	// A restart of the operator.
	op.Stop()
	startOperator(t, ns, "*")
	annotate(t, db, "example.com/poke", "after-restart")
	waitCondition(t, db, dbv1.ConditionReady, metav1.ConditionTrue, dbv1.ReasonReady)
	assert.Equal(t, original, password(t, ns, secretName), "after a restart")

	// The password is nowhere but in the Secret.
	assert.Empty(t, linesContaining(logs.String(), original), "password in the operator's logs")
	events := &eventsv1.EventList{}
	require.NoError(t, admin.List(ctx, events, client.InNamespace(ns)))
	require.NotEmpty(t, events.Items)
	for _, e := range events.Items {
		assert.NotContains(t, e.Note, original, "password in Event %s", e.Name)
	}
	dbJSON, err := json.Marshal(getDatabase(t, db))
	require.NoError(t, err)
	assert.NotContains(t, string(dbJSON), original, "password in the Database")
	assert.Empty(t, linesContaining(logs.String(), base64.StdEncoding.EncodeToString([]byte(original))), "encoded password in the logs")
}

// TestUserSecret names a Secret the user manages: missing, then without a
// password, then complete but without the annotation that lets this
// Database use it, then with it; dbkeeper reports each state as soon as the
// Secret changes (it is watched, not polled) and never modifies it.
func TestUserSecret(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, ns, "*")
	ctx := context.Background()
	db := createDatabase(t, newDatabase(ns, "byo", func(db *dbv1.Database) {
		db.Spec.Credentials = &dbv1.CredentialsSpec{SecretName: "byo-login"}
	}))

	cond := waitCondition(t, db, dbv1.ConditionCredentialsReady, metav1.ConditionFalse, dbv1.ReasonSecretNotFound)
	assert.Contains(t, cond.Message, "byo-login")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ready := condition(c, db, dbv1.ConditionReady)
		if assert.NotNil(c, ready) {
			assert.Equal(c, metav1.ConditionFalse, ready.Status)
			assert.Contains(c, ready.Message, dbv1.ConditionCredentialsReady+": ")
		}
	}, timeout, tick)

	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "byo-login"},
		Data:       map[string][]byte{"username": []byte("owner")},
	}
	require.NoError(t, admin.Create(ctx, sec))
	// The user's Secret is watched (metadata only): no poke, no poll.
	cond = waitCondition(t, db, dbv1.ConditionCredentialsReady, metav1.ConditionFalse, dbv1.ReasonSecretInvalid)
	assert.Contains(t, cond.Message, "password")

	patch := client.MergeFrom(sec.DeepCopy())
	sec.Data["password"] = []byte("chosen-by-the-user")
	require.NoError(t, admin.Patch(ctx, sec, patch))
	// complete, but it does not say this Database may use it (issue 29)
	cond = waitCondition(t, db, dbv1.ConditionCredentialsReady, metav1.ConditionFalse, dbv1.ReasonSecretNotOptedIn)
	assert.Contains(t, cond.Message, dbv1.AnnotationCredentialsFor+": byo")

	patch = client.MergeFrom(sec.DeepCopy())
	sec.Annotations = map[string]string{dbv1.AnnotationCredentialsFor: "byo"}
	require.NoError(t, admin.Patch(ctx, sec, patch))
	waitCondition(t, db, dbv1.ConditionCredentialsReady, metav1.ConditionTrue, dbv1.ReasonSecretProvided)
	markStatefulSetReady(t, db)
	waitCondition(t, db, dbv1.ConditionReady, metav1.ConditionTrue, dbv1.ReasonReady)

	got := &corev1.Secret{}
	require.NoError(t, admin.Get(ctx, client.ObjectKeyFromObject(sec), got))
	assert.Equal(t, sec.ResourceVersion, got.ResourceVersion, "the user's Secret was modified")
	assert.Empty(t, got.OwnerReferences)
	assert.Equal(t, "byo-login", getDatabase(t, db).Status.CredentialsSecret)
	assert.True(t, apierrors.IsNotFound(admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "byo-credentials"}, &corev1.Secret{})),
		"a Secret was generated although the user named one")
}

// TestRotationLeavesNoTrace rotates the generated password and a user's
// Secret's, waits until the (in-memory) servers have them, and searches the
// operator's logs, the Events, the Databases and their annotations for the
// new passwords, their base64 and the parts of their SCRAM verifiers
// (StoredKey, ServerKey), and for the superuser's password.
func TestRotationLeavesNoTrace(t *testing.T) {
	ns := newNamespace(t)
	op := startOperator(t, ns, "*")
	ctx := context.Background()
	user := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mine", Annotations: map[string]string{dbv1.AnnotationCredentialsFor: "mine-db"}},
		Data: map[string][]byte{"username": []byte("shop"), "password": []byte("first-password-of-the-user")}}
	require.NoError(t, admin.Create(ctx, user))
	generated := convergeReady(t, newDatabase(ns, "gen"))
	provided := convergeReady(t, newDatabase(ns, "mine-db", func(db *dbv1.Database) {
		db.Spec.Credentials = &dbv1.CredentialsSpec{SecretName: user.Name}
	}))

	var forbidden []string
	for _, tc := range []struct {
		db       *dbv1.Database
		secret   string
		role     string
		password string
	}{
		{generated, resources.GeneratedSecretName(generated), "app", "rotated-generated-password-1"},
		{provided, user.Name, "shop", "rotated-user-password-2"},
	} {
		sec := &corev1.Secret{}
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: tc.secret}, sec))
		old := string(sec.Data["password"])
		sec.Data["password"] = []byte(tc.password)
		require.NoError(t, admin.Update(ctx, sec))
		cond := waitCondition(t, tc.db, dbv1.ConditionCredentialsReady, metav1.ConditionTrue, dbv1.ReasonPasswordRotated)
		t.Logf("CredentialsReady of %s: %s", tc.db.Name, cond.Message)
		assert.True(t, op.Servers.CanLogin(tc.db, tc.role, tc.password), "the server of %s lacks the new password", tc.db.Name)
		assert.False(t, op.Servers.CanLogin(tc.db, tc.role, old), "the server of %s still takes the old password", tc.db.Name)
		require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: tc.secret}, sec))
		assert.Equal(t, sec.ResourceVersion, getDatabase(t, tc.db).Status.Credentials.AppliedResourceVersion)

		verifier := op.Servers.Verifier(tc.db, tc.role)
		require.True(t, strings.HasPrefix(verifier, "SCRAM-SHA-256$"), "not a verifier")
		keys := strings.Split(verifier[strings.LastIndex(verifier, "$")+1:], ":")
		require.Len(t, keys, 2, "StoredKey:ServerKey")
		forbidden = append(forbidden, tc.password, base64.StdEncoding.EncodeToString([]byte(tc.password)),
			base64.RawURLEncoding.EncodeToString([]byte(tc.password)), verifier, keys[0], keys[1],
			password(t, ns, resources.SuperuserSecretName(tc.db)))
	}

	events := &eventsv1.EventList{}
	require.NoError(t, admin.List(ctx, events, client.InNamespace(ns)))
	require.NotEmpty(t, events.Items)
	var notes []string
	for _, e := range events.Items {
		notes = append(notes, e.Note)
	}
	assert.Contains(t, strings.Join(notes, "\n"), "Set the password of role shop from Secret mine", "no Event of the rotation")
	var dbs []string
	for _, db := range []*dbv1.Database{generated, provided} {
		raw, err := json.Marshal(getDatabase(t, db))
		require.NoError(t, err)
		dbs = append(dbs, string(raw))
	}
	for i, secret := range forbidden {
		assert.Empty(t, linesContaining(logs.String(), secret), "secret %d in the operator's logs", i)
		assert.Empty(t, linesContaining(strings.Join(notes, "\n"), secret), "secret %d in an Event", i)
		assert.Empty(t, linesContaining(strings.Join(dbs, "\n"), secret), "secret %d in a Database (status, annotations)", i)
	}
}

// linesContaining returns the lines of text that contain secret, with the
// secret masked, so that a failure shows where it leaked without leaking it.
func linesContaining(text, secret string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, secret) {
			out = append(out, strings.ReplaceAll(line, secret, "<secret>"))
		}
	}
	return out
}
