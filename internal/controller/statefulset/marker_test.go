package statefulset

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/marker"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestNoPodsOverAPlantedSuperuserSecret (issue 29): the engine pods' initdb
// takes the superuser's password from <name>-superuser, so while a
// Database does not use its credentials yet, a superuser Secret without
// dbkeeper's mark (planted under the name, with its labels, before the
// Database existed) stops the StatefulSet (NotOursError): no pod runs
// initdb with a password somebody chose. A marked one, one a Database
// already uses, or one whose Database already runs (an earlier dbkeeper's),
// does not. Before, the StatefulSet was made at once.
func TestNoPodsOverAPlantedSuperuserSecret(t *testing.T) {
	key, err := marker.NewKey()
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		mark, inUse, running bool
		refused              bool
	}{
		"planted":      {refused: true},
		"marked":       {mark: true},
		"already used": {inUse: true},
		// an earlier dbkeeper's Database, whose status says nothing of
		// its credentials: its pods took the password already
		"running before the marks": {running: true},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			db := facettest.Database()
			if tc.inUse {
				db.Status.Credentials = &dbv1.CredentialsStatus{Secret: resources.GeneratedSecretName(db), AppliedResourceVersion: "3"}
			}
			sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: resources.SuperuserSecretName(db),
				Labels: resources.Labels(db, resources.ComponentSuperuser)},
				Data: map[string][]byte{engine.UsernameKey: []byte("dbkeeper"), engine.PasswordKey: []byte("chosen-by-them")}}
			if tc.mark {
				key.Mark(sec, engine.PasswordKey)
			}
			objs := []client.Object{db, sec}
			if tc.running {
				// its pods took the superuser's password from the Secret
				objs = append(objs, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: resources.StatefulSetName(db),
					Labels: resources.Labels(db, resources.ComponentDatabase)},
					Spec: appsv1.StatefulSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
						Name: "engine", Env: engine.Postgres{}.Env(sec.Name)}}}}}})
			}
			c := facettest.Client(t, objs...)
			s := newSyncer(c, facet.WriterFor(c, &events.FakeRecorder{}, Name))
			s.marks.Key = key
			_, err := s.Sync(ctx, db)
			err2 := c.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: resources.StatefulSetName(db)}, &appsv1.StatefulSet{})
			if !tc.refused {
				require.NoError(t, err)
				assert.NoError(t, err2, "the StatefulSet")
				return
			}
			var taken *facet.NotOursError
			require.ErrorAs(t, err, &taken)
			assert.Equal(t, sec.Name, taken.Name)
			assert.True(t, apierrors.IsNotFound(err2), "a StatefulSet whose initdb would take the planted password: %v", err2)
		})
	}
}
