package backup

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// syncVolumeRepository keeps the S3 server of the repository on db's
// backup volume while it is db's repository (on): its credentials Secret
// (created once, never changed), Service and StatefulSet. Off, it removes
// the server (the StatefulSet and the Service) and keeps the Secret and
// the data on the volume, so that turning it on again finds the archive.
func (s *syncer) syncVolumeRepository(ctx context.Context, db *dbv1.Database, eng engine.Engine, on bool) error {
	name := resources.VolumeRepositoryName(db)
	key := client.ObjectKey{Namespace: db.Namespace, Name: name}
	if !on {
		for _, obj := range []client.Object{&appsv1.StatefulSet{}, &corev1.Service{}} {
			live, err := apply.Live(ctx, s.client, key, obj)
			if err != nil {
				return fmt.Errorf("getting the volume repository's %T: %w", obj, err)
			}
			if live == nil || !resources.Belongs(db, live) {
				continue
			}
			if err := s.client.Delete(ctx, live, client.Preconditions{UID: ptr.To(live.GetUID())}); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting the volume repository's %T %s: %w", obj, name, err)
			}
			log.FromContext(ctx).Info("Removed the volume repository's server: spec.backup.volumeRepository is off", "name", klog.KRef(db.Namespace, name))
		}
		return nil
	}
	sec, err := apply.Live(ctx, s.reader, key, &corev1.Secret{})
	switch {
	case err != nil:
		return fmt.Errorf("getting Secret %s: %w", name, err)
	case sec != nil:
		// planted before the Database, its keys would open the
		// repository to whoever made it
		if err := facet.OurSecret(db, sec); err != nil {
			return err
		}
	default:
		secret, err := resources.VolumeRepositorySecret(db)
		if err != nil {
			return err
		}
		if err := s.client.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating Secret %s: %w", name, err)
		}
		log.FromContext(ctx).Info("Created the volume repository's credentials", "Secret", klog.KObj(secret))
	}
	if err := s.apply(ctx, db, &corev1.Service{}, resources.VolumeRepositoryService(db), "Service"); err != nil {
		return err
	}
	return s.apply(ctx, db, &appsv1.StatefulSet{}, resources.VolumeRepositoryStatefulSet(db, eng, s.agentImage), "StatefulSet")
}
