// Package validation_test checks the Database CRD's validation — OpenAPI
// bounds, enums, patterns and CEL x-kubernetes-validations, at creation and on
// update — against a real kube-apiserver started by envtest.
package validation_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/test/framework/envtest"
)

// k8s is a typed client of the envtest apiserver; nil under -short.
var k8s client.Client

// k8sConfig is the admin configuration of the envtest apiserver.
var k8sConfig *rest.Config

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	env, cfg, err := envtest.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "validation tests:", err)
		os.Exit(1)
	}
	code := func() int {
		scheme := runtime.NewScheme()
		if err := clientgoscheme.AddToScheme(scheme); err != nil {
			fmt.Fprintln(os.Stderr, "validation tests:", err)
			return 1
		}
		if err := dbv1.AddToScheme(scheme); err != nil {
			fmt.Fprintln(os.Stderr, "validation tests:", err)
			return 1
		}
		k8sConfig = cfg
		k8s, err = client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			fmt.Fprintln(os.Stderr, "validation tests:", err)
			return 1
		}
		return m.Run()
	}()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "validation tests: stopping envtest:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// setup skips under -short and returns a context bounded by the test's
// lifetime and a fresh namespace.
func setup(t *testing.T) (context.Context, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a kube-apiserver (envtest); skipped under -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "validation-"}}
	require.NoError(t, k8s.Create(ctx, ns))
	// envtest runs no namespace controller, so deleting the namespace would
	// leave it Terminating; the whole apiserver goes away at the end anyway.
	return ctx, ns.Name
}

// rawDatabase is a Database as the JSON a user would send: fields are only
// present when spec names them, so the CRD's defaults apply to the rest.
// Numbers must be int64 (unstructured content).
func rawDatabase(ns, name string, spec map[string]any) *unstructured.Unstructured {
	if spec == nil {
		spec = map[string]any{}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": dbv1.GroupVersion.String(),
		"kind":       "Database",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec":       spec,
	}}
}

// assertInvalid asserts that err is an Invalid (422) status error whose
// message contains every fragment in want.
func assertInvalid(t *testing.T, err error, want ...string) {
	t.Helper()
	require.Error(t, err, "the apiserver accepted an object that should be refused (want %q)", want)
	t.Logf("refused: %v", err)
	assert.Truef(t, apierrors.IsInvalid(err), "want an Invalid error, got %v: %v", apierrors.ReasonForError(err), err)
	for _, w := range want {
		assert.Containsf(t, err.Error(), w, "error message lacks the expected fragment")
	}
}

const (
	msgEngineEnum      = `spec.engine: Unsupported value: "mysql"`
	msgVersionCatalog  = "spec.version must be one of 15, 16, 17, 18 for engine postgres"
	msgVersionEOL      = "spec.version: PostgreSQL 14 reached its end of life on 2026-11-12 and gets no more fixes"
	msgVersionDown     = "spec.version cannot go down"
	msgSizePositive    = "size must be greater than zero"
	msgSizeGrow        = "size may only grow: a volume cannot be shrunk"
	msgClassImmut      = "storageClassName is immutable"
	msgClassAddRemove  = "storageClassName cannot be added or removed after creation"
	msgSecretImmut     = "spec.credentials.secretName is immutable"
	msgSecretAddRem    = "spec.credentials.secretName cannot be added or removed after creation"
	msgCredsAddRemove  = "spec.credentials cannot be added or removed after creation"
	msgSecretSuperuser = "spec.credentials.secretName may not be <metadata.name>-superuser"
	msgSchedule        = "schedule must be a cron expression of five fields"
	msgMaxAge          = "maxAge must be a positive duration such as 26h"
	msgNameLength      = "metadata.name must be at most 45 characters"
	msgNameDNS1035     = "metadata.name must start with a lower-case letter"
	msgResources       = "spec.resources: the cpu and memory requests must be less than or equal to their limits"
	msgAnnotationKey   = "spec.service.annotations: each key must be a qualified name"
	// msgTolerationExists is the rule Kubernetes applies to a pod's
	// tolerations, mirrored at admission.
	msgTolerationExists = "spec.tolerations: a toleration with operator Exists takes no value"
)

