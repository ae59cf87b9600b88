// Package plugin is `kubectl dbkeeper`: the day-2 commands of a Database
// (status, switchover, backup, verify-backup, rotate-ca, allow-restore,
// restore, psql, report, completion). Each command reads or annotates the
// Database through the API server, and psql runs a client pod through
// kubectl: what happens then is the controllers' work, which status
// reports. cmd/kubectl-dbkeeper builds the client.
package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// Env is what a command works with.
type Env struct {
	Client    client.Client
	Namespace string
	Out       io.Writer
	// Err gets warnings and progress (nil: discarded).
	Err io.Writer
	// Now stamps the tokens of on-demand requests.
	Now func() time.Time
	// Exec runs a command attached to the terminal (psql through kubectl
	// run or exec); nil refuses psql.
	Exec func(ctx context.Context, argv []string) error
	// TTY says the plugin's stdin is a terminal: psql's client pod then
	// gets one.
	TTY bool
	// Logs reads a container's log, for report; nil leaves the logs out of
	// the bundle.
	Logs func(ctx context.Context, namespace, pod string, opts *corev1.PodLogOptions) ([]byte, error)
	// Kubectl runs kubectl with args and returns its standard output, for
	// completion; nil completes no names.
	Kubectl func(ctx context.Context, args []string) ([]byte, error)
	// KubectlFlags go to every kubectl the plugin runs (--kubeconfig,
	// --context).
	KubectlFlags []string
}

// Usage is the plugin's help.
const Usage = `kubectl dbkeeper: day-2 commands for dbkeeper Databases

  kubectl dbkeeper status NAME [-o json]                 conditions, instances, backups, TLS of a Database
  kubectl dbkeeper switchover NAME POD                   make POD (a standby) the primary, without losing a write
  kubectl dbkeeper backup NAME                           take a backup now (a base backup with a repository, else a dump)
  kubectl dbkeeper verify-backup NAME                    restore the latest base backup into a throwaway pod and check it
  kubectl dbkeeper rotate-ca NAME                        rotate the Database's CA, with spec.tls.caRotationOverlap of overlap
  kubectl dbkeeper allow-restore NAME NS...              let Databases of these namespaces restore NAME's data ("*": any)
  kubectl dbkeeper restore NAME --to NEW [--to-namespace NS] [--target-time RFC3339 | --target-lsn LSN]
                                                         print a new Database recovering NAME's backups (kubectl apply -f it)
  kubectl dbkeeper psql [--exec] NAME [-- ARGS...]       psql as the application's role, from a client pod that is deleted
                                                         afterwards (--exec: kubectl exec on the primary instead)
  kubectl dbkeeper report NAME [-o FILE] [--tail N] [--operator-namespace NS]
                                                         a support bundle (tar.gz): objects, logs, events; no Secret data
  kubectl dbkeeper completion bash|zsh                   a completion script for kubectl-dbkeeper (kubectl itself runs
                                                         kubectl_complete-dbkeeper: a link to this binary)

Every command takes -n/--namespace NAMESPACE, --kubeconfig FILE, --context CONTEXT, before or after it.
`

// ErrUsage is returned for a command line the plugin does not take.
var ErrUsage = errors.New("usage")

// commands, the positional arguments each needs (at least args, at most
// max; -1: no limit) and how to say them.
var commands = map[string]struct {
	args, max int
	what      string
}{
	"status": {1, 1, "NAME"}, "switchover": {2, 2, "NAME POD"}, "backup": {1, 1, "NAME"}, "verify-backup": {1, 1, "NAME"},
	"rotate-ca": {1, 1, "NAME"}, "allow-restore": {2, -1, "NAME NAMESPACE..."}, "psql": {1, 1, "NAME"},
	"restore": {1, 1, "NAME --to NEWNAME"}, "report": {1, 1, "NAME"}, "completion": {1, 1, "bash or zsh"},
	"help": {0, -1, ""},
}

// Check says whether args is a command line the plugin takes (an
// ErrUsage when not), before anything reaches the API server.
func Check(args []string) error {
	_, _, _, _, err := parse(args)
	return err
}

// Offline says whether the command of args needs no API server (help,
// completion).
func Offline(args []string) bool {
	return len(args) > 0 && (args[0] == "help" || args[0] == "completion")
}

// Run runs the command of args (without the plugin's own name and global
// flags).
func Run(ctx context.Context, env Env, args []string) error {
	cmd, pos, o, extra, err := parse(args)
	if err != nil {
		return err
	}
	switch cmd {
	case "status":
		return status(ctx, env, pos[0], o.output)
	case "switchover":
		return switchover(ctx, env, pos[0], pos[1])
	case "backup":
		return request(ctx, env, pos[0], dbv1.AnnotationBackupNow, "backup",
			"status.backup.lastOnDemandToken shows the token once the backup ran")
	case "verify-backup":
		return request(ctx, env, pos[0], dbv1.AnnotationBackupVerifyNow, "verification",
			"status.backup.lastVerification shows its outcome")
	case "rotate-ca":
		return request(ctx, env, pos[0], dbv1.AnnotationRotateCA, "CA rotation",
			"status.tls.caRotation shows its phase")
	case "allow-restore":
		return allowRestore(ctx, env, pos[0], pos[1:])
	case "restore":
		return restore(ctx, env, pos[0], o)
	case "psql":
		if o.exec {
			return psqlExec(ctx, env, pos[0], extra)
		}
		return psql(ctx, env, pos[0], extra)
	case "report":
		return report(ctx, env, pos[0], o)
	case "completion":
		return completionScript(env.Out, pos[0])
	}
	_, err = io.WriteString(env.Out, Usage)
	return err
}

func (env Env) now() time.Time {
	if env.Now == nil {
		return time.Now()
	}
	return env.Now()
}

func (env Env) errOut() io.Writer {
	if env.Err == nil {
		return io.Discard
	}
	return env.Err
}

func get(ctx context.Context, env Env, name string) (*dbv1.Database, error) {
	db := &dbv1.Database{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: env.Namespace, Name: name}, db); err != nil {
		return nil, fmt.Errorf("getting Database %s/%s: %w", env.Namespace, name, err)
	}
	return db, nil
}
