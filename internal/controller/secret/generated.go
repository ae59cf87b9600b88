package secret

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// ReasonSecretKeysRestored is the reason of the Event of a generated
// Secret whose keys derived from the password somebody else changed and
// dbkeeper set back.
const ReasonSecretKeysRestored = "SecretKeysRestored"

// restoreData puts back the keys of a generated Secret derived from its
// password (username, database, host, port, uri) when somebody changed or
// removed them, and reports a Secret that lost its password, which
// dbkeeper cannot restore and never regenerates. It returns nil when the
// data is right.
func (s *syncer) restoreData(ctx context.Context, db *dbv1.Database, cachedVersion string) (*facet.Outcome, error) {
	key := client.ObjectKey{Namespace: db.Namespace, Name: resources.GeneratedSecretName(db)}
	tlsVersion, err := s.tlsVersion(ctx, db)
	if err != nil {
		return nil, err
	}
	version := cachedVersion + "/" + tlsVersion
	if v, ok := s.checked.Load(key); ok && v == version {
		return nil, nil
	}
	eng, err := engine.For(db.Spec.Engine)
	if err != nil {
		return nil, reconcile.TerminalError(err)
	}
	sec := &corev1.Secret{}
	if err := s.reader.Get(ctx, key, sec); err != nil {
		return nil, fmt.Errorf("getting Secret %s: %w", key.Name, err)
	}
	if _, ok := sec.Data[engine.PasswordKey]; !ok {
		return &facet.Outcome{Condition: conditions.False(dbv1.ConditionCredentialsReady, dbv1.ReasonSecretInvalid, fmt.Sprintf(
			"Secret %s lost its %s key: dbkeeper never generates a second password, since the database keeps the first; put it back",
			key.Name, engine.PasswordKey))}, nil
	}
	tls, err := s.clientTLS(ctx, db, sec.Data)
	if err != nil {
		return nil, err
	}
	if drift := resources.CredentialsDrift(db, eng, sec.Data, tls); len(drift) > 0 {
		patch := client.MergeFrom(sec.DeepCopy())
		keys := make([]string, 0, len(drift))
		for k, v := range drift {
			sec.Data[k] = v
			keys = append(keys, k)
		}
		slices.Sort(keys)
		log.FromContext(ctx).Info("Restoring credentials Secret keys changed by somebody else", "Secret", klog.KObj(sec), "keys", keys)
		if err := s.client.Patch(ctx, sec, patch, client.FieldOwner(facet.FieldOwner(Name))); err != nil {
			return nil, fmt.Errorf("restoring keys %s of Secret %s: %w", strings.Join(keys, ","), key.Name, err)
		}
		// Key names only: the values are the credentials.
		s.writer.Eventf(db, sec, corev1.EventTypeNormal, ReasonSecretKeysRestored, "RestoreKeys",
			"Restored keys %s of Secret %s changed by somebody else", strings.Join(keys, ", "), key.Name)
	}
	s.checked.Store(key, sec.ResourceVersion+"/"+tlsVersion)
	return nil, nil
}

