// Package plugin is `kubectl dbkeeper`: the day-2 commands of a Database
// (status, switchover, backup, verify-backup, rotate-ca, allow-restore,
// psql). Each command reads or annotates the Database through the API
// server and nothing else: what happens then is the controllers' work,
// which status reports. cmd/kubectl-dbkeeper builds the client.
package plugin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// Env is what a command works with.
type Env struct {
	Client    client.Client
	Namespace string
	Out       io.Writer
	// Now stamps the tokens of on-demand requests.
	Now func() time.Time
	// Exec runs a command attached to the terminal (psql through kubectl
	// exec); nil refuses psql.
	Exec func(ctx context.Context, argv []string) error
}

// Usage is the plugin's help.
const Usage = `kubectl dbkeeper: day-2 commands for dbkeeper Databases

  kubectl dbkeeper [-n NAMESPACE] status NAME            conditions, instances, backups, TLS of a Database
  kubectl dbkeeper [-n NAMESPACE] switchover NAME POD    make POD (a standby) the primary, without losing a write
  kubectl dbkeeper [-n NAMESPACE] backup NAME            take a backup now (a base backup with a repository, else a dump)
  kubectl dbkeeper [-n NAMESPACE] verify-backup NAME     restore the latest base backup into a throwaway pod and check it
  kubectl dbkeeper [-n NAMESPACE] rotate-ca NAME         rotate the Database's CA, with spec.tls.caRotationOverlap of overlap
  kubectl dbkeeper [-n NAMESPACE] allow-restore NAME NS...  let Databases of these namespaces restore NAME's data ("*": any)
  kubectl dbkeeper [-n NAMESPACE] psql NAME [-- ARGS...] psql on the primary as the application's role (kubectl exec)
`

// ErrUsage is returned for a command line the plugin does not take.
var ErrUsage = errors.New("usage")

// commands and the arguments each needs.
var commands = map[string]struct {
	args int
	what string
}{
	"status": {1, "NAME"}, "switchover": {2, "NAME POD"}, "backup": {1, "NAME"}, "verify-backup": {1, "NAME"},
	"rotate-ca": {1, "NAME"}, "allow-restore": {2, "NAME NAMESPACE..."}, "psql": {1, "NAME"}, "help": {0, ""},
}

// Check says whether args is a command line the plugin takes (an
// ErrUsage when not), before anything reaches the API server.
func Check(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: no command", ErrUsage)
	}
	c, ok := commands[args[0]]
	if !ok {
		return fmt.Errorf("%w: unknown command %q", ErrUsage, args[0])
	}
	if len(args)-1 < c.args {
		return fmt.Errorf("%w: %s needs %s", ErrUsage, args[0], c.what)
	}
	return nil
}

// Run runs the command of args (without the plugin's own name and flags).
func Run(ctx context.Context, env Env, args []string) error {
	if err := Check(args); err != nil {
		return err
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "status":
		db, err := get(ctx, env, rest[0])
		if err != nil {
			return err
		}
		return Status(env.Out, db, env.now())
	case "switchover":
		return switchover(ctx, env, rest[0], rest[1])
	case "backup":
		return request(ctx, env, rest[0], dbv1.AnnotationBackupNow, "backup",
			"status.backup.lastOnDemandToken shows the token once the backup ran")
	case "verify-backup":
		return request(ctx, env, rest[0], dbv1.AnnotationBackupVerifyNow, "verification",
			"status.backup.lastVerification shows its outcome")
	case "rotate-ca":
		return request(ctx, env, rest[0], dbv1.AnnotationRotateCA, "CA rotation",
			"status.tls.caRotation shows its phase")
	case "allow-restore":
		return allowRestore(ctx, env, rest[0], rest[1:])
	case "psql":
		args := rest[1:]
		if len(args) > 0 && args[0] == "--" {
			args = args[1:]
		}
		return psql(ctx, env, rest[0], args)
	}
	_, err := io.WriteString(env.Out, Usage)
	return err
}

func (env Env) now() time.Time {
	if env.Now == nil {
		return time.Now()
	}
	return env.Now()
}

