package dbtest

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Client is how a test reaches a Database as an application would: psql in
// a pod of the cluster, through the client Service by its DNS name, with the
// credentials of the Database's Secret.
type Client struct {
	// Client creates and deletes the pods.
	Client client.Client
	// Clientset reads their logs.
	Clientset kubernetes.Interface
	// Image has psql (a PostgreSQL image of the cluster).
	Image string
}

// Conn says where a query goes.
type Conn struct {
	// Namespace of the Database, its Secret and the client pod.
	Namespace string
	// Secret holds the credentials.
	Secret string
	// Host, when set, is where psql connects with the Secret's username,
	// password and (optional) database keys. Empty uses the Secret's uri
	// key, as an application given only the generated Secret does.
	Host string
	// CASecret holds the ca.crt that verifies the server (mounted, with
	// PGSSLROOTCERT pointing at it, when the Secret has the key); empty
	// means Secret, as an application given the generated Secret does.
	CASecret string
}

// caDir is where a client pod finds ca.crt.
const caDir = "/etc/dbtest-ca"

// Query runs sql (psql -c, unaligned, tuples only, stopping at the first
// error) in a new pod, waits for it to end, and returns its output. An error
// carries the output of a failed psql, e.g. the server's refusal.
func (c Client) Query(ctx context.Context, conn Conn, sql string, timeout time.Duration) (string, error) {
	env, target := conn.Env()
	script := `exec psql ` + target + ` --no-psqlrc --no-password --tuples-only --no-align --set=ON_ERROR_STOP=1 --command="$1" 2>&1`
	return c.RunWithCA(ctx, conn.Namespace, conn.CA(), env, script, []string{sql}, timeout)
}

// CA is the Secret whose ca.crt a client of conn verifies the server with.
func (conn Conn) CA() string {
	if conn.CASecret != "" {
		return conn.CASecret
	}
	return conn.Secret
}

// Run runs a bash script with args ($1...) and env in a new pod of the
// client image in namespace, waits for it to end, and returns its output;
// an error carries the output of a failed script.
func (c Client) Run(ctx context.Context, namespace string, env []corev1.EnvVar, script string, args []string, timeout time.Duration) (string, error) {
	return c.RunWithCA(ctx, namespace, "", env, script, args, timeout)
}

// RunWithCA is Run in a pod that also has the ca.crt of Secret caSecret
// (when it has that key) and PGSSLROOTCERT pointing at it, so that libpq
// verifies the server as sslmode=verify-full asks.
func (c Client) RunWithCA(ctx context.Context, namespace, caSecret string, env []corev1.EnvVar, script string, args []string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pod := c.pod(namespace, env, script, args)
	if caSecret != "" {
		withCA(pod, caSecret)
	}
	if err := c.Client.Create(ctx, pod); err != nil {
		return "", fmt.Errorf("creating client pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	defer func() {
		_ = c.Client.Delete(context.Background(), pod, client.GracePeriodSeconds(0))
	}()
	var phase corev1.PodPhase
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, nil
		}
		phase = pod.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, nil
	})
	logs, logErr := c.Clientset.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(context.Background())
	out := strings.TrimSpace(string(logs))
	switch {
	case err != nil:
		return out, fmt.Errorf("client pod %s/%s still %s after %s: %s", pod.Namespace, pod.Name, phase, timeout, describe(pod))
	case logErr != nil:
		return "", fmt.Errorf("reading the logs of client pod %s/%s: %w", pod.Namespace, pod.Name, logErr)
	case phase == corev1.PodFailed:
		return out, fmt.Errorf("pod %s/%s failed: %s", pod.Namespace, pod.Name, out)
	}
	return out, nil
}

// Env is the environment of a psql that connects to conn, and psql's
// connection argument (to put before its options in a script).
func (conn Conn) Env() ([]corev1.EnvVar, string) {
	secretEnv := func(name, key string, optional bool) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: conn.Secret}, Key: key, Optional: ptr.To(optional),
		}}}
	}
	env := []corev1.EnvVar{{Name: "PGCONNECT_TIMEOUT", Value: "10"}}
	target := `"$PGURI"`
	if conn.Host == "" {
		env = append(env, secretEnv("PGURI", "uri", false))
	} else {
		env = append(env, corev1.EnvVar{Name: "PGHOST", Value: conn.Host},
			secretEnv("PGUSER", "username", false), secretEnv("PGPASSWORD", "password", false),
			secretEnv("PGDATABASE", "database", true))
		target = ""
	}
	return env, target
}

// pod is a one-shot pod of the client image that runs script.
func (c Client) pod(namespace string, env []corev1.EnvVar, script string, args []string) *corev1.Pod {
	pod := RestrictedPod(namespace, "client-"+rand.String(6), c.Image, append([]string{"/bin/bash", "-c", script, "client"}, args...))
	pod.Labels = map[string]string{"app.kubernetes.io/name": "dbtest-client"}
	pod.Spec.Containers[0].Name = "client"
	pod.Spec.Containers[0].Env = env
	return pod
}

// RestrictedPod is a pod of one container (named "main") that runs command
// once from image, as the restricted Pod Security Standard allows: non-root
// (999, the image's postgres user), no privilege escalation, no
// capabilities, a read-only root, the runtime's seccomp profile, no API
// token and no Service links.
func RestrictedPod(namespace, name, image string, command []string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			EnableServiceLinks:           ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](999), RunAsGroup: ptr.To[int64](999),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "main", Image: image, ImagePullPolicy: corev1.PullIfNotPresent, Command: command,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}

// withCA mounts the ca.crt key of secret (optional: a user's Secret has
// none) at caDir and points PGSSLROOTCERT at it.
func withCA(pod *corev1.Pod, secret string) {
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "ca", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: secret, Optional: ptr.To(true), Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
	}}})
	c := &pod.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "ca", MountPath: caDir, ReadOnly: true})
	c.Env = append(c.Env, corev1.EnvVar{Name: "PGSSLROOTCERT", Value: caDir + "/ca.crt"})
}

// describe says why a pod has not finished: its containers' waiting reasons.
func describe(pod *corev1.Pod) string {
	var parts []string
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			parts = append(parts, fmt.Sprintf("%s: %s %s", cs.Name, w.Reason, w.Message))
		}
	}
	for _, cond := range pod.Status.Conditions {
		if cond.Status != corev1.ConditionTrue && cond.Message != "" {
			parts = append(parts, fmt.Sprintf("%s: %s", cond.Type, cond.Message))
		}
	}
	if len(parts) == 0 {
		return "phase " + string(pod.Status.Phase)
	}
	return strings.Join(parts, "; ")
}
