package resources

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// DataVolumeClaimTemplate is the claim template of the data volumes.
// StatefulSets never change their claim templates, so a grown
// spec.storage.size reaches the PVCs through DataVolumeClaimSize instead.
func DataVolumeClaimTemplate(db *dbv1.Database) *corev1ac.PersistentVolumeClaimApplyConfiguration {
	spec := corev1ac.PersistentVolumeClaimSpec().
		WithAccessModes(corev1.ReadWriteOnce).
		WithResources(corev1ac.VolumeResourceRequirements().
			WithRequests(corev1.ResourceList{corev1.ResourceStorage: db.Spec.DataSize()}))
	if db.Spec.Storage.StorageClassName != nil {
		spec.WithStorageClassName(*db.Spec.Storage.StorageClassName)
	}
	// No kind, apiVersion or namespace: the API server stores templates
	// without them.
	claim := &corev1ac.PersistentVolumeClaimApplyConfiguration{}
	return claim.WithName(DataVolumeName).
		WithLabels(Labels(db, ComponentDatabase)).
		WithSpec(spec)
}

// PinClaimTemplate keeps the claim template of an existing StatefulSet,
// whose templates the API server never lets change, in the desired one.
func PinClaimTemplate(desired *appsv1ac.StatefulSetApplyConfiguration, live *appsv1.StatefulSet) {
	if live == nil || len(live.Spec.VolumeClaimTemplates) == 0 {
		return
	}
	for i := range desired.Spec.VolumeClaimTemplates {
		t := &desired.Spec.VolumeClaimTemplates[i]
		for _, l := range live.Spec.VolumeClaimTemplates {
			if t.Name != nil && l.Name == *t.Name {
				t.Spec.Resources.Requests = &l.Spec.Resources.Requests
			}
		}
	}
}

// DataPVCName is the name of the data PVC of one replica.
func DataPVCName(db *dbv1.Database, ordinal int) string {
	return fmt.Sprintf("%s-%s-%d", DataVolumeName, StatefulSetName(db), ordinal)
}
