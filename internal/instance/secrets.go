package instance

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SecretReader reads Secrets from the API server (the manager caches no
// Secret data), but again only once a Secret changed: the manager's
// metadata cache of Secrets (Meta) says its resourceVersion, and a Secret
// read before at that version is answered from memory. The agents' token
// and the Database's CA are read for every call to an agent, several a
// second while a failover runs: uncached, those reads ran into the
// client's rate limit, and a status call that waits for the limiter
// reads as an agent that does not answer (a failover of a primary that
// only restarted its server, in the failover suite). Only Secrets that
// were read are kept, and only until the manager stops. Without Meta, or
// when it cannot tell, every read goes to Live.
type SecretReader struct {
	// Live reads from the API server.
	Live client.Reader
	// Meta reads PartialObjectMetadata of Secrets from a cache.
	Meta client.Reader

	mu   sync.Mutex
	read map[types.NamespacedName]*corev1.Secret
}

var _ client.Reader = (*SecretReader)(nil)

// NewSecretReader returns a SecretReader over live and meta (nil: none).
func NewSecretReader(live, meta client.Reader) *SecretReader {
	return &SecretReader{Live: live, Meta: meta, read: map[types.NamespacedName]*corev1.Secret{}}
}

// Get implements client.Reader.
func (r *SecretReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	sec, ok := obj.(*corev1.Secret)
	if !ok || r.Meta == nil {
		return r.Live.Get(ctx, key, obj, opts...)
	}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := r.Meta.Get(ctx, key, meta); err == nil {
		r.mu.Lock()
		known := r.read[key]
		r.mu.Unlock()
		if known != nil && known.ResourceVersion == meta.ResourceVersion {
			known.DeepCopyInto(sec)
			return nil
		}
	}
	if err := r.Live.Get(ctx, key, sec, opts...); err != nil {
		r.mu.Lock()
		delete(r.read, key)
		r.mu.Unlock()
		return err
	}
	r.mu.Lock()
	r.read[key] = sec.DeepCopy()
	r.mu.Unlock()
	return nil
}

// List implements client.Reader: always from Live.
func (r *SecretReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return r.Live.List(ctx, list, opts...)
}
