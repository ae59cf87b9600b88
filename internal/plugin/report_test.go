package plugin_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/internal/plugin"
)

// untar is the files of a gzipped tar, by name.
func untar(t *testing.T, data []byte) map[string]string {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(data))
	require.NoError(t, err)
	tr := tar.NewReader(gz)
	files := map[string]string{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		require.NoError(t, err)
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		files[hdr.Name] = string(b)
	}
}

// leaky are objects of shop/orders (and others) with the password in
// every place an object can carry it.
func leaky() []client.Object {
	labels := map[string]string{"app.kubernetes.io/name": "postgres", "app.kubernetes.io/instance": "orders"}
	db := replicated()
	db.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"password":"` + password + `"}`}
	sts := statefulSet("postgres:17")
	sts.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"env":[{"name":"PGPASSWORD","value":"` + password + `"}]}`}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-0", Labels: labels},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "agent", Image: "manager"}},
			Containers: []corev1.Container{{Name: "engine", Image: "postgres:17", Env: []corev1.EnvVar{
				{Name: "POSTGRES_PASSWORD", Value: password}, {Name: "AWS_SECRET_ACCESS_KEY", Value: password},
				{Name: "APP_URI", Value: "postgres://app:" + password + "@orders.shop.svc:5432/app"},
				{Name: "PGHOST", Value: "orders.shop.svc"}}}},
		},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "engine", RestartCount: 1}}},
	}
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "billing-0",
		Labels: map[string]string{"app.kubernetes.io/name": "postgres", "app.kubernetes.io/instance": "billing"}}}
	config := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-hba", Labels: labels},
		Data: map[string]string{"pg_hba.conf": "hostssl all all all scram-sha-256", "password": password}}
	event := func(name, object, msg string) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: object, Namespace: "shop"},
			Type:           "Warning", Reason: "Unhealthy", Message: msg, Count: 2, LastTimestamp: metav1.Time{Time: now}}
	}
	operatorLabels := map[string]string{"app.kubernetes.io/name": "dbkeeper", "app.kubernetes.io/component": "manager"}
	operator := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "dbkeeper-system", Name: "dbkeeper", Labels: operatorLabels},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: operatorLabels}}}
	operatorPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "dbkeeper-system", Name: "dbkeeper-5d9f", Labels: operatorLabels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "manager"}}}}
	return []client.Object{db, credentials(), sts, pod, other, config, operator, operatorPod,
		event("orders-0.1", "orders-0", "readiness probe failed: password="+password),
		event("billing-0.1", "billing-0", "billing is unwell")}
}

// logs is a fake log reader whose logs leak the password too.
func logs(failFor string) func(context.Context, string, string, *corev1.PodLogOptions) ([]byte, error) {
	return func(_ context.Context, ns, pod string, o *corev1.PodLogOptions) ([]byte, error) {
		if pod+"/"+o.Container == failFor {
			return nil, fmt.Errorf("pods %q is forbidden", pod)
		}
		return []byte(fmt.Sprintf("%s/%s/%s tail=%d previous=%t\n", ns, pod, o.Container, *o.TailLines, o.Previous) +
			"LOG:  connection authorized: user=app database=app\n" +
			"ERROR: password=" + password + " and token: " + password + "\n" +
			`{"level":"info","msg":"applied","secretAccessKey":"` + password + `"}` + "\n" +
			"STATEMENT:  ALTER ROLE app PASSWORD '" + password + "'\n" +
			"dsn postgres://app:" + password + "@orders.shop.svc:5432/app\n"), nil
	}
}

