package plugin_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/plugin"
)

const password = "s3cr3t-Pa55w0rd-xyz"

// credentials is the application's Secret of shop/orders.
func credentials() *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-credentials",
			Labels: map[string]string{"app.kubernetes.io/name": "postgres", "app.kubernetes.io/instance": "orders"}},
		Data: map[string][]byte{"username": []byte("app"), "database": []byte("app"), "password": []byte(password),
			"uri": []byte("postgres://app:" + password + "@orders.shop.svc:5432/app?sslmode=verify-full")},
	}
}

// statefulSet is the engine StatefulSet of shop/orders, running image
// (the manager's catalog, not the built-in one) with a pull Secret.
func statefulSet(image string) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders",
			Labels: map[string]string{"app.kubernetes.io/name": "postgres", "app.kubernetes.io/instance": "orders"}},
		Spec: appsv1.StatefulSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			ImagePullSecrets: []corev1.LocalObjectReference{{Name: "mirror"}},
			Containers: []corev1.Container{{Name: "engine", Image: image,
				Env: []corev1.EnvVar{{Name: "PGPASSWORD", Value: password}, {Name: "DATABASE_URL", Value: "postgres://app:" + password + "@orders:5432/app"}}}},
			Volumes: []corev1.Volume{{Name: "tls"}},
		}}},
	}
}

// runPsql runs psql on db with args and returns kubectl's arguments and
// the pod of its --overrides.
func runPsql(t *testing.T, db *dbv1.Database, tty bool, args ...string) ([]string, *corev1.Pod, client.Client) {
	t.Helper()
	e, c, _ := env(t, db, credentials(), statefulSet("mirror.example/postgres:17.6-1"))
	e.TTY = tty
	e.KubectlFlags = []string{"--context=prod"}
	var argv []string
	pod := &corev1.Pod{}
	e.Exec = func(ctx context.Context, a []string) error {
		argv = a
		for _, arg := range a {
			if v, ok := strings.CutPrefix(arg, "--overrides="); ok {
				require.NoError(t, json.Unmarshal([]byte(v), pod))
			}
		}
		// kubectl was interrupted: the pod is still there
		return c.Create(ctx, pod.DeepCopy())
	}
	require.NoError(t, plugin.Run(context.Background(), e, append([]string{"psql", "orders"}, args...)))
	return argv, pod, c
}

// TestPsqlPod: psql runs in a client pod of the Database's own image
// (the StatefulSet's), through kubectl run --rm attached to the terminal;
// the password reaches it from the credentials Secret through a
// secretKeyRef and is nowhere in the pod's spec nor in kubectl's
// arguments; with TLS it verifies the read-write Service (verify-full)
// with the mounted CA; the pod is deleted afterwards even when kubectl
// could not.
func TestPsqlPod(t *testing.T) {
	argv, pod, c := runPsql(t, replicated(), true, "--", "-c", "SELECT 1")

	assert.Equal(t, []string{"kubectl", "--context=prod", "run", pod.Name, "--namespace=shop", "--image=mirror.example/postgres:17.6-1",
		"--restart=Never", "--rm", "--stdin", "--tty=true", "--pod-running-timeout=2m", "--override-type=merge"}, argv[:len(argv)-1])
	assert.Regexp(t, `^orders-psql-[a-z0-9]{5}$`, pod.Name)
	assert.NotContains(t, strings.Join(argv, " "), password)
	assert.NotContains(t, strings.Join(argv, " "), "exec")

	spec, err := json.Marshal(pod)
	require.NoError(t, err)
	assert.NotContains(t, string(spec), password)

	require.Len(t, pod.Spec.Containers, 1)
	ctr := pod.Spec.Containers[0]
	assert.Equal(t, []string{"psql", "-c", "SELECT 1"}, ctr.Command)
	assert.Equal(t, "mirror.example/postgres:17.6-1", ctr.Image)
	assert.True(t, ctr.Stdin && ctr.StdinOnce && ctr.TTY)
	assert.Equal(t, []corev1.LocalObjectReference{{Name: "mirror"}}, pod.Spec.ImagePullSecrets)
	assert.Equal(t, corev1.RestartPolicyNever, pod.Spec.RestartPolicy)
	assert.False(t, *pod.Spec.AutomountServiceAccountToken)
	assert.True(t, *ctr.SecurityContext.ReadOnlyRootFilesystem)
	assert.True(t, *pod.Spec.SecurityContext.RunAsNonRoot)

	env := map[string]corev1.EnvVar{}
	for _, e := range ctr.Env {
		env[e.Name] = e
	}
	require.NotNil(t, env["PGPASSWORD"].ValueFrom)
	assert.Empty(t, env["PGPASSWORD"].Value)
	assert.Equal(t, &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "orders-credentials"}, Key: "password"},
		env["PGPASSWORD"].ValueFrom.SecretKeyRef)
	assert.Equal(t, "username", env["PGUSER"].ValueFrom.SecretKeyRef.Key)
	assert.Equal(t, "orders.shop.svc", env["PGHOST"].Value)
	assert.Equal(t, "verify-full", env["PGSSLMODE"].Value)
	assert.Equal(t, "/etc/dbkeeper/tls-ca/ca.crt", env["PGSSLROOTCERT"].Value)

	var ca *corev1.Volume
	for i := range pod.Spec.Volumes {
		if s := pod.Spec.Volumes[i].Secret; s != nil {
			ca = &pod.Spec.Volumes[i]
		}
	}
	require.NotNil(t, ca, "the CA volume")
	assert.Equal(t, "orders-tls", ca.Secret.SecretName)
	assert.Equal(t, []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}, ca.Secret.Items)
	assert.Contains(t, ctr.VolumeMounts, corev1.VolumeMount{Name: ca.Name, MountPath: "/etc/dbkeeper/tls-ca", ReadOnly: true})

	err = c.Get(context.Background(), client.ObjectKeyFromObject(pod), &corev1.Pod{})
	assert.True(t, apierrors.IsNotFound(err), "the psql pod is deleted afterwards: %v", err)
}

// TestPsqlPodPlaintext: a Database with TLS off gets neither the CA nor
// verify-full; psql's arguments may follow NAME without --; no terminal,
// no tty.
func TestPsqlPodPlaintext(t *testing.T) {
	db := replicated()
	db.Spec.TLS = &dbv1.TLSSpec{Mode: dbv1.TLSModeDisabled}
	argv, pod, _ := runPsql(t, db, false, "-c", "SELECT 2")
	assert.Contains(t, argv, "--tty=false")
	ctr := pod.Spec.Containers[0]
	assert.Equal(t, []string{"psql", "-c", "SELECT 2"}, ctr.Command)
	assert.False(t, ctr.TTY)
	for _, e := range ctr.Env {
		assert.NotEqual(t, "PGSSLMODE", e.Name)
	}
	for _, v := range pod.Spec.Volumes {
		assert.Nil(t, v.Secret, v.Name)
	}
}