// TestCreateRefused creates Databases that break a create-time rule and
// expects the apiserver to refuse each with the rule's message.
func TestCreateRefused(t *testing.T) {
	ctx, ns := setup(t)

	cases := []struct {
		name   string
		dbName string // default "db"
		spec   map[string]any
		want   []string
	}{
		{
			name: "engine not in enum",
			spec: map[string]any{"engine": "mysql"},
			want: []string{msgEngineEnum, `supported values: "postgres"`},
		},
		{
			name: "version not in catalog",
			spec: map[string]any{"version": "13"},
			want: []string{"spec: Invalid value", msgVersionCatalog},
		},
		{
			name: "version past its end of life",
			spec: map[string]any{"version": "14"},
			want: []string{"spec.version: Invalid value", msgVersionEOL, "new Databases use 15, 16, 17 or 18"},
		},
		{
			name: "version not in catalog, minor version",
			spec: map[string]any{"version": "17.2"},
			want: []string{msgVersionCatalog},
		},
		{
			name: "version too long",
			spec: map[string]any{"version": "17.2.3.4.5"},
			want: []string{"spec.version: Too long", "8"},
		},
		{
			name: "image with whitespace",
			spec: map[string]any{"image": "postgres:17 alpine"},
			want: []string{"spec.image: Invalid value", "should match"},
		},
		{
			name: "image too long",
			spec: map[string]any{"image": "registry.example.com/" + strings.Repeat("a", 500) + ":17"},
			want: []string{"spec.image: Too long", "512"},
		},
		{
			name: "replicas negative",
			spec: map[string]any{"replicas": int64(-1)},
			want: []string{"spec.replicas: Invalid value", "should be greater than or equal to 0"},
		},
		{
			name: "replicas above 9",
			spec: map[string]any{"replicas": int64(10)},
			want: []string{"spec.replicas: Invalid value", "should be less than or equal to 9"},
		},
		{
			name: "synchronous Required with as many standbys to wait for as instances",
			spec: map[string]any{"replicas": int64(2), "highAvailability": map[string]any{"synchronous": map[string]any{"number": int64(2)}}},
			want: []string{"spec: Invalid value", "spec.highAvailability.synchronous.number must be below spec.replicas with dataDurability Required"},
		},
		{
			name: "synchronous Required on one instance (default replicas)",
			spec: map[string]any{"highAvailability": map[string]any{"synchronous": map[string]any{"dataDurability": "Required"}}},
			want: []string{"spec: Invalid value", "spec.highAvailability.synchronous.number must be below spec.replicas"},
		},
		{
			name: "synchronous number 0",
			spec: map[string]any{"replicas": int64(3), "highAvailability": map[string]any{"synchronous": map[string]any{"number": int64(0)}}},
			want: []string{"spec.highAvailability.synchronous.number: Invalid value", "should be greater than or equal to 1"},
		},
		{
			name: "affinity of the wrong shape",
			spec: map[string]any{"affinity": map[string]any{"podAntiAffinity": map[string]any{
				"preferredDuringSchedulingIgnoredDuringExecution": []any{map[string]any{"weight": "heavy"}}}}},
			want: []string{"spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight: Invalid value"},
		},
		{
			name: "toleration with operator Exists and a value",
			spec: map[string]any{"tolerations": []any{map[string]any{"key": "dedicated", "operator": "Exists", "value": "database"}}},
			want: []string{"spec.tolerations: Invalid value", msgTolerationExists},
		},
		{
			name: "toleration without a key, operator Equal",
			spec: map[string]any{"tolerations": []any{map[string]any{"operator": "Equal", "value": "database"}}},
			want: []string{"spec.tolerations: Invalid value", "spec.tolerations: a toleration without a key must have operator Exists"},
		},
		{
			name: "toleration with an unknown operator",
			spec: map[string]any{"tolerations": []any{map[string]any{"key": "dedicated", "operator": "In", "value": "database"}}},
			want: []string{"spec.tolerations: operator must be Equal (the default) or Exists"},
		},
		{
			name: "toleration with an unknown effect",
			spec: map[string]any{"tolerations": []any{map[string]any{"key": "dedicated", "value": "database", "effect": "NoRun"}}},
			want: []string{"spec.tolerations: effect must be NoSchedule, PreferNoSchedule or NoExecute"},
		},
		{
			name: "tolerationSeconds with effect NoSchedule",
			spec: map[string]any{"tolerations": []any{map[string]any{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": int64(30)}}},
			want: []string{"spec.tolerations: tolerationSeconds needs effect NoExecute"},
		},
		{
			name: "too many tolerations",
			spec: map[string]any{"tolerations": func() []any {
				var l []any
				for range 33 {
					l = append(l, map[string]any{"operator": "Exists"})
				}
				return l
			}()},
			want: []string{"spec.tolerations: Too many", "32"},
		},
		{
			name: "node selector key with a space",
			spec: map[string]any{"nodeSelector": map[string]any{"disk type": "nvme"}},
			want: []string{"spec.nodeSelector: Invalid value", "spec.nodeSelector: each key must be a label key"},
		},
		{
			name: "spread constraint with maxSkew 0",
			spec: map[string]any{"topologySpreadConstraints": []any{
				map[string]any{"maxSkew": int64(0), "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"}}},
			want: []string{"spec.topologySpreadConstraints: Invalid value", "spec.topologySpreadConstraints: maxSkew must be at least 1"},
		},
		{
			name: "spread constraint without a topologyKey",
			spec: map[string]any{"topologySpreadConstraints": []any{map[string]any{"maxSkew": int64(1), "whenUnsatisfiable": "DoNotSchedule"}}},
			want: []string{"spec.topologySpreadConstraints[0].topologyKey: Required value"},
		},
		{
			name: "spread constraint with an empty topologyKey",
			spec: map[string]any{"topologySpreadConstraints": []any{map[string]any{"maxSkew": int64(1), "topologyKey": "", "whenUnsatisfiable": "DoNotSchedule"}}},
			want: []string{"spec.topologySpreadConstraints: topologyKey must name a node label"},
		},
		{
			name: "spread constraint with an unknown whenUnsatisfiable",
			spec: map[string]any{"topologySpreadConstraints": []any{
				map[string]any{"maxSkew": int64(1), "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "Sometimes"}}},
			want: []string{"spec.topologySpreadConstraints: whenUnsatisfiable must be DoNotSchedule or ScheduleAnyway"},
		},
		{
			name: "spread constraint with minDomains and ScheduleAnyway",
			spec: map[string]any{"topologySpreadConstraints": []any{
				map[string]any{"maxSkew": int64(1), "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway", "minDomains": int64(3)}}},
			want: []string{"spec.topologySpreadConstraints: minDomains must be at least 1, and only goes with whenUnsatisfiable DoNotSchedule"},
		},
		{
			name: "spread constraint with an unknown nodeTaintsPolicy",
			spec: map[string]any{"topologySpreadConstraints": []any{
				map[string]any{"maxSkew": int64(1), "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule", "nodeTaintsPolicy": "Always"}}},
			want: []string{"spec.topologySpreadConstraints: nodeAffinityPolicy and nodeTaintsPolicy must be Honor or Ignore"},
		},
		{
			name: "priorityClassName that is no DNS subdomain",
			spec: map[string]any{"priorityClassName": "Database Critical"},
			want: []string{"spec.priorityClassName: Invalid value", "should match"},
		},
		{
			name: "schedule minute out of range",
			spec: map[string]any{"backup": map[string]any{"schedule": "60 3 * * *"}},
			want: []string{"spec.backup.schedule: Invalid value", "the minute field (number 1) of spec.backup.schedule must be 0-59"},
		},
		{
			name: "schedule hour out of range",
			spec: map[string]any{"backup": map[string]any{"schedule": "0 24 * * *"}},
			want: []string{"spec.backup.schedule: Invalid value", "the hour field (number 2) of spec.backup.schedule must be 0-23"},
		},
		{
			name: "schedule day of month zero",
			spec: map[string]any{"backup": map[string]any{"schedule": "0 3 0 * *"}},
			want: []string{"spec.backup.schedule: Invalid value", "the day-of-month field (number 3) of spec.backup.schedule must be 1-31"},
		},
		{
			name: "schedule month 13",
			spec: map[string]any{"backup": map[string]any{"schedule": "0 3 1 13 *"}},
			want: []string{"spec.backup.schedule: Invalid value", "the month field (number 4) of spec.backup.schedule must be 1-12 or JAN-DEC"},
		},
		{
			name: "schedule day of week 7",
			spec: map[string]any{"backup": map[string]any{"schedule": "0 3 * * 7"}},
			want: []string{"spec.backup.schedule: Invalid value", "the day-of-week field (number 5) of spec.backup.schedule must be 0-6 or SUN-SAT"},
		},
		{
			name: "schedule step zero",
			spec: map[string]any{"backup": map[string]any{"schedule": "*/0 3 * * *"}},
			want: []string{"spec.backup.schedule: Invalid value", "the minute field (number 1)"},
		},
		{
			name: "schedule range out of bounds",
			spec: map[string]any{"backup": map[string]any{"schedule": "0 20-25 * * *"}},
			want: []string{"spec.backup.schedule: Invalid value", "the hour field (number 2)"},
		},
		{
			name: "request above limit",
			spec: map[string]any{"resources": map[string]any{
				"requests": map[string]any{"cpu": "2", "memory": "1Gi"},
				"limits":   map[string]any{"cpu": "1", "memory": "1Gi"},
			}},
			want: []string{"spec.resources: Invalid value", msgResources},
		},
		{
			name: "service annotation key with a space",
			spec: map[string]any{"service": map[string]any{"annotations": map[string]any{"bad key": "x"}}},
			want: []string{"spec.service.annotations: Invalid value", msgAnnotationKey},
		},
		{
			name: "service annotation name part too long",
			spec: map[string]any{"service": map[string]any{"annotations": map[string]any{"example.com/" + strings.Repeat("a", 64): "x"}}},
			want: []string{"spec.service.annotations: Invalid value", msgAnnotationKey},
		},
		{
			name: "storageClassName not a DNS subdomain",
			spec: map[string]any{"storage": map[string]any{"storageClassName": "Fast_SSD"}},
			want: []string{"spec.storage.storageClassName: Invalid value", "should match"},
		},
		{
			name: "backup storageClassName not a DNS subdomain",
			spec: map[string]any{"backup": map[string]any{"storage": map[string]any{"storageClassName": "fast ssd"}}},
			want: []string{"spec.backup.storage.storageClassName: Invalid value", "should match"},
		},
		{
			name: "storage size zero",
			spec: map[string]any{"storage": map[string]any{"size": "0"}},
			want: []string{"spec.storage.size: Invalid value", msgSizePositive},
		},
		{
			name: "storage size zero as an integer",
			spec: map[string]any{"storage": map[string]any{"size": int64(0)}},
			want: []string{"spec.storage.size: Invalid value", msgSizePositive},
		},
		{
			name: "storage size negative",
			spec: map[string]any{"storage": map[string]any{"size": "-1Gi"}},
			want: []string{"spec.storage.size: Invalid value", msgSizePositive},
		},
		{
			name: "storage size not a quantity",
			spec: map[string]any{"storage": map[string]any{"size": "ten gigs"}},
			want: []string{"spec.storage.size: Invalid value", "should match"},
		},
		{
			name: "storage class name too long",
			spec: map[string]any{"storage": map[string]any{"storageClassName": strings.Repeat("s", 254)}},
			want: []string{"spec.storage.storageClassName: Too long", "253"},
		},
		{
			name: "backup storage size zero",
			spec: map[string]any{"backup": map[string]any{"storage": map[string]any{"size": "0"}}},
			want: []string{"spec.backup.storage.size: Invalid value", msgSizePositive},
		},
		{
			name: "credentials secretName not a DNS name",
			spec: map[string]any{"credentials": map[string]any{"secretName": "Bad_Name"}},
			want: []string{"spec.credentials.secretName: Invalid value", "should match"},
		},
		{
			name: "bootstrap without a source Database",
			spec: map[string]any{"bootstrap": map[string]any{"fromBackup": map[string]any{"file": "latest"}}},
			want: []string{"spec.bootstrap.fromBackup.database: Required value"},
		},
		{
			name: "bootstrap file that is not a dump name",
			spec: map[string]any{"bootstrap": map[string]any{"fromBackup": map[string]any{"database": "orders", "file": "../etc/passwd"}}},
			want: []string{"spec.bootstrap.fromBackup.file: Invalid value", "should match"},
		},
		{
			name: "credentials secretName empty string",
			spec: map[string]any{"credentials": map[string]any{"secretName": ""}},
			want: []string{"spec.credentials.secretName: Invalid value", "should match"},
		},
		{
			name: "service type ExternalName",
			spec: map[string]any{"service": map[string]any{"type": "ExternalName"}},
			want: []string{`spec.service.type: Unsupported value: "ExternalName"`},
		},
		{
			name: "backup schedule with 4 fields",
			spec: map[string]any{"backup": map[string]any{"schedule": "0 3 * *"}},
			want: []string{"spec.backup.schedule: Invalid value", msgSchedule},
		},
		{
			name: "backup schedule with 6 fields",
			spec: map[string]any{"backup": map[string]any{"schedule": "0 0 3 * * *"}},
			want: []string{"spec.backup.schedule: Invalid value", msgSchedule},
		},
		{
			name: "backup schedule garbage",
			spec: map[string]any{"backup": map[string]any{"schedule": "every day"}},
			want: []string{"spec.backup.schedule: Invalid value", msgSchedule},
		},
		{
			name: "backup schedule unknown macro",
			spec: map[string]any{"backup": map[string]any{"schedule": "@fortnightly"}},
			want: []string{"spec.backup.schedule: Invalid value", msgSchedule},
		},
		{
			name: "backup retention zero",
			spec: map[string]any{"backup": map[string]any{"retention": int64(0)}},
			want: []string{"spec.backup.retention: Invalid value", "should be greater than or equal to 1"},
		},
		{
			name: "backup retention 1001",
			spec: map[string]any{"backup": map[string]any{"retention": int64(1001)}},
			want: []string{"spec.backup.retention: Invalid value", "should be less than or equal to 1000"},
		},
		{
			name: "backup maxAge zero",
			spec: map[string]any{"backup": map[string]any{"maxAge": "0s"}},
			want: []string{"spec.backup.maxAge: Invalid value", msgMaxAge},
		},
		{
			name: "backup maxAge not a duration",
			spec: map[string]any{"backup": map[string]any{"maxAge": "tomorrow"}},
			want: []string{"spec.backup.maxAge: Invalid value", "should match"},
		},
		{
			name: "backup maxAge negative",
			spec: map[string]any{"backup": map[string]any{"maxAge": "-1h"}},
			want: []string{"spec.backup.maxAge: Invalid value", "should match"},
		},
		{
			name: "deletionPolicy Keep",
			spec: map[string]any{"deletionPolicy": "Keep"},
			want: []string{`spec.deletionPolicy: Unsupported value: "Keep"`},
		},
		{
			name:   "metadata.name of 46 characters",
			dbName: "a" + strings.Repeat("b", 45),
			want:   []string{msgNameLength},
		},
		{
			name:   "metadata.name starting with a digit",
			dbName: "1db",
			want:   []string{msgNameDNS1035},
		},
		{
			name:   "metadata.name with a dot",
			dbName: "db.prod",
			want:   []string{msgNameDNS1035},
		},
		{
			name:   "credentials secretName is the superuser Secret",
			dbName: "orders",
			spec:   map[string]any{"credentials": map[string]any{"secretName": "orders-superuser"}},
			want:   []string{msgSecretSuperuser},
		},
		{
			name: "bootstrap with both a dump and a recovery",
			spec: map[string]any{"bootstrap": map[string]any{"fromBackup": map[string]any{"database": "a"}, "recovery": map[string]any{"database": "a"}}},
			want: []string{"spec.bootstrap needs exactly one of fromBackup"},
		},
		{
			name: "recovery without a source",
			spec: map[string]any{"bootstrap": map[string]any{"recovery": map[string]any{"target": map[string]any{"lsn": "0/3000060"}}}},
			want: []string{"spec.bootstrap.recovery needs exactly one source"},
		},
		{
			name: "recovery namespace without a database",
			spec: map[string]any{"bootstrap": map[string]any{"recovery": map[string]any{"namespace": "prod", "objectStore": map[string]any{"endpoint": "s3.example:9000", "bucket": "backups", "credentialsSecret": "store"}}}},
			want: []string{"spec.bootstrap.recovery.namespace names the namespace"},
		},
		{
			name: "recovery to two targets",
			spec: map[string]any{"bootstrap": map[string]any{"recovery": map[string]any{"database": "a",
				"target": map[string]any{"lsn": "0/3000060", "name": "before-migration"}}}},
			want: []string{"takes at most one of time, lsn, xid and name"},
		},
		{
			name: "recovery to a time that is not one",
			spec: map[string]any{"bootstrap": map[string]any{"recovery": map[string]any{"database": "a", "target": map[string]any{"time": "yesterday"}}}},
			want: []string{"spec.bootstrap.recovery.target.time"},
		},
		{
			name: "object store without credentials",
			spec: map[string]any{"backup": map[string]any{"objectStore": map[string]any{"endpoint": "s3.example", "bucket": "backups"}}},
			want: []string{"spec.backup.objectStore.credentialsSecret: Required value"},
		},
		{
			name: "object store endpoint with a scheme",
			spec: map[string]any{"backup": map[string]any{"objectStore": map[string]any{"endpoint": "https://s3.example", "bucket": "backups", "credentialsSecret": "s"}}},
			want: []string{"spec.backup.objectStore.endpoint"},
		},
		{
			name: "archiveTimeout below 10s",
			spec: map[string]any{"backup": map[string]any{"archiveTimeout": "1s"}},
			want: []string{"archiveTimeout must be between 10s and 24h"},
		},
		{
			name: "CA rotation overlap below a minute",
			spec: map[string]any{"tls": map[string]any{"caRotationOverlap": "30s"}},
			want: []string{"spec.tls.caRotationOverlap must be at least 1m"},
		},
		{
			name: "CA rotation overlap that is no duration",
			spec: map[string]any{"tls": map[string]any{"caRotationOverlap": "a day"}},
			want: []string{"caRotationOverlap"},
		},
		{
			name: "verification with the volume repository Disabled",
			spec: map[string]any{"backup": map[string]any{"volumeRepository": "Disabled", "verification": map[string]any{"schedule": "@weekly"}}},
			want: []string{"spec.backup.verification needs a repository"},
		},
		{
			name: "verification without an object store nor TLS",
			spec: map[string]any{"tls": map[string]any{"mode": "Disabled"}, "backup": map[string]any{"verification": map[string]any{"schedule": "@weekly"}}},
			want: []string{"spec.backup.verification needs a repository", "spec.tls.mode is Disabled"},
		},
		{
			name: "volume repository beside an object store",
			spec: map[string]any{"backup": map[string]any{"objectStore": map[string]any{"endpoint": "s3.example", "bucket": "b", "credentialsSecret": "s"},
				"volumeRepository": "Enabled"}},
			want: []string{"spec.backup.volumeRepository Enabled and spec.backup.objectStore exclude each other"},
		},
		{
			name: "recovery into a Database without a repository",
			spec: map[string]any{"backup": map[string]any{"volumeRepository": "Disabled"}, "bootstrap": map[string]any{"recovery": map[string]any{"database": "ledger"}}},
			want: []string{"spec.bootstrap.recovery needs a repository of the new Database's own"},
		},
		{
			name: "recovery without TLS",
			spec: map[string]any{"tls": map[string]any{"mode": "Disabled"}, "backup": map[string]any{"objectStore": map[string]any{"endpoint": "s3.example", "bucket": "b", "credentialsSecret": "s"}},
				"bootstrap": map[string]any{"recovery": map[string]any{"database": "ledger"}}},
			want: []string{"spec.bootstrap.recovery needs TLS"},
		},
		{
			name: "volume repository without TLS",
			spec: map[string]any{"tls": map[string]any{"mode": "Disabled"}, "backup": map[string]any{"volumeRepository": "Enabled"}},
			want: []string{"spec.backup.volumeRepository Enabled needs TLS"},
		},
		{
			name: "verification schedule of four fields",
			spec: map[string]any{"backup": map[string]any{"objectStore": map[string]any{"endpoint": "s3.example", "bucket": "b", "credentialsSecret": "s"},
				"verification": map[string]any{"schedule": "0 5 * *"}}},
			want: []string{"verification.schedule must be a cron expression"},
		},
		{
			name: "verification timeout of seconds",
			spec: map[string]any{"backup": map[string]any{"objectStore": map[string]any{"endpoint": "s3.example", "bucket": "b", "credentialsSecret": "s"},
				"verification": map[string]any{"timeout": "30s"}}},
			want: []string{"verification.timeout must be at least 1m"},
		},
		{
			name: "recoveryWindow in minutes",
			spec: map[string]any{"backup": map[string]any{"recoveryWindow": "90m"}},
			want: []string{"spec.backup.recoveryWindow"},
		},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := tc.dbName
			if name == "" {
				name = fmt.Sprintf("db-%d", i)
			}
			err := k8s.Create(ctx, rawDatabase(ns, name, tc.spec))
			assertInvalid(t, err, tc.want...)
		})
	}
}

// TestUpdateRefused creates a valid Database, then updates it with the typed
// client in a way a transition rule forbids, and expects the refusal.
func TestUpdateRefused(t *testing.T) {
	ctx, ns := setup(t)

	withClass := map[string]any{"storage": map[string]any{"storageClassName": "standard"}}
	withBackupClass := map[string]any{"backup": map[string]any{"storage": map[string]any{"size": "20Gi", "storageClassName": "standard"}}}
	withSecret := map[string]any{"credentials": map[string]any{"secretName": "db-app"}}
	withEmptyCredentials := map[string]any{"credentials": map[string]any{}}

	cases := []struct {
		name   string
		base   map[string]any // spec created first
		mutate func(*dbv1.Database)
		want   []string
	}{
		{
			// The engine enum has a single value, so any change is refused
			// by the enum before the immutability rule is evaluated.
			name:   "engine change",
			mutate: func(db *dbv1.Database) { db.Spec.Engine = "mysql" },
			want:   []string{msgEngineEnum},
		},
		{
			name:   "version lowered within the catalog",
			mutate: func(db *dbv1.Database) { db.Spec.Version = "16" },
			want:   []string{"spec.version: Invalid value", msgVersionDown},
		},
		{
			name:   "version lowered out of the catalog",
			mutate: func(db *dbv1.Database) { db.Spec.Version = "13" },
			want:   []string{msgVersionDown, msgVersionCatalog},
		},
		{
			name:   "storage shrink",
			mutate: func(db *dbv1.Database) { db.Spec.Storage.Size = ptr.To(resource.MustParse("5Gi")) },
			want:   []string{"spec.storage.size: Invalid value", msgSizeGrow},
		},
		{
			name:   "storage size to zero",
			mutate: func(db *dbv1.Database) { db.Spec.Storage.Size = ptr.To(resource.MustParse("0")) },
			want:   []string{msgSizePositive, msgSizeGrow},
		},
		{
			name:   "storage class change",
			base:   withClass,
			mutate: func(db *dbv1.Database) { db.Spec.Storage.StorageClassName = ptr.To("fast") },
			want:   []string{"spec.storage.storageClassName: Invalid value", msgClassImmut},
		},
		{
			name:   "storage class removal",
			base:   withClass,
			mutate: func(db *dbv1.Database) { db.Spec.Storage.StorageClassName = nil },
			want:   []string{"spec.storage: Invalid value", msgClassAddRemove},
		},
		{
			name:   "storage class added after creation",
			mutate: func(db *dbv1.Database) { db.Spec.Storage.StorageClassName = ptr.To("fast") },
			want:   []string{"spec.storage: Invalid value", msgClassAddRemove},
		},
		{
			name:   "backup storage shrink",
			mutate: func(db *dbv1.Database) { db.Spec.Backup.Storage.Size = ptr.To(resource.MustParse("10Gi")) },
			want:   []string{"spec.backup.storage.size: Invalid value", msgSizeGrow},
		},
		{
			name:   "backup storage class change",
			base:   withBackupClass,
			mutate: func(db *dbv1.Database) { db.Spec.Backup.Storage.StorageClassName = ptr.To("fast") },
			want:   []string{"spec.backup.storage.storageClassName: Invalid value", msgClassImmut},
		},
		{
			name:   "backup storage class removal",
			base:   withBackupClass,
			mutate: func(db *dbv1.Database) { db.Spec.Backup.Storage.StorageClassName = nil },
			want:   []string{"spec.backup.storage: Invalid value", msgClassAddRemove},
		},
		{
			name:   "backup storage class added after creation",
			mutate: func(db *dbv1.Database) { db.Spec.Backup.Storage.StorageClassName = ptr.To("fast") },
			want:   []string{"spec.backup.storage: Invalid value", msgClassAddRemove},
		},
		{
			name:   "credentials secretName change",
			base:   withSecret,
			mutate: func(db *dbv1.Database) { db.Spec.Credentials.SecretName = "other-superuser" },
			want:   []string{"spec.credentials.secretName: Invalid value", msgSecretImmut},
		},
		{
			name:   "bootstrap source change",
			base:   map[string]any{"bootstrap": map[string]any{"fromBackup": map[string]any{"database": "orders"}}},
			mutate: func(db *dbv1.Database) { db.Spec.Bootstrap.FromBackup.Database = "billing" },
			want:   []string{"spec.bootstrap: Invalid value", "spec.bootstrap is immutable"},
		},
		{
			name:   "bootstrap removal",
			base:   map[string]any{"bootstrap": map[string]any{"fromBackup": map[string]any{"database": "orders"}}},
			mutate: func(db *dbv1.Database) { db.Spec.Bootstrap = nil },
			want:   []string{"spec.bootstrap cannot be added or removed after creation"},
		},
		{
			name:   "credentials secretName removal",
			base:   withSecret,
			mutate: func(db *dbv1.Database) { db.Spec.Credentials = &dbv1.CredentialsSpec{} },
			want:   []string{"spec.credentials: Invalid value", msgSecretAddRem},
		},
		{
			name:   "credentials secretName added after creation",
			base:   withEmptyCredentials,
			mutate: func(db *dbv1.Database) { db.Spec.Credentials.SecretName = "db-app" },
			want:   []string{"spec.credentials: Invalid value", msgSecretAddRem},
		},
		{
			name:   "credentials removal",
			base:   withSecret,
			mutate: func(db *dbv1.Database) { db.Spec.Credentials = nil },
			want:   []string{"spec: Invalid value", msgCredsAddRemove},
		},
		{
			name:   "credentials added after creation",
			mutate: func(db *dbv1.Database) { db.Spec.Credentials = &dbv1.CredentialsSpec{SecretName: "db-app"} },
			want:   []string{"spec: Invalid value", msgCredsAddRemove},
		},
		{
			name:   "replicas above 9 on update",
			mutate: func(db *dbv1.Database) { db.Spec.Replicas = ptr.To[int32](10) },
			want:   []string{"spec.replicas: Invalid value", "should be less than or equal to 9"},
		},
		{
			name:   "maxAge to zero on update",
			mutate: func(db *dbv1.Database) { db.Spec.Backup.MaxAge = &metav1.Duration{} },
			want:   []string{"spec.backup.maxAge: Invalid value", msgMaxAge},
		},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("db-%d", i)
			require.NoError(t, k8s.Create(ctx, rawDatabase(ns, name, tc.base)), "creating the valid base Database")
			var db dbv1.Database
			require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &db))
			tc.mutate(&db)
			err := k8s.Update(ctx, &db)
			assertInvalid(t, err, tc.want...)
		})
	}
}