// ensureGenerated creates the generated Secret if it does not exist and keeps
// its labels and the keys derived from the password, and takes off the
// owner reference to the Database that earlier versions gave it. The
// password is written exactly once, by Create: a Secret that already
// exists, in the cache or only on the server, keeps its password.
func (s *syncer) ensureGenerated(ctx context.Context, db *dbv1.Database) (facet.Outcome, error) {
	name := resources.GeneratedSecretName(db)
	t := dbv1.ConditionCredentialsReady
	partial := &metav1.PartialObjectMetadata{}
	partial.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	live, err := apply.Live(ctx, s.client, client.ObjectKey{Namespace: db.Namespace, Name: name}, partial)
	switch {
	case err != nil:
		return facet.Outcome{}, fmt.Errorf("getting Secret %s: %w", name, err)
	case live == nil:
		created, err := s.create(ctx, db)
		if err != nil {
			return facet.Outcome{}, err
		}
		if !created {
			// It exists on the server but not in our label-selected cache:
			// a Secret somebody else made under the generated name.
			return s.adoptForeign(ctx, db)
		}
	default:
		if err := s.made(ctx, db, live); err != nil {
			return facet.Outcome{}, err
		}
		// A conflict: the Secret changed since the cache saw it, and that
		// change brings us back.
		if _, err := facet.Disown(ctx, s.client, db, live); err != nil && !apierrors.IsConflict(err) {
			return facet.Outcome{}, err
		}
		if _, err := s.writer.Apply(ctx, live, resources.CredentialsSecretMetadata(db)); err != nil {
			return facet.Outcome{}, fmt.Errorf("applying metadata of Secret %s: %w", name, err)
		}
		if out, err := s.restoreData(ctx, db, live.ResourceVersion); err != nil || out != nil {
			return ptr.Deref(out, facet.Outcome{}), err
		}
	}
	return facet.Outcome{
		Condition: conditions.True(t, dbv1.ReasonSecretGenerated, fmt.Sprintf("dbkeeper generated Secret %s and keeps it", name)),
		Status:    dbv1ac.DatabaseStatus().WithCredentialsSecret(name),
	}, nil
}

// create makes the Secret with a new password; false means it already existed.
func (s *syncer) create(ctx context.Context, db *dbv1.Database) (bool, error) {
	eng, err := engine.For(db.Spec.Engine)
	if err != nil {
		return false, reconcile.TerminalError(err)
	}
	password, err := NewPassword()
	if err != nil {
		return false, err
	}
	tls, err := s.clientTLS(ctx, db, nil)
	if err != nil {
		return false, err
	}
	sec := resources.CredentialsSecret(db, eng, password, tls)
	s.marks.Key.Mark(sec, engine.PasswordKey)
	log.FromContext(ctx).Info("Generating credentials Secret", "Secret", klog.KObj(sec))
	err = s.client.Create(ctx, sec, client.FieldOwner(facet.FieldOwner(Name)))
	if apierrors.IsAlreadyExists(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("creating Secret %s: %w", sec.Name, err)
	}
	// Not remembered as checked: the next reconcile compares it with the
	// TLS Secret's version, which may have arrived meanwhile.
	return true, nil
}

// adoptForeign handles a Secret of the generated name that exists on the
// server but not in the label-selected cache. One dbkeeper made whose
// labels somebody took off (it still carries the record of the secret
// controller's last apply) gets them back and keeps its password. Any
// other is refused: whoever may create Secrets in the namespace could
// otherwise choose the password of a Database not yet made. A Secret of
// the user's is named in spec.credentials.secretName.
func (s *syncer) adoptForeign(ctx context.Context, db *dbv1.Database) (facet.Outcome, error) {
	name := resources.GeneratedSecretName(db)
	partial := &metav1.PartialObjectMetadata{}
	partial.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := s.reader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, partial); err != nil {
		return facet.Outcome{}, fmt.Errorf("getting existing Secret %s: %w", name, err)
	}
	if _, err := s.writer.Apply(ctx, nil, resources.CredentialsSecretMetadata(db)); err != nil {
		var taken *facet.NotOursError
		if errors.As(err, &taken) {
			taken.Why += "; to use the password it holds, name it in spec.credentials.secretName"
			return facet.Outcome{}, taken
		}
		return facet.Outcome{}, fmt.Errorf("labelling Secret %s again: %w", name, err)
	}
	log.FromContext(ctx).Info("Labelled the credentials Secret again", "Secret", klog.KObj(partial))
	return facet.Outcome{
		Condition: conditions.True(dbv1.ConditionCredentialsReady, dbv1.ReasonSecretGenerated, fmt.Sprintf("dbkeeper generated Secret %s and keeps it", name)),
		Status:    dbv1ac.DatabaseStatus().WithCredentialsSecret(name),
	}, nil
}
