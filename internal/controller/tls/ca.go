package tls

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// ensureCA reads the CA Secret, creating it once when it does not exist,
// and returns the CA that signs and what to trust (resources.CABundle). A
// CA Secret somebody broke is reported, not replaced: the clients trust
// it.
func (s *syncer) ensureCA(ctx context.Context, db *dbv1.Database) (pki.KeyPair, []byte, error) {
	name := resources.CASecretName(db)
	live, err := apply.Live(ctx, s.reader, client.ObjectKey{Namespace: db.Namespace, Name: name}, &corev1.Secret{})
	if err != nil {
		return pki.KeyPair{}, nil, fmt.Errorf("getting Secret %s: %w", name, err)
	}
	if live != nil {
		// a CA Secret somebody planted before the Database existed would
		// have every certificate issued by a key they hold
		if err := facet.OurSecret(db, live); err != nil {
			return pki.KeyPair{}, nil, err
		}
		ca := pki.KeyPair{Cert: live.Data[resources.CACertKey], Key: live.Data[resources.CAKeyKey]}
		if _, err := pki.ParseCertificate(ca.Cert); err != nil {
			return pki.KeyPair{}, nil, reconcile.TerminalError(fmt.Errorf("secret %s: %s: %w; delete it to get a new CA (clients must then take the new ca.crt)", name, resources.CACertKey, err))
		}
		return ca, resources.CABundle(live), nil
	}
	ca, err := pki.NewCA(caCommonName(db), s.now())
	if err != nil {
		return pki.KeyPair{}, nil, err
	}
	sec := resources.CASecret(db, ca.Cert, ca.Key)
	log.FromContext(ctx).Info("Creating CA Secret", "Secret", klog.KObj(sec))
	err = s.client.Create(ctx, sec, client.FieldOwner(facet.FieldOwner(Name)))
	if apierrors.IsAlreadyExists(err) {
		// Made by a reconcile the cache had not seen: read that one.
		return pki.KeyPair{}, nil, fmt.Errorf("creating Secret %s: it appeared meanwhile, reading it next time: %w", name, err)
	}
	if err != nil {
		return pki.KeyPair{}, nil, fmt.Errorf("creating Secret %s: %w", name, err)
	}
	return ca, resources.CABundle(sec), nil
}

// caCommonName is the subject of the Database's CA (and of the next one
// in a rotation).
func caCommonName(db *dbv1.Database) string {
	return fmt.Sprintf("%s.%s dbkeeper CA", db.Name, db.Namespace)
}