// TestMinimalDatabaseGetsDefaults creates `spec: {}` (and no spec at all) and
// checks every default the CRD promises.
func TestMinimalDatabaseGetsDefaults(t *testing.T) {
	ctx, ns := setup(t)

	for _, tc := range []struct {
		name string
		obj  *unstructured.Unstructured
	}{
		{name: "empty spec", obj: rawDatabase(ns, "minimal", nil)},
		{name: "no spec", obj: func() *unstructured.Unstructured {
			u := rawDatabase(ns, "nospec", nil)
			delete(u.Object, "spec")
			return u
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, k8s.Create(ctx, tc.obj))
			var db dbv1.Database
			require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(tc.obj), &db))
			s := db.Spec
			assert.Equal(t, dbv1.EnginePostgres, s.Engine, "engine")
			assert.Equal(t, "17", s.Version, "version")
			if assert.NotNil(t, s.Replicas, "replicas") {
				assert.Equal(t, int32(1), *s.Replicas, "replicas")
			}
			assert.Equal(t, "10Gi", s.Storage.Size.String(), "storage.size")
			assert.Nil(t, s.Storage.StorageClassName, "storage.storageClassName")
			assert.Nil(t, s.Credentials, "credentials")
			assert.Equal(t, corev1.ServiceTypeClusterIP, s.Service.Type, "service.type")
			assert.Equal(t, "0 3 * * *", s.Backup.Schedule, "backup.schedule")
			assert.Equal(t, int32(7), s.Backup.Retention, "backup.retention")
			assert.Equal(t, 26*time.Hour, s.Backup.MaxAge.Duration, "backup.maxAge")
			assert.Equal(t, "20Gi", s.Backup.Storage.Size.String(), "backup.storage.size")
			assert.Nil(t, s.Backup.Storage.StorageClassName, "backup.storage.storageClassName")
			assert.Equal(t, dbv1.DeletionPolicyDelete, s.DeletionPolicy, "deletionPolicy")
			assert.False(t, s.Paused, "paused")
			assert.False(t, s.Backup.Suspend, "backup.suspend")
		})
	}
}

