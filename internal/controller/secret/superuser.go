package secret

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// superuser is the outcome of ensureSuperuser.
type superuser struct {
	login instance.Login
	// failed is the condition of a superuser Secret dbkeeper cannot use.
	failed *metav1.Condition
}

// ensureSuperuser creates <name>-superuser once, with a new password,
// and never regenerates it (the server keeps the first), like the
// generated credentials Secret; it keeps its labels and returns its login,
// read from the API server.
func (s *syncer) ensureSuperuser(ctx context.Context, db *dbv1.Database, eng engine.Engine, appRole string) (superuser, error) {
	name := resources.SuperuserSecretName(db)
	key := client.ObjectKey{Namespace: db.Namespace, Name: name}
	sec, err := apply.Live(ctx, s.reader, key, &corev1.Secret{})
	if err != nil {
		return superuser{}, fmt.Errorf("getting Secret %s: %w", name, err)
	}
	if sec == nil {
		password, err := NewPassword()
		if err != nil {
			return superuser{}, err
		}
		sec = resources.SuperuserSecret(db, resources.SuperuserName(eng, appRole), password)
		s.marks.Key.Mark(sec, engine.PasswordKey)
		log.FromContext(ctx).Info("Generating superuser Secret", "Secret", klog.KObj(sec))
		err = s.client.Create(ctx, sec, client.FieldOwner(facet.FieldOwner(Name)))
		if apierrors.IsAlreadyExists(err) {
			return superuser{}, fmt.Errorf("creating Secret %s: it appeared meanwhile, reading it next time: %w", name, err)
		}
		if err != nil {
			return superuser{}, fmt.Errorf("creating Secret %s: %w", name, err)
		}
	} else {
		// A superuser Secret planted before the Database would choose
		// the superuser's password: refused unless dbkeeper made it.
		if err := s.made(ctx, db, sec); err != nil {
			return superuser{}, err
		}
		// The Writer refuses one that is not labelled dbkeeper's for this
		// name (facet.NotOursError) before its login is used.
		partial := &metav1.PartialObjectMetadata{}
		partial.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		partial.ObjectMeta = sec.ObjectMeta
		if _, err := s.writer.Apply(ctx, partial, resources.SuperuserSecretMetadata(db)); err != nil {
			return superuser{}, fmt.Errorf("applying metadata of Secret %s: %w", name, err)
		}
	}
	login := instance.Login{User: string(sec.Data[engine.UsernameKey]), Password: string(sec.Data[engine.PasswordKey]), Superuser: true}
	if login.User == "" || login.Password == "" {
		cond := conditions.False(dbv1.ConditionCredentialsReady, dbv1.ReasonSecretInvalid, fmt.Sprintf(
			"Secret %s lacks the key %s or %s: dbkeeper never generates a second superuser password, since the server keeps the first; put it back",
			name, engine.UsernameKey, engine.PasswordKey))
		return superuser{failed: &cond}, nil
	}
	return superuser{login: login}, nil
}
