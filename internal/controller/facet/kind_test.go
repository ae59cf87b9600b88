package facet_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
)

// TestKind: a log line names an object under its Kind, whether the object
// carries it (metadata only) or only its Go type says it.
func TestKind(t *testing.T) {
	c := facettest.Client(t)
	assert.Equal(t, "PersistentVolumeClaim", facet.Kind(c, &corev1.PersistentVolumeClaim{}))
	assert.Equal(t, "Database", facet.Kind(c, facettest.Database()))
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	assert.Equal(t, "Secret", facet.Kind(c, meta))
	unknown := &metav1.PartialObjectMetadata{}
	unknown.SetGroupVersionKind(schema.GroupVersionKind{})
	assert.Equal(t, "object", facet.Kind(c, unknown))
}