// TestValidUpdateAccepted grows the storage and scales up, which the rules
// allow, and changes the fields that are not immutable.
func TestValidUpdateAccepted(t *testing.T) {
	ctx, ns := setup(t)

	spec := map[string]any{
		"storage":     map[string]any{"storageClassName": "standard"},
		"credentials": map[string]any{"secretName": "db-app"},
	}
	require.NoError(t, k8s.Create(ctx, rawDatabase(ns, "grow", spec)))
	key := client.ObjectKey{Namespace: ns, Name: "grow"}
	var db dbv1.Database
	require.NoError(t, k8s.Get(ctx, key, &db))
	require.Equal(t, int32(1), *db.Spec.Replicas)
	require.Equal(t, "10Gi", db.Spec.Storage.Size.String())

	db.Spec.Storage.Size = ptr.To(resource.MustParse("20Gi"))
	db.Spec.Replicas = ptr.To[int32](0)
	db.Spec.Backup.Storage.Size = ptr.To(resource.MustParse("50Gi"))
	db.Spec.Backup.Schedule = "@hourly"
	db.Spec.Backup.Retention = 30
	db.Spec.Backup.MaxAge = &metav1.Duration{Duration: 2 * time.Hour}
	db.Spec.DeletionPolicy = dbv1.DeletionPolicyRetain
	db.Spec.Service.Type = corev1.ServiceTypeLoadBalancer
	db.Spec.Image = "docker.io/library/postgres:17.2"
	db.Spec.Paused = true
	require.NoError(t, k8s.Update(ctx, &db))

	var got dbv1.Database
	require.NoError(t, k8s.Get(ctx, key, &got))
	assert.Equal(t, "20Gi", got.Spec.Storage.Size.String())
	assert.Equal(t, int32(0), *got.Spec.Replicas)
	assert.Equal(t, "50Gi", got.Spec.Backup.Storage.Size.String())
	assert.Equal(t, "standard", ptr.Deref(got.Spec.Storage.StorageClassName, ""))
	assert.Equal(t, "db-app", got.Spec.Credentials.SecretName)

	// Scaling back up starts the database again, with standbys; so is an
	// update that changes nothing of the immutable fields.
	got.Spec.Replicas = ptr.To[int32](3)
	require.NoError(t, k8s.Update(ctx, &got))
}

