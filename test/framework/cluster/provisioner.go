package cluster

import (
	"context"
	"fmt"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Provisioner is the name of the local cluster's volume provisioner.
const Provisioner = "local.e2e.dbkeeper.io"

// provisioner gives every pending claim of StorageClassName a volume of its
// own, pre-bound to it, and deletes released volumes, which is what a CSI
// driver's external-provisioner does. No kubelet ever mounts them.
type provisioner struct {
	client client.Client
	dir    string
}

func (p *provisioner) setup(mgr ctrl.Manager) error {
	if err := ctrl.NewControllerManagedBy(mgr).Named("e2e-provisioner").
		For(&corev1.PersistentVolumeClaim{}).Complete(reconcile.Func(p.provision)); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).Named("e2e-reclaimer").
		For(&corev1.PersistentVolume{}).Complete(reconcile.Func(p.reclaim))
}

func (p *provisioner) provision(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := p.client.Get(ctx, req.NamespacedName, pvc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pvc.Spec.VolumeName != "" || pvc.DeletionTimestamp != nil ||
		pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != StorageClassName {
		return ctrl.Result{}, nil
	}
	name := "pv-" + string(pvc.UID)
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": Provisioner}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   pvc.Spec.AccessModes,
			StorageClassName:              StorageClassName,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			ClaimRef: &corev1.ObjectReference{
				APIVersion: "v1", Kind: "PersistentVolumeClaim",
				Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID,
			},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: filepath.Join(p.dir, "volumes", name)},
			},
		},
	}
	if err := p.client.Create(ctx, pv); err != nil && !apierrors.IsAlreadyExists(err) {
		return ctrl.Result{}, fmt.Errorf("creating volume for claim %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	return ctrl.Result{}, nil
}

func (p *provisioner) reclaim(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pv := &corev1.PersistentVolume{}
	if err := p.client.Get(ctx, req.NamespacedName, pv); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pv.Status.Phase != corev1.VolumeReleased || pv.Spec.StorageClassName != StorageClassName ||
		pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, client.IgnoreNotFound(p.client.Delete(ctx, pv))
}
