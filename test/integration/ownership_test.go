package integration

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestNamesTakenAreLeftAlone (issue 29): for every kind of object a
// Database makes, an object of that kind and name made before the
// Database by somebody else (another team's, without dbkeeper's labels)
// is left exactly as it was: not rewritten, not adopted, not given an
// owner reference by which garbage collection would delete it with the
// Database. The facet that would write it says False/NameTaken, naming the
// object; a ServiceAccount of the pods' name stops the StatefulSet, so no
// pod runs as it; deleting the Database leaves the object. Before the fix
// a Database "payments" rewrote a Service "payments" (port, selector, owner
// reference) and its deletion deleted it.
func TestNamesTakenAreLeftAlone(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, ns, "*")
	theirs := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"team": "theirs"}}
	}
	secret := func(name string) client.Object {
		return &corev1.Secret{ObjectMeta: theirs(name), StringData: map[string]string{"password": "chosen-by-them"}}
	}
	// what makes a Database one that has such an object
	specs := map[string]func(db *dbv1.Database){
		"PodDisruptionBudget": func(db *dbv1.Database) { db.Spec.Replicas = ptr.To[int32](2) },
		"repository Secret":   func(db *dbv1.Database) { db.Spec.Backup.VolumeRepository = dbv1.VolumeRepositoryEnabled },
		"replication client Secret": func(db *dbv1.Database) {
			db.Spec.TLS = &dbv1.TLSSpec{IssuerRef: &dbv1.IssuerReference{Name: "team-ca", Kind: "ClusterIssuer"}}
		},
	}
	for _, tc := range []struct {
		kind      string
		condition string
		obj       func(db *dbv1.Database) client.Object
	}{
		{"Service", dbv1.ConditionServiceReady, func(db *dbv1.Database) client.Object {
			return &corev1.Service{ObjectMeta: theirs(resources.ClientServiceName(db)), Spec: corev1.ServiceSpec{
				Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}, Selector: map[string]string{"app": "theirs"}}}
		}},
		{"headless Service", dbv1.ConditionServiceReady, func(db *dbv1.Database) client.Object {
			return &corev1.Service{ObjectMeta: theirs(resources.HeadlessServiceName(db)), Spec: corev1.ServiceSpec{
				Ports: []corev1.ServicePort{{Port: 80}}, Selector: map[string]string{"app": "theirs"}}}
		}},
		{"read-only Service", dbv1.ConditionServiceReady, func(db *dbv1.Database) client.Object {
			return &corev1.Service{ObjectMeta: theirs(resources.ReadOnlyServiceName(db)), Spec: corev1.ServiceSpec{
				Ports: []corev1.ServicePort{{Port: 80}}, Selector: map[string]string{"app": "theirs"}}}
		}},
		{"NetworkPolicy", dbv1.ConditionServiceReady, func(db *dbv1.Database) client.Object {
			return &networkingv1.NetworkPolicy{ObjectMeta: theirs(resources.NetworkPolicyName(db)), Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "theirs"}}}}
		}},
		{"ServiceAccount", dbv1.ConditionStatefulSetReady, func(db *dbv1.Database) client.Object {
			return &corev1.ServiceAccount{ObjectMeta: theirs(resources.InstanceServiceAccountName(db))}
		}},
		{"Role", dbv1.ConditionStatefulSetReady, func(db *dbv1.Database) client.Object {
			return &rbacv1.Role{ObjectMeta: theirs(resources.InstanceRoleName(db)), Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}}
		}},
		{"RoleBinding", dbv1.ConditionStatefulSetReady, func(db *dbv1.Database) client.Object {
			return &rbacv1.RoleBinding{ObjectMeta: theirs(resources.InstanceRoleName(db)),
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "theirs"},
				Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "theirs", Namespace: ns}}}
		}},
		{"Lease", dbv1.ConditionStatefulSetReady, func(db *dbv1.Database) client.Object {
			return &coordinationv1.Lease{ObjectMeta: theirs(resources.LeaseName(db))}
		}},
		{"PodDisruptionBudget", dbv1.ConditionStatefulSetReady, func(db *dbv1.Database) client.Object {
			one := intstr.FromInt32(1)
			return &policyv1.PodDisruptionBudget{ObjectMeta: theirs(resources.PodDisruptionBudgetName(db)), Spec: policyv1.PodDisruptionBudgetSpec{
				MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "theirs"}}}}
		}},
		{"StatefulSet", dbv1.ConditionStatefulSetReady, func(db *dbv1.Database) client.Object {
			labels := map[string]string{"app": "theirs"}
			return &appsv1.StatefulSet{ObjectMeta: theirs(resources.StatefulSetName(db)), Spec: appsv1.StatefulSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "theirs"}}}}}}
		}},
		{"ConfigMap", dbv1.ConditionTLSReady, func(db *dbv1.Database) client.Object {
			return &corev1.ConfigMap{ObjectMeta: theirs(resources.HBAConfigMapName(db)), Data: map[string]string{"k": "v"}}
		}},
		{"CA Secret", dbv1.ConditionTLSReady, func(db *dbv1.Database) client.Object { return secret(resources.CASecretName(db)) }},
		{"TLS Secret", dbv1.ConditionTLSReady, func(db *dbv1.Database) client.Object { return secret(resources.TLSSecretName(db)) }},
		{"credentials Secret", dbv1.ConditionCredentialsReady, func(db *dbv1.Database) client.Object {
			return secret(resources.GeneratedSecretName(db))
		}},
		{"superuser Secret", dbv1.ConditionCredentialsReady, func(db *dbv1.Database) client.Object {
			return secret(resources.SuperuserSecretName(db))
		}},
		// with dbkeeper's labels, as anybody may write them: only its mark
		// (marker) tells a Secret it made
		{"labelled superuser Secret", dbv1.ConditionCredentialsReady, func(db *dbv1.Database) client.Object {
			s := secret(resources.SuperuserSecretName(db))
			s.SetLabels(resources.Labels(db, resources.ComponentSuperuser))
			return s
		}},
		{"labelled credentials Secret", dbv1.ConditionCredentialsReady, func(db *dbv1.Database) client.Object {
			s := secret(resources.GeneratedSecretName(db))
			s.SetLabels(resources.Labels(db, resources.ComponentCredentials))
			return s
		}},
		{"replication Secret", dbv1.ConditionCredentialsReady, func(db *dbv1.Database) client.Object {
			return secret(resources.ReplicationSecretName(db))
		}},
		{"replication client Secret", dbv1.ConditionTLSReady, func(db *dbv1.Database) client.Object {
			return secret(resources.ReplicationClientSecretName(db))
		}},
		{"repository Secret", dbv1.ConditionBackupReady, func(db *dbv1.Database) client.Object {
			return secret(resources.VolumeRepositoryName(db))
		}},
		{"backup PersistentVolumeClaim", dbv1.ConditionBackupReady, func(db *dbv1.Database) client.Object {
			return &corev1.PersistentVolumeClaim{ObjectMeta: theirs(resources.BackupName(db)), Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
		}},
		{"CronJob", dbv1.ConditionBackupReady, func(db *dbv1.Database) client.Object {
			return &batchv1.CronJob{ObjectMeta: theirs(resources.BackupName(db)), Spec: batchv1.CronJobSpec{Schedule: "0 3 * * *",
				JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "app", Image: "theirs"}}}}}}}}
		}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := newDatabase(ns, "taken-"+strings.ReplaceAll(strings.ToLower(tc.kind), " ", "-"))
			if spec := specs[tc.kind]; spec != nil {
				spec(db)
			}
			foreign := tc.obj(db)
			require.NoError(t, admin.Create(ctx, foreign))
			before := foreign.DeepCopyObject().(client.Object)
			require.NoError(t, admin.Get(ctx, client.ObjectKeyFromObject(foreign), before))
			createDatabase(t, db)

			cond := waitCondition(t, db, tc.condition, metav1.ConditionFalse, dbv1.ReasonNameTaken)
			assert.Contains(t, cond.Message, foreign.GetName()+" already exists and is not this Database's")
			after := foreign.DeepCopyObject().(client.Object)
			require.NoError(t, admin.Get(ctx, client.ObjectKeyFromObject(foreign), after))
			assert.Equal(t, before.GetResourceVersion(), after.GetResourceVersion(), "%s %s written", tc.kind, foreign.GetName())
			assert.Empty(t, after.GetOwnerReferences(), "an owner reference garbage collection would follow")
			if tc.kind == "ServiceAccount" {
				err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: resources.StatefulSetName(db)}, &appsv1.StatefulSet{})
				assert.True(t, apierrors.IsNotFound(err), "a StatefulSet whose pods would run as another team's ServiceAccount: %v", err)
			}

			require.NoError(t, admin.Delete(ctx, getDatabase(t, db)))
			require.Eventually(t, func() bool { return released(t, db) }, timeout, tick, "the Database was not released")
			require.NoError(t, admin.Get(ctx, client.ObjectKeyFromObject(foreign), after), "%s %s deleted with the Database", tc.kind, foreign.GetName())
			assert.Equal(t, before.GetResourceVersion(), after.GetResourceVersion(), "%s %s written", tc.kind, foreign.GetName())
		})
	}
}