// TestValidCreateAccepted guards against rules that are tighter than the API
// documents: each of these must be accepted.
func TestValidCreateAccepted(t *testing.T) {
	ctx, ns := setup(t)

	cases := []struct {
		name   string
		dbName string
		spec   map[string]any
	}{
		{name: "version 15", spec: map[string]any{"version": "15"}},
		{name: "version 16", spec: map[string]any{"version": "16"}},
		{name: "version 17", spec: map[string]any{"version": "17"}},
		{name: "version 18", spec: map[string]any{"version": "18"}},
		{name: "image with digest", spec: map[string]any{"image": "docker.io/library/postgres@sha256:" + strings.Repeat("0", 64)}},
		{name: "replicas 0", spec: map[string]any{"replicas": int64(0)}},
		{name: "replicas 1", spec: map[string]any{"replicas": int64(1)}},
		{name: "replicas 2, a primary and a standby", spec: map[string]any{"replicas": int64(2)}},
		{name: "replicas 9, the most", spec: map[string]any{"replicas": int64(9)}},
		{name: "affinity", spec: map[string]any{"affinity": map[string]any{
			"podAntiAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": []any{map[string]any{
				"topologyKey":   "kubernetes.io/hostname",
				"labelSelector": map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/instance": "ok"}},
			}}},
			"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{"nodeSelectorTerms": []any{
				map[string]any{"matchExpressions": []any{map[string]any{"key": "topology.kubernetes.io/zone", "operator": "In", "values": []any{"a", "b"}}}},
			}}},
		}}},
		{name: "dedicated database nodes: tolerations, node selector, priority class", spec: map[string]any{
			"tolerations": []any{
				map[string]any{"key": "dedicated", "operator": "Equal", "value": "database", "effect": "NoSchedule"},
				map[string]any{"key": "dedicated", "value": "database"},
				map[string]any{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": int64(30)},
				map[string]any{"operator": "Exists"},
			},
			"nodeSelector":      map[string]any{"node-role.example.com/database": "", "disk": "NVMe_1.0"},
			"priorityClassName": "database-critical.example.com",
		}},
		{name: "spread constraints of the user's own, with a selector and matchLabelKeys", spec: map[string]any{"topologySpreadConstraints": []any{
			map[string]any{"maxSkew": int64(1), "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule", "minDomains": int64(3),
				"nodeAffinityPolicy": "Honor", "nodeTaintsPolicy": "Honor"},
			map[string]any{"maxSkew": int64(1), "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
				"labelSelector": map[string]any{"matchLabels": map[string]any{"team": "payments"}}, "matchLabelKeys": []any{"shard"}},
		}}},
		{name: "no spread constraint at all", spec: map[string]any{"topologySpreadConstraints": []any{}}},
		{name: "schedule lists, ranges and steps in every field", spec: map[string]any{"backup": map[string]any{"schedule": "0,30 9-17/2 1-31/3 */2 mon-fri"}}},
		{name: "schedule with ? and names in lower case", spec: map[string]any{"backup": map[string]any{"schedule": "5 4 ? jan,jul sun"}}},
		{name: "schedule with bounds", spec: map[string]any{"backup": map[string]any{"schedule": "59 23 31 12 6"}}},
		{name: "request equal to limit", spec: map[string]any{"resources": map[string]any{
			"requests": map[string]any{"cpu": "500m", "memory": "1Gi"},
			"limits":   map[string]any{"cpu": "0.5", "memory": "1024Mi", "hugepages-2Mi": "0"},
		}}},
		{name: "request without limit", spec: map[string]any{"resources": map[string]any{"requests": map[string]any{"cpu": "2"}}}},
		{name: "service annotations with prefixes", spec: map[string]any{"service": map[string]any{"annotations": map[string]any{
			"service.beta.kubernetes.io/aws-load-balancer-internal": "true", "plain_key.v1": "x",
		}}}},
		{name: "storage size integer", spec: map[string]any{"storage": map[string]any{"size": int64(1 << 30)}}},
		{name: "storage size decimal", spec: map[string]any{"storage": map[string]any{"size": "1.5Gi"}}},
		{name: "secretName with dots", spec: map[string]any{"credentials": map[string]any{"secretName": "db.superuser-1"}}},
		{name: "credentials without secretName", spec: map[string]any{"credentials": map[string]any{}}},
		{name: "secretName of another Database's superuser Secret", spec: map[string]any{"credentials": map[string]any{"secretName": "other-superuser"}}},
		{name: "service NodePort", spec: map[string]any{"service": map[string]any{"type": "NodePort"}}},
		{name: "schedule macro", spec: map[string]any{"backup": map[string]any{"schedule": "@daily"}}},
		{name: "schedule step", spec: map[string]any{"backup": map[string]any{"schedule": "*/15 * * * *"}}},
		{name: "schedule names", spec: map[string]any{"backup": map[string]any{"schedule": "30 2 * JAN-DEC MON-FRI"}}},
		{name: "retention bounds", spec: map[string]any{"backup": map[string]any{"retention": int64(1000)}}},
		{name: "maxAge compound", spec: map[string]any{"backup": map[string]any{"maxAge": "1h30m"}}},
		{name: "synchronous Required, number below replicas", spec: map[string]any{"replicas": int64(3),
			"highAvailability": map[string]any{"synchronous": map[string]any{"method": "First", "number": int64(2)}}}},
		{name: "synchronous Preferred may ask for more standbys than there are", spec: map[string]any{"replicas": int64(2),
			"highAvailability": map[string]any{"synchronous": map[string]any{"number": int64(3), "dataDurability": "Preferred"}}}},
		{name: "synchronous on zero replicas", spec: map[string]any{"replicas": int64(0),
			"highAvailability": map[string]any{"synchronous": map[string]any{"number": int64(1)}}}},
		{name: "failover settings", spec: map[string]any{"replicas": int64(3), "highAvailability": map[string]any{
			"failover": false, "failoverDelay": "30s", "maxFailoverLag": "0"}}},
		{name: "deletionPolicy WipeOut", spec: map[string]any{"deletionPolicy": "WipeOut"}},
		{name: "deletionPolicy DoNotDelete", spec: map[string]any{"deletionPolicy": "DoNotDelete"}},
		{name: "name of 45 characters", dbName: "a" + strings.Repeat("b", 44)},
		{name: "name of one letter", dbName: "a"},
		{name: "object store, recovery window, archive timeout", spec: map[string]any{"backup": map[string]any{
			"objectStore": map[string]any{"endpoint": "s3.example:9000", "bucket": "backups", "credentialsSecret": "store"}, "recoveryWindow": "14d", "archiveTimeout": "30s"}}},
		{name: "volume repository with its verification", spec: map[string]any{"backup": map[string]any{
			"volumeRepository": "Enabled", "verification": map[string]any{"schedule": "@weekly"}}}},
		{name: "verification and recovery on the default repository, a window in hours", spec: map[string]any{
			"backup":    map[string]any{"recoveryWindow": "36h", "verification": map[string]any{"schedule": "@weekly"}},
			"bootstrap": map[string]any{"recovery": map[string]any{"database": "ledger"}}}},
		{name: "verification with its limits", spec: map[string]any{"backup": map[string]any{
			"objectStore":  map[string]any{"endpoint": "s3.example:9000", "bucket": "backups", "credentialsSecret": "store"},
			"verification": map[string]any{"schedule": "30 4 * * 6", "scratchSize": "5Gi", "timeout": "90m", "resources": map[string]any{"limits": map[string]any{"memory": "2Gi"}}}}}},
		{name: "recovery to a time with microseconds", spec: map[string]any{"backup": map[string]any{"volumeRepository": "Enabled"},
			"bootstrap": map[string]any{"recovery": map[string]any{
				"database": "ledger", "namespace": "prod", "target": map[string]any{"time": "2026-12-05T14:01:59.123456Z"}}}}},
		{name: "recovery from a repository path to the archive's end", spec: map[string]any{
			"backup": map[string]any{"objectStore": map[string]any{"endpoint": "s3.example", "bucket": "backups", "credentialsSecret": "s"}},
			"bootstrap": map[string]any{"recovery": map[string]any{
				"objectStore": map[string]any{"endpoint": "s3.example", "bucket": "backups", "path": "/dbkeeper/prod/ledger/0b1c", "credentialsSecret": "s"}}}}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := tc.dbName
			if name == "" {
				name = fmt.Sprintf("ok-%d", i)
			}
			assert.NoError(t, k8s.Create(ctx, rawDatabase(ns, name, tc.spec)))
		})
	}
}

