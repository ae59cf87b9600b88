package cleanup

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// carryOut deletes what the plan deletes and takes the owner reference off
// what it keeps, so that garbage collection cannot take it either. It
// touches only the children this Database made: their exact names, checked
// with Belongs (labels, owner UID), never whatever carries the labels.
// Every step treats "already gone" as done. It returns what it waits for,
// if anything: before deleting volumes, the workload that runs on them
// (which orphan deletion would otherwise leave running) must be gone.
func (r *reconciler) carryOut(ctx context.Context, db *dbv1.Database, p plan) (string, error) {
	if p.deleteData || p.deleteBackup {
		waiting, err := r.deleteWorkload(ctx, db)
		if err != nil || waiting != "" {
			return waiting, err
		}
	}
	data := &corev1.PersistentVolumeClaimList{}
	if err := r.list(ctx, db, resources.ComponentDatabase, data); err != nil {
		return "", err
	}
	for i := range data.Items {
		if !isDataPVC(db, &data.Items[i]) {
			continue
		}
		if err := r.deleteOrKeep(ctx, db, &data.Items[i], p.deleteData); err != nil {
			return "", err
		}
	}
	if err := r.deleteOrKeepNamed(ctx, db, &corev1.PersistentVolumeClaim{}, resources.BackupName(db), p.deleteBackup); err != nil {
		return "", err
	}
	// The superuser Secret follows the credentials Secret's row of the
	// policy, also beside a user's Secret: kept data needs its superuser.
	secrets := []string{resources.SuperuserSecretName(db)}
	if !resources.UserSecret(db) { // the user's Secret is never touched
		secrets = append(secrets, resources.GeneratedSecretName(db))
	}
	for _, name := range secrets {
		secret := &metav1.PartialObjectMetadata{}
		secret.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		del := p.deleteSecret
		if del {
			made, err := r.madeByDBKeeper(ctx, db, name)
			if err != nil {
				return "", err
			}
			del = made
		}
		if err := r.deleteOrKeepNamed(ctx, db, secret, name, del); err != nil {
			return "", err
		}
	}
	return "", nil
}

// madeByDBKeeper reports whether Secret name of db's namespace carries
// dbkeeper's mark (or does not exist, or no key checks marks): the only
// credentials and superuser Secrets a deletion policy deletes.
func (r *reconciler) madeByDBKeeper(ctx context.Context, db *dbv1.Database, name string) (bool, error) {
	if len(r.key) == 0 {
		return true, nil
	}
	sec, err := apply.Live(ctx, r.client, client.ObjectKey{Namespace: db.Namespace, Name: name}, &corev1.Secret{})
	if err != nil {
		return false, fmt.Errorf("getting Secret %s: %w", name, err)
	}
	if sec == nil || r.key.Verify(sec, engine.PasswordKey) {
		return true, nil
	}
	log.FromContext(ctx).Info("Leaving a Secret dbkeeper did not make (it lacks dbkeeper's mark)", "Secret", klog.KObj(sec))
	return false, nil
}

// isDataPVC reports whether pvc is one of the Database's data volumes.
func isDataPVC(db *dbv1.Database, pvc *corev1.PersistentVolumeClaim) bool {
	return resources.IsDataPVCName(db, pvc.Name) && resources.Belongs(db, pvc)
}

// deleteOrKeepNamed is deleteOrKeep for the child of that exact name, when
// it exists and belongs to db.
func (r *reconciler) deleteOrKeepNamed(ctx context.Context, db *dbv1.Database, obj client.Object, name string, del bool) error {
	obj, err := apply.Live(ctx, r.client, client.ObjectKey{Namespace: db.Namespace, Name: name}, obj)
	if err != nil {
		return fmt.Errorf("getting %s: %w", name, err)
	}
	if obj == nil {
		return nil
	}
	if !resources.Belongs(db, obj) {
		log.FromContext(ctx).V(1).Info("Leaving an object that is not this Database's", facet.Kind(r.client, obj), klog.KObj(obj))
		return nil
	}
	return r.deleteOrKeep(ctx, db, obj, del)
}

func (r *reconciler) deleteOrKeep(ctx context.Context, db *dbv1.Database, obj client.Object, del bool) error {
	if del {
		if !obj.GetDeletionTimestamp().IsZero() {
			return nil
		}
		log.FromContext(ctx).Info("Deleting by deletion policy", facet.Kind(r.client, obj), klog.KObj(obj), "deletionPolicy", db.Spec.DeletionPolicy)
		err := r.client.Delete(ctx, obj, client.Preconditions{UID: ptr.To(obj.GetUID())}, client.PropagationPolicy(metav1.DeletePropagationBackground))
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting %s: %w", obj.GetName(), err)
		}
		return nil
	}
	// Kept: Disown logs the owner reference it removes, if any.
	_, err := facet.Disown(ctx, r.client, db, obj)
	return err
}