// TestReportRedacts: the bundle holds the Database, its status, its
// children, its pods and their logs (the previous run's too), the events
// about them and the operator's Deployment and logs; the password placed
// in a Secret, an environment variable, a URI, a ConfigMap, an
// annotation, an event and the logs appears nowhere in it, not even in
// base64.
func TestReportRedacts(t *testing.T) {
	e, _, out := env(t, leaky()...)
	e.Logs = logs("")
	file := filepath.Join(t.TempDir(), "bundle.tar.gz")
	require.NoError(t, plugin.Run(context.Background(), e, []string{"report", "orders", "-o", file, "--tail", "50"}))
	assert.Contains(t, out.String(), "wrote "+file)
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	files := untar(t, data)

	var names []string
	for name, content := range files {
		names = append(names, name)
		for _, leak := range []string{password, base64.StdEncoding.EncodeToString([]byte(password))} {
			assert.NotContains(t, content, leak, name)
		}
	}
	sort.Strings(names)
	dir := "orders-report-20261206T140200Z/"
	for _, want := range []string{"database.yaml", "status.txt", "status.json", "statefulsets.yaml", "secrets.yaml", "configmaps.yaml",
		"pods/orders-0.yaml", "logs/orders-0/engine.log", "logs/orders-0/engine.previous.log", "logs/orders-0/agent.log",
		"events.txt", "events.yaml", "operator/dbkeeper-system/deployment-dbkeeper.yaml",
		"operator/dbkeeper-system/logs/dbkeeper-5d9f/manager.log"} {
		assert.Contains(t, names, dir+want)
	}
	assert.NotContains(t, names, dir+"pods/billing-0.yaml")
	assert.NotContains(t, names, dir+"errors.txt")

	// what is kept: keys, names, non-secret values, the log's other lines
	assert.Contains(t, files[dir+"secrets.yaml"], "password: <redacted>")
	assert.Contains(t, files[dir+"secrets.yaml"], "name: orders-credentials")
	assert.Contains(t, files[dir+"pods/orders-0.yaml"], "value: orders.shop.svc")
	assert.Contains(t, files[dir+"pods/orders-0.yaml"], "postgres://app:<redacted>@orders.shop.svc:5432/app")
	assert.Contains(t, files[dir+"configmaps.yaml"], "hostssl all all all scram-sha-256")
	assert.Contains(t, files[dir+"logs/orders-0/engine.log"], "shop/orders-0/engine tail=50 previous=false")
	assert.Contains(t, files[dir+"logs/orders-0/engine.previous.log"], "previous=true")
	assert.Contains(t, files[dir+"logs/orders-0/engine.log"], "connection authorized: user=app database=app")
	assert.Contains(t, files[dir+"logs/orders-0/engine.log"], "PASSWORD '<redacted>'")
	assert.Contains(t, files[dir+"events.txt"], "Pod/orders-0")
	assert.NotContains(t, files[dir+"events.txt"], "billing")
	assert.Contains(t, files[dir+"status.txt"], "Database shop/orders")
	assert.Contains(t, files[dir+"database.yaml"], "kind: Database")
	assert.NotContains(t, files[dir+"database.yaml"], "managedFields")
}

// TestReportPartial: what cannot be read is named in errors.txt and the
// rest is still written; without the operator's labels anywhere, the
// bundle says to name its namespace; -o - writes to stdout.
func TestReportPartial(t *testing.T) {
	objs := leaky()[:6]
	e, _, out := env(t, objs...)
	e.Logs = logs("orders-0/engine")
	require.NoError(t, plugin.Run(context.Background(), e, []string{"report", "-o", "-", "orders", "--operator-namespace", "dbkeeper-system"}))
	files := untar(t, out.Bytes())
	errs := files["orders-report-20261206T140200Z/errors.txt"]
	assert.Contains(t, errs, `the log of shop/orders-0 container engine (previous false): pods "orders-0" is forbidden`)
	assert.Contains(t, errs, "no operator Deployment labelled app.kubernetes.io/name=dbkeeper,app.kubernetes.io/component=manager in namespace dbkeeper-system")
	assert.Contains(t, files, "orders-report-20261206T140200Z/logs/orders-0/agent.log")
}

// TestRedactText: the secrets of a log line go, the rest stays.
func TestRedactText(t *testing.T) {
	for in, want := range map[string]string{
		"password=hunter2 user=app":                 "password=<redacted> user=app",
		`{"token": "abc", "user": "app"}`:           `{"token": <redacted>, "user": "app"}`,
		"postgresql://app:pw@db:5432/app":           "postgresql://app:<redacted>@db:5432/app",
		"ALTER ROLE app PASSWORD 'it''s'":           "ALTER ROLE app PASSWORD '<redacted>'",
		"password authentication failed for user x": "password authentication failed for user x",
		"AWS_SECRET_ACCESS_KEY: abc":                "AWS_SECRET_ACCESS_KEY: <redacted>",
	} {
		assert.Equal(t, want, plugin.RedactText(in), in)
	}
}
