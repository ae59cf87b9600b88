package resources_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

func databaseRef(name, uid string) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: dbv1.GroupVersion.String(), Kind: "Database", Name: name, UID: k8stypes.UID(uid),
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
}

func TestBelongs(t *testing.T) {
	db := sample("orders", nil)
	ours := resources.Labels(db, resources.ComponentDatabase)
	with := func(mutate func(l map[string]string)) map[string]string {
		l := map[string]string{}
		for k, v := range ours {
			l[k] = v
		}
		mutate(l)
		return l
	}
	cases := []struct {
		name   string
		labels map[string]string
		refs   []metav1.OwnerReference
		want   bool
	}{
		{name: "labels, no owner (kept or orphaned)", labels: ours, want: true},
		{name: "owned by this Database", labels: ours, refs: []metav1.OwnerReference{databaseRef("orders", string(db.UID))}, want: true},
		{name: "owned by an earlier Database of the same name", labels: ours, refs: []metav1.OwnerReference{databaseRef("orders", "other-uid")}},
		{name: "controlled by something else", labels: ours, refs: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "x", UID: "u", Controller: ptr.To(true)}}},
		{name: "a non-controller owner besides", labels: ours, refs: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "orders", UID: "u"}}, want: true},
		{name: "another instance", labels: with(func(l map[string]string) { l[resources.LabelInstance] = "billing" })},
		{name: "not managed by dbkeeper", labels: with(func(l map[string]string) { delete(l, resources.LabelManagedBy) })},
		{name: "no labels"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := &metav1.ObjectMeta{Name: "data-orders-0", Labels: tc.labels, OwnerReferences: tc.refs}
			assert.Equal(t, tc.want, resources.Belongs(db, obj))
		})
	}
}

func TestWithoutDatabaseReferences(t *testing.T) {
	db := sample("orders", nil)
	other := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "orders", UID: "c"}
	kept, changed := resources.WithoutDatabaseReferences(db, []metav1.OwnerReference{
		databaseRef("orders", string(db.UID)), other, databaseRef("orders", "earlier"),
	})
	assert.True(t, changed)
	assert.Equal(t, []metav1.OwnerReference{other}, kept)

	kept, changed = resources.WithoutDatabaseReferences(db, []metav1.OwnerReference{other, databaseRef("billing", "b")})
	assert.False(t, changed, "a reference to another Database is not this one's")
	assert.Len(t, kept, 2)
}

func TestChildNames(t *testing.T) {
	db := sample("orders", nil)
	for name, want := range map[string]bool{
		"data-orders-0":   true,
		"data-orders-12":  true,
		"data-orders-":    false,
		"data-orders-01":  false,
		"data-orders--1":  false,
		"data-orders-0x":  false,
		"data-orders-a-0": false,
		"orders-copy":     false,
		"data-order-0":    false,
		"data-orders-0 ":  false,
	} {
		assert.Equal(t, want, resources.IsDataPVCName(db, name), "IsDataPVCName(%q)", name)
	}
	for name, want := range map[string]bool{
		resources.FinalBackupJobName(db):                       true,
		resources.RestoreJobName(db):                           true,
		resources.OnDemandBackupJobName(db, "token"):           true,
		"orders-now-zz":                                        false,
		"orders-now-0123456789":                                false,
		"orders-backup-29000000":                               false,
		resources.OnDemandBackupJobName(sample("x", nil), "t"): false,
	} {
		assert.Equal(t, want, resources.IsJobName(db, name), "IsJobName(%q)", name)
	}
}