// TestScaleUpToNine: `kubectl scale db/x --replicas=N`
// goes through the scale subresource, which must apply the same rule as an
// edit of spec.replicas: 0 to 9 (a primary and up to eight standbys), not
// 10.
func TestScaleUpToNine(t *testing.T) {
	ctx, ns := setup(t)
	require.NoError(t, k8s.Create(ctx, rawDatabase(ns, "scaled", nil)))
	db := &dbv1.Database{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "scaled"}, db))

	scale := func(replicas int32) error {
		s := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: replicas}}
		return k8s.SubResource("scale").Update(ctx, db, client.WithSubResourceBody(s))
	}
	assertInvalid(t, scale(10), "spec.replicas: Invalid value", "should be less than or equal to 9")
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(db), db))
	assert.Equal(t, int32(1), *db.Spec.Replicas, "a refused scale changed spec.replicas")

	require.NoError(t, scale(3), "scaling to a primary and two standbys")
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(db), db))
	assert.Equal(t, int32(3), *db.Spec.Replicas)
	require.NoError(t, scale(9), "scaling to the most")
	require.NoError(t, scale(0), "scaling to zero")
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(db), db))
	assert.Equal(t, int32(0), *db.Spec.Replicas)
	require.NoError(t, scale(1), "scaling back to one")
}

