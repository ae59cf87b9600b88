package secret

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/marker"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestPlantedSecretsAreRefused (issue 29): whoever may create Secrets in a
// namespace could make <name>-superuser or <name>-credentials, with
// dbkeeper's labels, before the Database exists, and so choose its
// passwords. The Secrets dbkeeper makes carry its mark (marker: an HMAC of
// namespace, name and password with the manager's key); one without it is
// refused (NotOursError, nothing written to it, no login used) unless the
// Database already uses it (its password was set on the server: made
// before the marks, or rotated by the user), which is then marked. One a
// deletion policy kept, marked, is adopted by a new Database of the name.
// Before, each planted Secret was adopted and its password used.
func TestPlantedSecretsAreRefused(t *testing.T) {
	key, err := marker.NewKey()
	require.NoError(t, err)
	planted := func(db *dbv1.Database, name, component string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: name, Labels: resources.Labels(db, component)},
			Data: map[string][]byte{engine.UsernameKey: []byte("dbkeeper"), engine.PasswordKey: []byte("chosen-by-them")}}
	}

	t.Run("fresh Database: made and marked", func(t *testing.T) {
		f := newServerFixture(t, facettest.Database())
		f.s.marks.Key = key
		f.sync(t)
		for _, name := range []string{resources.GeneratedSecretName(f.db), resources.SuperuserSecretName(f.db)} {
			assert.True(t, key.Verify(f.secret(t, name), engine.PasswordKey), "Secret %s carries dbkeeper's mark", name)
		}
		cond, _ := f.sync(t)
		assert.Equal(t, metav1.ConditionTrue, cond.Status, "%s: %s", cond.Reason, cond.Message)
	})

	for _, tc := range []struct{ name, component string }{
		{"superuser", resources.ComponentSuperuser},
		{"credentials", resources.ComponentCredentials},
	} {
		t.Run("planted "+tc.name, func(t *testing.T) {
			db := facettest.Database()
			name := resources.SuperuserSecretName(db)
			if tc.component == resources.ComponentCredentials {
				name = resources.GeneratedSecretName(db)
			}
			sec := planted(db, name, tc.component)
			f := newServerFixture(t, db, sec)
			f.s.marks.Key = key
			before := f.secret(t, name)
			_, err := f.s.Sync(context.Background(), f.db)
			var taken *facet.NotOursError
			require.ErrorAs(t, err, &taken)
			assert.Equal(t, name, taken.Name)
			assert.Contains(t, taken.Why, marker.Annotation)
			after := f.secret(t, name)
			assert.Equal(t, before.ResourceVersion, after.ResourceVersion, "the planted Secret was written")
			assert.False(t, f.servers.CanLogin(f.db, "dbkeeper", "chosen-by-them"), "the planted password reached the server")
		})
	}

	t.Run("planted credentials beside a running StatefulSet", func(t *testing.T) {
		// the StatefulSet proves only the Secret its pods take a value
		// from (the superuser's): a credentials Secret planted beside it
		// is still refused (before, any unmarked Secret of a Database
		// whose StatefulSet existed was taken as in use, and marked)
		db := facettest.Database()
		sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: resources.StatefulSetName(db),
			Labels: resources.Labels(db, resources.ComponentDatabase)},
			Spec: appsv1.StatefulSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "engine", Env: engine.Postgres{}.Env(resources.SuperuserSecretName(db))}}}}}}
		name := resources.GeneratedSecretName(db)
		f := newServerFixture(t, db, sts, planted(db, name, resources.ComponentCredentials))
		f.s.marks.Key = key
		before := f.secret(t, name)
		_, err := f.s.Sync(context.Background(), f.db)
		var taken *facet.NotOursError
		require.ErrorAs(t, err, &taken)
		assert.Equal(t, name, taken.Name)
		assert.Equal(t, before.ResourceVersion, f.secret(t, name).ResourceVersion, "the planted Secret was marked")
	})

	t.Run("kept by Retain, marked: adopted", func(t *testing.T) {
		db := facettest.Database()
		kept := planted(db, resources.SuperuserSecretName(db), resources.ComponentSuperuser)
		key.Mark(kept, engine.PasswordKey)
		f := newServerFixture(t, db, kept)
		f.s.marks.Key = key
		_, err := f.s.Sync(context.Background(), f.db)
		require.NoError(t, err)
	})

	t.Run("made by an earlier dbkeeper with an owner reference: marked", func(t *testing.T) {
		db := facettest.Database()
		old := planted(db, resources.GeneratedSecretName(db), resources.ComponentCredentials)
		old.OwnerReferences = []metav1.OwnerReference{{APIVersion: dbv1.GroupVersion.String(), Kind: "Database", Name: db.Name, UID: db.UID}}
		f := newServerFixture(t, db, old)
		f.s.marks.Key = key
		_, err := f.s.Sync(context.Background(), f.db)
		require.NoError(t, err)
		assert.True(t, key.Verify(f.secret(t, old.Name), engine.PasswordKey), "marked")
	})

	t.Run("in use before the marks: marked", func(t *testing.T) {
		db := facettest.Database()
		f := newServerFixture(t, db)
		f.sync(t) // made without a key: unmarked, as an earlier dbkeeper did
		_, db = f.sync(t)
		require.NotEmpty(t, appliedVersion(db, resources.GeneratedSecretName(db)), "the password set on the server")
		f.s.marks.Key = key
		cond, _ := f.sync(t)
		assert.Equal(t, metav1.ConditionTrue, cond.Status, "%s: %s", cond.Reason, cond.Message)
		for _, name := range []string{resources.GeneratedSecretName(db), resources.SuperuserSecretName(db)} {
			sec := &corev1.Secret{}
			require.NoError(t, f.c.Get(context.Background(), client.ObjectKey{Namespace: db.Namespace, Name: name}, sec))
			assert.True(t, key.Verify(sec, engine.PasswordKey), "Secret %s marked", name)
		}
	})
}
