package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/dbkeeper/dbkeeper/internal/manager"
)

// Provisioner is the name of the local cluster's volume provisioner.
const Provisioner = "local.e2e.dbkeeper.io"

// selectedNodeAnnotation is where the scheduler names a claim's node when
// its class binds WaitForFirstConsumer.
const selectedNodeAnnotation = "volume.kubernetes.io/selected-node"

// startProvisioner runs the volume provisioner in this process until Stop.
func (c *Cluster) startProvisioner() error {
	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{
		Scheme:                 manager.Scheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Logger:                 logr.Discard(),
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return fmt.Errorf("creating the volume provisioner: %w", err)
	}
	p := &provisioner{client: mgr.GetClient(), dir: c.Dir}
	if c.setup.LocalVolumes {
		p.node, p.sized, p.selected = c.NodeName, c.setup.SizedVolumes, c.setup.SeveralNodes
	}
	if err := p.setup(mgr); err != nil {
		return fmt.Errorf("setting up the volume provisioner: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.stopProvs, c.provsDone = cancel, make(chan error, 1)
	go func() { c.provsDone <- mgr.Start(ctx) }()
	return nil
}

// createStorageClasses creates the default StorageClass of the
// provisioner, and on a real node the sized one.
func (c *Cluster) createStorageClasses(ctx context.Context) error {
	names := []string{StorageClassName}
	if c.setup.LocalVolumes && c.setup.SizedVolumes != nil {
		names = append(names, SizedStorageClassName)
	}
	binding := storagev1.VolumeBindingImmediate
	if c.setup.LocalVolumes && c.setup.SeveralNodes {
		binding = storagev1.VolumeBindingWaitForFirstConsumer
	}
	for _, name := range names {
		sc := &storagev1.StorageClass{
			ObjectMeta:           metav1.ObjectMeta{Name: name},
			Provisioner:          Provisioner,
			AllowVolumeExpansion: ptr.To(name == StorageClassName),
			VolumeBindingMode:    ptr.To(binding),
			ReclaimPolicy:        ptr.To(corev1.PersistentVolumeReclaimDelete),
		}
		if name == StorageClassName {
			sc.Annotations = map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}
		}
		if err := c.Client.Create(ctx, sc); err != nil {
			return fmt.Errorf("creating StorageClass %s: %w", name, err)
		}
	}
	return nil
}

// provisioner gives every pending claim of StorageClassName a volume of its
// own, pre-bound to it, and deletes released volumes, which is what a CSI
// driver's external-provisioner does. On the fake node they are hostPath
// volumes no kubelet ever mounts. On the real node (node set, from
// NodeSetup.LocalVolumes) they are `local` volumes with affinity to it, in
// a fresh directory each: the kubelet applies a pod's fsGroup to local
// volumes, not to hostPath, and a non-root PostgreSQL needs that to
// initdb; sized (from NodeSetup.SizedVolumes) mounts those of
// SizedStorageClassName. It reacts to watch events, so a claim is bound
// before the scheduler places its pod.
type provisioner struct {
	client client.Client
	dir    string
	node   string
	sized  SizedVolumes
	// selected makes a local volume wait for the node the scheduler
	// selected for the claim (NodeSetup.SeveralNodes).
	selected bool
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
	if pvc.Spec.VolumeName != "" || pvc.DeletionTimestamp != nil || pvc.Spec.StorageClassName == nil {
		return ctrl.Result{}, nil
	}
	class := *pvc.Spec.StorageClassName
	if class != StorageClassName && (class != SizedStorageClassName || p.node == "" || p.sized == nil) {
		return ctrl.Result{}, nil
	}
	node := p.node
	if p.selected {
		if node = pvc.Annotations[selectedNodeAnnotation]; node == "" {
			return ctrl.Result{}, nil // its pod is not scheduled yet: an update follows
		}
	}
	name := "pv-" + string(pvc.UID)
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": Provisioner}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   pvc.Spec.AccessModes,
			StorageClassName:              class,
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
	if p.node != "" {
		path := filepath.Join(p.dir, "volumes", name)
		if err := os.MkdirAll(path, 0o755); err != nil {
			return ctrl.Result{}, fmt.Errorf("creating the directory of volume %s: %w", name, err)
		}
		if class == SizedStorageClassName {
			size := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
			if err := p.sized.Mount(path, size.Value()); err != nil {
				return ctrl.Result{}, fmt.Errorf("volume %s: %w", name, err)
			}
		}
		pv.Spec.PersistentVolumeSource = corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: path}}
		pv.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeFilesystem)
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node},
			}}}},
		}}
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
	if pv.Status.Phase != corev1.VolumeReleased ||
		(pv.Spec.StorageClassName != StorageClassName && pv.Spec.StorageClassName != SizedStorageClassName) ||
		pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		return ctrl.Result{}, nil
	}
	// the directory first: a failure is retried while the volume exists
	if pv.Spec.Local != nil {
		if p.sized != nil {
			if err := p.sized.Unmount(pv.Spec.Local.Path); err != nil {
				return ctrl.Result{}, fmt.Errorf("volume %s: %w", pv.Name, err)
			}
		}
		if err := os.RemoveAll(pv.Spec.Local.Path); err != nil {
			return ctrl.Result{}, fmt.Errorf("removing the directory of volume %s: %w", pv.Name, err)
		}
	}
	if err := p.client.Delete(ctx, pv); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}