// TestMajorVersionRaisedOnly: spec.version goes up (an in-place upgrade),
// never down, except back to the major an upgrade failed from, which the
// status says.
func TestMajorVersionRaisedOnly(t *testing.T) {
	ctx, ns := setup(t)
	require.NoError(t, k8s.Create(ctx, rawDatabase(ns, "raised", map[string]any{"version": "15"})))
	var db dbv1.Database
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "raised"}, &db))
	db.Spec.Version = "17"
	require.NoError(t, k8s.Update(ctx, &db), "15 to 17 refused")

	back := db.DeepCopy()
	back.Spec.Version = "15"
	assertInvalid(t, k8s.Update(ctx, back), "spec.version: Invalid value", msgVersionDown)

	t.Log("the upgrade failed: 15 again is accepted, 16 is not")
	db.Status.Replication = &dbv1.ReplicationStatus{MajorUpgrade: &dbv1.MajorUpgradeStatus{From: "15", To: "17",
		Phase: dbv1.MajorUpgradeFailed, Primary: "raised-0", StartedAt: metav1.Now()}}
	require.NoError(t, k8s.Status().Update(ctx, &db))
	other := db.DeepCopy()
	other.Spec.Version = "16"
	assertInvalid(t, k8s.Update(ctx, other), msgVersionDown)
	db.Spec.Version = "15"
	require.NoError(t, k8s.Update(ctx, &db), "back to 15 after the failed upgrade refused")
}
