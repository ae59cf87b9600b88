// Package dbtest holds what tests that drive Databases through an API
// server share: a minimal valid Database, reading one back, waiting for a
// condition, patching, its children, a namespace per test.
package dbtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// Tick is how often Wait functions look.
const Tick = 50 * time.Millisecond

// New is a minimal valid Database; mutate tweaks it before it is used.
// It keeps its backups as dumps (spec.backup.volumeRepository Disabled):
// the suites' fleets test every other facet without a repository server
// and a first base backup per Database; the tests of the default (the
// repository on the backup volume) set it back to unset.
func New(namespace, name string, mutate ...func(*dbv1.Database)) *dbv1.Database {
	db := &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: dbv1.DatabaseSpec{Engine: dbv1.EnginePostgres, Version: "17",
			Backup: dbv1.BackupSpec{VolumeRepository: dbv1.VolumeRepositoryDisabled}},
	}
	for _, m := range mutate {
		m(db)
	}
	return db
}

// Get reads the Database as stored now.
func Get(t require.TestingT, c client.Client, db *dbv1.Database) *dbv1.Database {
	got := &dbv1.Database{}
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(db), got))
	return got
}

// WaitCondition waits until the condition has the status and reason at the
// Database's current generation, and returns it.
func WaitCondition(t require.TestingT, c client.Client, db *dbv1.Database, condType string, status metav1.ConditionStatus, reason string, timeout time.Duration) metav1.Condition {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	var got metav1.Condition
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		live := Get(ct, c, db)
		cond := meta.FindStatusCondition(live.Status.Conditions, condType)
		if !assert.NotNil(ct, cond, "condition %s not reported yet", condType) {
			return
		}
		assert.Equal(ct, status, cond.Status, "%s status (message %q)", condType, cond.Message)
		assert.Equal(ct, reason, cond.Reason, "%s reason (message %q)", condType, cond.Message)
		assert.Equal(ct, live.Generation, cond.ObservedGeneration, "%s observedGeneration", condType)
		got = *cond
	}, timeout, Tick)
	return got
}

// CreateNamespace creates the namespace name.
func CreateNamespace(t require.TestingT, c client.Client, name string) string {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	require.NoError(t, c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}))
	return name
}

// NewNamespace creates a namespace for one test, named prefix and six
// random characters, and returns its name.
func NewNamespace(t require.TestingT, c client.Client, prefix string) string {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	return CreateNamespace(t, c, prefix+rand.String(6))
}

// Patch applies mutate to the live Database with a merge patch and returns
// the result.
func Patch(t require.TestingT, c client.Client, db *dbv1.Database, mutate func(*dbv1.Database)) *dbv1.Database {
	live := Get(t, c, db)
	patch := client.MergeFrom(live.DeepCopy())
	mutate(live)
	require.NoError(t, c.Patch(context.Background(), live, patch))
	return live
}

// AllowRestoresInto gives db's owner's consent to restores of its data
// into Databases of namespaces (its restore-allowed-namespaces
// annotation, replaced).
func AllowRestoresInto(t require.TestingT, c client.Client, db *dbv1.Database, namespaces ...string) *dbv1.Database {
	return Patch(t, c, db, func(d *dbv1.Database) {
		if d.Annotations == nil {
			d.Annotations = map[string]string{}
		}
		d.Annotations[dbv1.AnnotationRestoreAllowedNamespaces] = strings.Join(namespaces, ",")
	})
}

// ChildKind is one kind of a Database's children: how many each Database
// has, and the labels beyond instance and managed-by that tell them.
type ChildKind struct {
	Kind string
	// NewList returns an empty list of the kind.
	NewList func() client.ObjectList
	// PerDatabase is how many children of the kind a Database has.
	PerDatabase int
	// Labels narrow the kind to the children (nil when the kind is enough).
	Labels client.MatchingLabels
	// Unowned children carry no owner reference to the Database (a
	// deletion policy may keep them): they are its by name and labels.
	Unowned bool
}

