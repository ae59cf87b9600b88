package facet

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// TestExplain: a child the API server refused as invalid is explained by
// the Database field the user must fix; other errors are left as they are.
func TestExplain(t *testing.T) {
	invalid := func(kind string, fields ...string) error {
		var errs field.ErrorList
		for _, f := range fields {
			errs = append(errs, field.Invalid(field.NewPath(f), "x", "refused"))
		}
		return fmt.Errorf("applying %s: %w", kind, apierrors.NewInvalid(schema.GroupKind{Kind: kind}, "orders", errs))
	}
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"cron range the CRD cannot check", invalid("CronJob", "spec.schedule"), "; fix spec.backup.schedule"},
		{"container resources", invalid("StatefulSet", "spec.template.spec.containers[0].resources.requests"), "; fix spec.resources"},
		{"a toleration the CRD cannot check", invalid("StatefulSet", "spec.template.spec.tolerations[0].key"), "; fix spec.tolerations"},
		{"a node selector value", invalid("StatefulSet", "spec.template.spec.nodeSelector"), "; fix spec.nodeSelector"},
		{"a spread constraint", invalid("StatefulSet", "spec.template.spec.topologySpreadConstraints[1].matchLabelKeys[0]"), "; fix spec.topologySpreadConstraints"},
		{"two fields, one named once", invalid("Service", "metadata.annotations", "metadata.annotations", "spec.type"),
			"; fix spec.service.annotations, spec.service.type"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Explain(tc.err)
			assert.Contains(t, got, tc.err.Error())
			assert.Contains(t, got, tc.want)
		})
	}
	for _, err := range []error{errors.New("connection refused"), invalid("StatefulSet", "spec.selector")} {
		assert.Equal(t, err.Error(), Explain(err), "no Database field sets it: the message is the error")
	}
}