func get(ctx context.Context, env Env, name string) (*dbv1.Database, error) {
	db := &dbv1.Database{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: name}, db); err != nil {
		return nil, fmt.Errorf("getting Database %s/%s: %w", env.Namespace, name, err)
	}
	return db, nil
}

// annotate merges annotations into the Database's (a merge patch: the
// controllers' fields are left alone).
func annotate(ctx context.Context, env Env, db *dbv1.Database, annotations map[string]string) error {
	patch := client.MergeFrom(db.DeepCopy())
	if db.Annotations == nil {
		db.Annotations = map[string]string{}
	}
	for k, v := range annotations {
		db.Annotations[k] = v
	}
	if err := env.Client.Patch(ctx, db, patch); err != nil {
		return fmt.Errorf("annotating Database %s/%s: %w", db.Namespace, db.Name, err)
	}
	return nil
}

// request asks for one run of what annotation starts, with a new token.
func request(ctx context.Context, env Env, name, annotation, what, follow string) error {
	db, err := get(ctx, env, name)
	if err != nil {
		return err
	}
	token := env.now().UTC().Format("20060102T150405Z")
	if db.Annotations[annotation] == token {
		return fmt.Errorf("a %s with token %s was asked for this second already", what, token)
	}
	if err := annotate(ctx, env, db, map[string]string{annotation: token}); err != nil {
		return err
	}
	_, err = fmt.Fprintf(env.Out, "%s of database %s/%s requested (token %s): %s\n", what, db.Namespace, db.Name, token, follow)
	return err
}

func switchover(ctx context.Context, env Env, name, pod string) error {
	db, err := get(ctx, env, name)
	if err != nil {
		return err
	}
	n, ok := resources.InstanceOrdinal(db, pod)
	if !ok || n >= int(db.Spec.ReplicaCount()) {
		return fmt.Errorf("%s is not an instance of Database %s/%s (its instances are %s-0 to %s-%d)",
			pod, db.Namespace, db.Name, resources.StatefulSetName(db), resources.StatefulSetName(db), db.Spec.ReplicaCount()-1)
	}
	if r := db.Status.Replication; r != nil && r.CurrentPrimary == pod && r.TargetPrimary == pod {
		_, err := fmt.Fprintf(env.Out, "%s is the primary already\n", pod)
		return err
	}
	if err := annotate(ctx, env, db, map[string]string{dbv1.AnnotationSwitchoverTo: pod}); err != nil {
		return err
	}
	_, err = fmt.Fprintf(env.Out, "switchover of database %s/%s to %s requested: ReplicationReady says how it goes, status.replication.currentPrimary when it is done\n",
		db.Namespace, db.Name, pod)
	return err
}

func allowRestore(ctx context.Context, env Env, name string, namespaces []string) error {
	db, err := get(ctx, env, name)
	if err != nil {
		return err
	}
	var list []string
	for _, ns := range namespaces {
		for _, v := range strings.Split(ns, ",") {
			if v = strings.TrimSpace(v); v != "" {
				list = append(list, v)
			}
		}
	}
	if len(list) == 0 {
		return fmt.Errorf("%w: allow-restore needs at least one namespace", ErrUsage)
	}
	value := strings.Join(list, ",")
	if err := annotate(ctx, env, db, map[string]string{dbv1.AnnotationRestoreAllowedNamespaces: value}); err != nil {
		return err
	}
	_, err = fmt.Fprintf(env.Out, "Databases of %s may now restore the data of %s/%s (a dump or a point-in-time recovery)\n", value, db.Namespace, db.Name)
	return err
}

// psql runs psql in the primary's engine container as the application's
// role, over the pod's unix socket.
func psql(ctx context.Context, env Env, name string, args []string) error {
	db, err := get(ctx, env, name)
	if err != nil {
		return err
	}
	primary := ""
	if r := db.Status.Replication; r != nil {
		primary = r.CurrentPrimary
	}
	if primary == "" {
		return fmt.Errorf("Database %s/%s has no primary yet (status.replication.currentPrimary)", db.Namespace, db.Name)
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
	argv := append([]string{"kubectl", "exec", "-it", "--namespace=" + db.Namespace, primary, "--container=" + resources.EngineContainer,
		"--", "psql", "--username=" + user, "--dbname=" + database}, args...)
	return env.Exec(ctx, argv)
}
