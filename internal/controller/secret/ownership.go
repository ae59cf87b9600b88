package secret

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/engine"
)

// ours reads the metadata of Secret name from the API server and returns
// facet.NotOursError unless it is db's (facet.OurSecret).
func (s *syncer) ours(ctx context.Context, db *dbv1.Database, name string) error {
	partial := &metav1.PartialObjectMetadata{}
	partial.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := s.reader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, partial); err != nil {
		return fmt.Errorf("getting Secret %s: %w", name, err)
	}
	return facet.OurSecret(db, partial)
}

// made checks that the credentials or superuser Secret found under its
// generated name (live) is one dbkeeper made (facet.Marks.Check): marked,
// or used by the Database already, which is then marked; otherwise
// facet.NotOursError.
func (s *syncer) made(ctx context.Context, db *dbv1.Database, live client.Object) error {
	sec, marked, err := s.marks.Check(ctx, s.reader, db, live.GetName(), live.GetResourceVersion())
	if err != nil || marked || sec == nil {
		return err
	}
	patch := client.MergeFrom(sec.DeepCopy())
	s.marks.Key.Mark(sec, engine.PasswordKey)
	if err := s.client.Patch(ctx, sec, patch, client.FieldOwner(facet.FieldOwner(Name))); err != nil {
		return fmt.Errorf("marking Secret %s: %w", sec.Name, err)
	}
	log.FromContext(ctx).Info("Marked a Secret the Database already uses", "Secret", klog.KObj(sec))
	s.marks.Remember(sec)
	return nil
}