// ChildKinds are the kinds of every Database's children: a StatefulSet,
// three Services, the generated, superuser and replication Secrets, the CronJob, the
// backup PVC, and the tls controller's CA and certificate Secrets and
// pg_hba ConfigMap (a new Database has TLS).
func ChildKinds() []ChildKind {
	return []ChildKind{
		{"StatefulSet", func() client.ObjectList { return &appsv1.StatefulSetList{} }, 1, nil, false},
		{"Service", func() client.ObjectList { return &corev1.ServiceList{} }, 3, nil, false},
		{"Secret", func() client.ObjectList { return &corev1.SecretList{} }, 1,
			client.MatchingLabels{resources.LabelComponent: resources.ComponentCredentials}, true},
		{"superuser Secret", func() client.ObjectList { return &corev1.SecretList{} }, 1,
			client.MatchingLabels{resources.LabelComponent: resources.ComponentSuperuser}, true},
		{"replication Secret", func() client.ObjectList { return &corev1.SecretList{} }, 1,
			client.MatchingLabels{resources.LabelComponent: resources.ComponentReplication}, false},
		{"TLS Secret", func() client.ObjectList { return &corev1.SecretList{} }, 2,
			client.MatchingLabels{resources.LabelComponent: resources.ComponentTLS}, false},
		{"TLS ConfigMap", func() client.ObjectList { return &corev1.ConfigMapList{} }, 1,
			client.MatchingLabels{resources.LabelComponent: resources.ComponentTLS}, false},
		{"CronJob", func() client.ObjectList { return &batchv1.CronJobList{} }, 1, nil, false},
		{"backup PersistentVolumeClaim", func() client.ObjectList { return &corev1.PersistentVolumeClaimList{} }, 1,
			client.MatchingLabels{resources.LabelComponent: resources.ComponentBackup}, true},
	}
}

// List returns the objects of the kind in namespace that carry sel and
// the kind's own Labels.
func (k ChildKind) List(ctx context.Context, c client.Client, namespace string, sel client.MatchingLabels) ([]metav1.Object, error) {
	list := k.NewList()
	opts := []client.ListOption{client.InNamespace(namespace), sel}
	if k.Labels != nil {
		opts = append(opts, k.Labels)
	}
	if err := c.List(ctx, list, opts...); err != nil {
		return nil, fmt.Errorf("listing %s objects: %w", k.Kind, err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	objs := make([]metav1.Object, 0, len(items))
	for _, item := range items {
		obj, err := meta.Accessor(item)
		if err != nil {
			return nil, err
		}
		objs = append(objs, obj)
	}
	return objs, nil
}

// AssertOneOfEach checks the Database has exactly one of each child
// (StatefulSet, three Services, generated, superuser and replication
// Secrets, CronJob,
// backup PVC, two TLS Secrets and a ConfigMap), each
// controlled by it, except the unowned ones, which carry no owner
// reference to it.
func AssertOneOfEach(t *testing.T, c client.Client, db *dbv1.Database) {
	t.Helper()
	ctx := context.Background()
	sel := client.MatchingLabels{resources.LabelInstance: db.Name, resources.LabelManagedBy: resources.ManagedBy}
	for _, l := range ChildKinds() {
		objs, err := l.List(ctx, c, db.Namespace, sel)
		require.NoError(t, err)
		assert.Len(t, objs, l.PerDatabase, "%s children of %s", l.Kind, db.Name)
		for _, obj := range objs {
			if l.Unowned {
				assert.Empty(t, obj.GetOwnerReferences(), "%s %s has owner references", l.Kind, obj.GetName())
				continue
			}
			ref := metav1.GetControllerOfNoCopy(obj)
			if assert.NotNil(t, ref, "%s %s has no controller", l.Kind, obj.GetName()) {
				assert.Equal(t, db.UID, ref.UID, "%s %s controller", l.Kind, obj.GetName())
			}
		}
	}
}
