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
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// ensureReplication creates <name>-replication once, with a new
// replication password and agent token, and never regenerates it while it
// exists (the servers keep the password); it keeps its labels and owner
// reference. The cache holds its metadata only.
func (s *syncer) ensureReplication(ctx context.Context, db *dbv1.Database) error {
	name := resources.ReplicationSecretName(db)
	partial := &metav1.PartialObjectMetadata{}
	partial.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	live, err := apply.Live(ctx, s.client, client.ObjectKey{Namespace: db.Namespace, Name: name}, partial)
	if err != nil {
		return fmt.Errorf("getting Secret %s: %w", name, err)
	}
	if live != nil {
		if _, err := s.writer.Apply(ctx, live, resources.ReplicationSecretMetadata(db)); err != nil {
			return fmt.Errorf("applying metadata of Secret %s: %w", name, err)
		}
		return nil
	}
	password, err := NewPassword()
	if err != nil {
		return err
	}
	token, err := NewPassword()
	if err != nil {
		return err
	}
	sec := resources.ReplicationSecret(db, password, token)
	log.FromContext(ctx).Info("Generating replication Secret", "Secret", klog.KObj(sec))
	err = s.client.Create(ctx, sec, client.FieldOwner(facet.FieldOwner(Name)))
	if apierrors.IsAlreadyExists(err) {
		// Not in the label-selected cache yet, or made by somebody else
		// (whose password the pods would then use): never overwritten,
		// and used only when it is this Database's.
		return s.ours(ctx, db, name)
	}
	if err != nil {
		return fmt.Errorf("creating Secret %s: %w", name, err)
	}
	return nil
}
