package facet

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestDatabaseOf maps a backup Job (as the CronJob's template labels it) to
// its Database by the instance label, and nothing else.
func TestDatabaseOf(t *testing.T) {
	job := func(labels map[string]string) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-backup-1", Labels: labels}}
	}
	of := DatabaseOf(resources.ComponentBackup)
	backup := map[string]string{resources.LabelComponent: resources.ComponentBackup, resources.LabelInstance: "orders",
		resources.LabelManagedBy: resources.ManagedBy}
	reqs := of(context.Background(), job(backup))
	require.Len(t, reqs, 1)
	assert.Equal(t, types.NamespacedName{Namespace: "shop", Name: "orders"}, reqs[0].NamespacedName)

	assert.Empty(t, of(context.Background(), job(nil)), "a Job that is not dbkeeper's")
	assert.Empty(t, of(context.Background(), job(map[string]string{resources.LabelInstance: "orders", resources.LabelManagedBy: resources.ManagedBy})),
		"not a backup Job")
	assert.Empty(t, of(context.Background(), job(map[string]string{resources.LabelComponent: resources.ComponentBackup, resources.LabelManagedBy: resources.ManagedBy})),
		"no instance label")
	assert.Empty(t, of(context.Background(), job(map[string]string{resources.LabelComponent: resources.ComponentBackup, resources.LabelInstance: "orders"})),
		"not managed by dbkeeper")
}
