package plugin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// The psql client pod's container, and where it finds the CA.
const (
	psqlContainer = "psql"
	psqlCADir     = "/etc/dbkeeper/tls-ca"
)

// PsqlPod is the short-lived pod `kubectl dbkeeper psql` runs psql in:
// the Database's own engine image, connecting as the application's role
// to the read-write Service, the password read from the credentials
// Secret by the kubelet (a secretKeyRef: it is never in the pod spec nor
// read by the plugin), verifying the server (verify-full) with the CA of
// the Database's TLS Secret when the server requires TLS. It runs as the
// engine's user within the restricted Pod Security Standard, with stdin
// (and a terminal when tty) for kubectl to attach to.
func PsqlPod(db *dbv1.Database, eng engine.Engine, name, image string, tls, tty bool, pullSecrets []corev1.LocalObjectReference, args []string) *corev1.Pod {
	env := eng.ClientEnv(resources.ClientServiceHost(db), credentialsSecret(db))
	if tls {
		env = append(env, eng.ClientTLSEnv(psqlCADir+"/"+resources.CACertKey)...)
	}
	env = append(env,
		corev1.EnvVar{Name: "PGAPPNAME", Value: "kubectl-dbkeeper"},
		corev1.EnvVar{Name: "PSQL_HISTORY", Value: "/tmp/.psql_history"}) // the root filesystem is read-only
	uid := eng.User()
	c := corev1.Container{
		Name: psqlContainer, Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
		Command: append([]string{"psql"}, args...),
		Env:     env,
		Stdin:   true, StdinOnce: true, TTY: tty,
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
		},
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot: ptr.To(true), RunAsUser: &uid, RunAsGroup: &uid,
			AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true), Privileged: ptr.To(false),
			Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		VolumeMounts: []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}},
	}
	volumes := []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	if tls {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "tls-ca", MountPath: psqlCADir, ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: "tls-ca", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: resources.TLSSecretName(db), DefaultMode: ptr.To[int32](0o444),
			Items: []corev1.KeyToPath{{Key: resources.CACertKey, Path: resources.CACertKey}},
		}}})
	}
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: db.Namespace,
			Labels: map[string]string{
				resources.LabelManagedBy: "kubectl-dbkeeper", resources.LabelComponent: "psql", "app.kubernetes.io/part-of": db.Name,
			},
			Annotations: map[string]string{"kubectl.kubernetes.io/default-container": psqlContainer},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			ImagePullSecrets:              pullSecrets,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), RunAsUser: &uid, RunAsGroup: &uid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{c},
			Volumes:    volumes,
		},
	}
}

// credentialsSecret is the Secret with the application's credentials.
func credentialsSecret(db *dbv1.Database) string {
	if c := db.Status.Credentials; c != nil && c.Secret != "" {
		return c.Secret
	}
	return cmp.Or(db.Status.CredentialsSecret, resources.CredentialsSecretName(db))
}

// primaryOf is the Database's primary instance, an error without one.
func primaryOf(db *dbv1.Database) (string, error) {
	if r := db.Status.Replication; r != nil && r.CurrentPrimary != "" {
		return r.CurrentPrimary, nil
	}
	return "", fmt.Errorf("Database %s/%s has no primary yet (status.replication.currentPrimary)", db.Namespace, db.Name)
}

// psql runs psql in a client pod (PsqlPod) through `kubectl run --rm`,
// attached to this terminal, and deletes the pod afterwards also when
// kubectl could not (interrupted).
func psql(ctx context.Context, env Env, name string, args []string) error {
	db, err := get(ctx, env, name)
	if err != nil {
		return err
	}
	if _, err := primaryOf(db); err != nil {
		return err
	}
	if env.Exec == nil {
		return errors.New("psql needs kubectl")
	}
	eng, err := engine.For(db.Spec.Engine)
	if err != nil {
		return fmt.Errorf("Database %s/%s: %w", db.Namespace, db.Name, err)
	}
	// the StatefulSet says the image the instances run (the manager's
	// catalog may differ from the built-in one) and whether they serve TLS
	var live *appsv1.StatefulSet
	sts := &appsv1.StatefulSet{}
	switch err := env.Client.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: resources.StatefulSetName(db)}, sts); {
	case err == nil:
		live = sts
	case !apierrors.IsNotFound(err):
		fmt.Fprintf(env.errOut(), "warning: cannot read the StatefulSet of Database %s/%s (%v): psql takes the catalog's image and TLS\n",
			db.Namespace, db.Name, err)
	}
	image, err := engine.ImageFor(eng, db)
	var pullSecrets []corev1.LocalObjectReference
	if live != nil {
		pullSecrets = live.Spec.Template.Spec.ImagePullSecrets
		for _, c := range live.Spec.Template.Spec.Containers {
			if c.Name == resources.EngineContainer {
				image, err = c.Image, nil
			}
		}
	}
	if err != nil {
		return fmt.Errorf("the image of Database %s/%s: %w", db.Namespace, db.Name, err)
	}
	tls := bool(resources.TLSFor(db, live).On())
	podName := fmt.Sprintf("%s-psql-%s", db.Name, utilrand.String(5))
	pod := PsqlPod(db, eng, podName, image, tls, env.TTY, pullSecrets, args)
	overrides, err := json.Marshal(clean(pod))
	if err != nil {
		return fmt.Errorf("encoding the psql pod: %w", err)
	}
	argv := append([]string{"kubectl"}, env.KubectlFlags...)
	argv = append(argv, "run", podName, "--namespace="+db.Namespace, "--image="+image, "--restart=Never",
		"--rm", "--stdin", fmt.Sprintf("--tty=%t", env.TTY), "--pod-running-timeout=2m",
		"--override-type=merge", "--overrides="+string(overrides))
	runErr := env.Exec(ctx, argv)
	// kubectl run --rm deletes the pod; not when it was interrupted
	delCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := env.Client.Delete(delCtx, pod); err != nil && !apierrors.IsNotFound(err) {
		fmt.Fprintf(env.errOut(), "warning: could not delete the psql pod %s/%s: %v\n", db.Namespace, podName, err)
	}
	return runErr
}

// psqlExec runs psql in the primary's engine container as the
// application's role, over the pod's unix socket (kubectl exec: the old
// way, which needs pods/exec and reads the credentials Secret).
func psqlExec(ctx context.Context, env Env, name string, args []string) error {
	db, err := get(ctx, env, name)
	if err != nil {
		return err
	}
	primary, err := primaryOf(db)
	if err != nil {
		return err
	}
	// the application's login, from its credentials Secret
	secretName := db.Status.CredentialsSecret
	if secretName == "" {
		return fmt.Errorf("Database %s/%s does not name its credentials Secret yet (status.credentialsSecret)", db.Namespace, db.Name)
	}
	sec := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: secretName}, sec); err != nil {
		return fmt.Errorf("reading the application's role from Secret %s/%s: %w", db.Namespace, secretName, err)
	}
	user := string(sec.Data["username"])
	if user == "" {
		return fmt.Errorf("Secret %s/%s has no username", db.Namespace, secretName)
	}
	database := cmp.Or(string(sec.Data["database"]), user)
	if env.Exec == nil {
		return errors.New("psql needs kubectl")
	}
	argv := append([]string{"kubectl"}, env.KubectlFlags...)
	argv = append(argv, "exec", "-it", "--namespace="+db.Namespace, primary, "--container="+resources.EngineContainer,
		"--", "psql", "--username="+user, "--dbname="+database)
	return env.Exec(ctx, append(argv, args...))
}
