package resources_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/dbkeeper/dbkeeper/internal/resources"
)

func TestKeepLargerRequest(t *testing.T) {
	db := samples["default"] // backup.storage.size 20Gi
	live := func(size string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{Resources: corev1.VolumeResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}}}}
	}
	for name, tc := range map[string]struct {
		live *corev1.PersistentVolumeClaim
		want string
	}{
		"none yet":           {nil, "20Gi"},
		"larger is kept":     {live("50Gi"), "50Gi"},
		"smaller grows":      {live("10Gi"), "20Gi"},
		"equal is unchanged": {live("20Gi"), "20Gi"},
	} {
		t.Run(name, func(t *testing.T) {
			desired := resources.BackupPVC(db)
			resources.KeepLargerRequest(desired, tc.live)
			got := (*desired.Spec.Resources.Requests)[corev1.ResourceStorage]
			assert.Equal(t, tc.want, got.String())
			again := (*resources.BackupPVC(db).Spec.Resources.Requests)[corev1.ResourceStorage]
			assert.Equal(t, "20Gi", again.String(), "the builder's own request is not touched")
		})
	}
}
