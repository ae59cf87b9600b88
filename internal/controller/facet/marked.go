package facet

import (
	"context"
	"fmt"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/marker"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// Marks checks that the credentials and superuser Secrets of a Database,
// which carry no owner reference, are ones dbkeeper made: they carry its
// mark (marker) for their name and password. It remembers the
// resourceVersion each was last verified at, so a Secret is read from the
// API server only once it changed. The zero Marks (no key) checks nothing.
type Marks struct {
	Key      marker.Key
	verified sync.Map
}

// InUse reports whether db already uses its credentials: their password
// was set on the server (status.credentials.appliedResourceVersion), so the
// Secrets it has were made before dbkeeper marked its Secrets, or
// rotated by the user, and are its own.
func InUse(db *dbv1.Database) bool {
	return db.Status.Credentials != nil && db.Status.Credentials.AppliedResourceVersion != ""
}

// Check reads Secret name of db's namespace with r (from the API server:
// the data is needed) unless it was verified at version (a cached
// resourceVersion, "" when unknown), and returns it (nil when it does not
// exist or was verified before) with whether it carries a valid mark. A
// Secret that is neither marked, nor in use (InUse, or the Database's
// StatefulSet gives its pods a value of it: initdb took its password
// already, statefulSetUses), nor
// owned by db (an earlier dbkeeper made the credentials Secret with an
// owner reference to its Database, whose UID nobody knows before the
// Database exists) is NotOursError: it was planted under the name before
// the Database existed.
func (m *Marks) Check(ctx context.Context, r client.Reader, db *dbv1.Database, name, version string) (sec *corev1.Secret, marked bool, err error) {
	if len(m.Key) == 0 {
		return nil, true, nil
	}
	key := client.ObjectKey{Namespace: db.Namespace, Name: name}
	if v, ok := m.verified.Load(key); ok && version != "" && v == version {
		return nil, true, nil
	}
	sec, err = apply.Live(ctx, r, key, &corev1.Secret{})
	switch {
	case err != nil:
		return nil, false, fmt.Errorf("getting Secret %s: %w", name, err)
	case sec == nil:
		return nil, true, nil
	case m.Key.Verify(sec, engine.PasswordKey):
		m.Remember(sec)
		return sec, true, nil
	case InUse(db) || ownedBy(sec, db):
		return sec, false, nil
	}
	used, err := statefulSetUses(ctx, r, db, name)
	if err != nil || used {
		return sec, false, err
	}
	return sec, false, &NotOursError{Kind: "Secret", Name: name,
		Why: "it does not carry dbkeeper's mark (" + marker.Annotation + "): it was made by somebody else, and its password is not this Database's to take"}
}

// Remember records that sec, at its resourceVersion, carries a valid mark.
func (m *Marks) Remember(sec *corev1.Secret) {
	m.verified.Store(client.ObjectKeyFromObject(sec), sec.ResourceVersion)
}

// ownedBy reports whether sec has an owner reference to db (its UID).
func ownedBy(sec *corev1.Secret, db *dbv1.Database) bool {
	for _, ref := range sec.OwnerReferences {
		if ref.UID == db.UID {
			return true
		}
	}
	return false
}

// statefulSetUses reports whether db's StatefulSet exists, is db's, and
// gives its pods a value of Secret name: the password initdb took
// (POSTGRES_PASSWORD, from the superuser Secret, or from the credentials
// Secret in a StatefulSet made before the roles were separated). Such a
// Secret is already the server's; and no StatefulSet is made over an
// unmarked superuser Secret.
func statefulSetUses(ctx context.Context, r client.Reader, db *dbv1.Database, name string) (bool, error) {
	// typed, as the manager's cache holds StatefulSets
	sts, err := apply.Live(ctx, r, client.ObjectKey{Namespace: db.Namespace, Name: resources.StatefulSetName(db)}, &appsv1.StatefulSet{})
	if err != nil {
		return false, fmt.Errorf("getting the StatefulSet of %s: %w", db.Name, err)
	}
	if sts == nil || !resources.Belongs(db, sts) {
		return false, nil
	}
	pod := sts.Spec.Template.Spec
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == name {
				return true, nil
			}
		}
	}
	return false, nil
}
