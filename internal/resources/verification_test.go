package resources_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestVerificationJobIsThrowawayAndBounded: the verification pod restores
// the Database's own repository (never another path) into a scratch
// volume of the size asked, with the resources asked, runs once within
// the timeout, has no ServiceAccount token, no password in its
// environment, and is no instance (the Services' selectors miss it).
func TestVerificationJobIsThrowawayAndBounded(t *testing.T) {
	eng, err := engine.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	db := sample("orders", func(db *dbv1.Database) {
		withStore(db)
		db.Spec.Backup.Verification = &dbv1.BackupVerificationSpec{
			ScratchSize: ptr.To(resource.MustParse("3Gi")),
			Timeout:     &metav1.Duration{Duration: 30 * time.Minute},
			Resources: &corev1.ResourceRequirements{Limits: corev1.ResourceList{
				corev1.ResourceMemory: resource.MustParse("512Mi"), corev1.ResourceCPU: resource.MustParse("500m")}},
		}
	})
	ac, err := resources.VerificationJob(db, eng, resources.TLSOn, testAgentImage, "on-demand-1")
	require.NoError(t, err)
	job := decode[batchv1.Job](t, ac)

	assert.Equal(t, "orders-verify", job.Name)
	assert.Equal(t, "on-demand-1", job.Annotations[resources.AnnotationVerificationID])
	assert.Equal(t, int32(0), *job.Spec.BackoffLimit, "a failed verification is reported, not retried")
	assert.Equal(t, int64((40 * time.Minute).Seconds()), *job.Spec.ActiveDeadlineSeconds)
	require.Len(t, job.OwnerReferences, 1)
	assert.Equal(t, db.UID, job.OwnerReferences[0].UID)
	pod := job.Spec.Template
	assert.NotEqual(t, resources.ComponentDatabase, pod.Labels[resources.LabelComponent], "the Services would send clients to it")
	assert.False(t, *pod.Spec.AutomountServiceAccountToken)
	assert.Equal(t, corev1.RestartPolicyNever, pod.Spec.RestartPolicy)
	require.Len(t, pod.Spec.Containers, 1)
	c := pod.Spec.Containers[0]
	assert.Equal(t, []string{agentapi.Binary, agentapi.VerifyCommand, "--timeout=30m0s"}, c.Command)
	assert.Equal(t, resource.MustParse("512Mi"), c.Resources.Limits[corev1.ResourceMemory])
	assert.Equal(t, corev1.TerminationMessageReadFile, c.TerminationMessagePolicy)
	for _, e := range c.Env {
		assert.NotEqual(t, "PGPASSWORD", e.Name, "the throwaway server trusts its socket: no password")
	}
	assert.Equal(t, resources.RepositoryPath(db, db.Spec.Backup.ObjectStore), repositoryOf(t, c).Path, "its own repository")
	var scratch *resource.Quantity
	for _, v := range pod.Spec.Volumes {
		if v.Name == "verify" && v.EmptyDir != nil {
			scratch = v.EmptyDir.SizeLimit
		}
	}
	require.NotNil(t, scratch)
	assert.Equal(t, resource.MustParse("3Gi"), *scratch)
	assert.True(t, *c.SecurityContext.ReadOnlyRootFilesystem)

	// the defaults: the data volume's size, two hours.
	db.Spec.Backup.Verification = nil
	ac, err = resources.VerificationJob(db, eng, resources.TLSOn, testAgentImage, "scheduled")
	require.NoError(t, err)
	assert.Equal(t, int64((130 * time.Minute).Seconds()), *ac.Spec.ActiveDeadlineSeconds)
	assert.Equal(t, "0 5 * * 0", resources.VerificationSchedule(db))
}
