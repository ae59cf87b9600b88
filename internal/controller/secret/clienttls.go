package secret

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// tlsVersion identifies what the generated Secret's TLS keys derive from:
// whether the server uses TLS and which CA its TLS Secret holds (its
// tls.dbkeeper.io/ca-sha256 annotation, or its resourceVersion for a
// Secret without one, as cert-manager's), from the metadata cache, so
// that the data is read again only when one of them changed; a renewed
// certificate from the same CA changes nothing here.
func (s *syncer) tlsVersion(ctx context.Context, db *dbv1.Database) (string, error) {
	state, err := facet.TLSState(ctx, s.client, db)
	if err != nil {
		return "", err
	}
	if !state.On() {
		return string(state), nil
	}
	live, err := s.tlsMetadata(ctx, db)
	if err != nil || live == nil {
		return string(state) + "/-", err
	}
	if sum := live.Annotations[resources.AnnotationCASHA256]; sum != "" {
		return string(state) + "/" + sum, nil
	}
	return string(state) + "/" + live.ResourceVersion, nil
}

func (s *syncer) tlsMetadata(ctx context.Context, db *dbv1.Database) (*metav1.PartialObjectMetadata, error) {
	partial := &metav1.PartialObjectMetadata{}
	partial.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	r := s.metadata
	if r == nil {
		r = s.client
	}
	live, err := apply.Live(ctx, r, client.ObjectKey{Namespace: db.Namespace, Name: resources.TLSSecretName(db)}, partial)
	if err != nil {
		return nil, fmt.Errorf("getting Secret %s: %w", resources.TLSSecretName(db), err)
	}
	return live, nil
}

// clientTLS is what the generated Secret says of the server's TLS: on or
// off, and the ca.crt of the server's TLS Secret (nil while that Secret
// does not exist). have is the generated Secret's data (nil when it is
// being created): when its ca.crt is the one the TLS Secret's annotation
// names, the TLS Secret is not read.
func (s *syncer) clientTLS(ctx context.Context, db *dbv1.Database, have map[string][]byte) (resources.ClientTLS, error) {
	state, err := facet.TLSState(ctx, s.client, db)
	if err != nil || !state.On() {
		return resources.ClientTLS{}, err
	}
	tls := resources.ClientTLS{On: resources.TLSOn}
	meta, err := s.tlsMetadata(ctx, db)
	if err != nil {
		return resources.ClientTLS{}, err
	}
	if meta == nil && len(have[resources.CAKey]) == 0 {
		return tls, nil // no CA yet: the TLS Secret's arrival brings us back
	}
	sum := ""
	if meta != nil {
		sum = meta.Annotations[resources.AnnotationCASHA256]
	}
	if sum != "" && len(have[resources.CAKey]) > 0 && resources.CASHA256(have[resources.CAKey]) == sum {
		tls.CA = have[resources.CAKey]
		return tls, nil
	}
	name := resources.TLSSecretName(db)
	sec, err := apply.Live(ctx, s.reader, client.ObjectKey{Namespace: db.Namespace, Name: name}, &corev1.Secret{})
	if err != nil {
		return resources.ClientTLS{}, fmt.Errorf("getting Secret %s: %w", name, err)
	}
	if sec != nil {
		tls.CA = sec.Data[resources.CACertKey]
	}
	return tls, nil
}
