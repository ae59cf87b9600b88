// Package engine holds what differs between database engines: the image
// catalog, the port, the environment, the probes, the pod's user and the
// dump and restore commands. Adding an engine is adding one file that implements Engine
// and one entry in the catalog below. The images an engine runs can be
// moved or replaced at start-up with a Catalog (catalog.go).
package engine

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// Credentials are the keys of a credentials Secret that every engine reads.
const (
	UsernameKey = "username"
	PasswordKey = "password"
	// DatabaseKey is optional in a user's Secret: the application's
	// database, which dbkeeper creates and backups dump; without it, the
	// one named like the user (AppDatabase).
	DatabaseKey = "database"
)

// Engine describes how to run one database engine in Kubernetes.
type Engine interface {
	// Name is the engine as spelled in spec.engine.
	Name() dbv1.Engine
	// Image returns the catalog image of a major version; the error of a
	// version without one names spec.version.
	Image(version string) (string, error)
	// Versions lists the major versions spec.version accepts for the
	// engine (the CRD's rule lists the same), oldest first.
	Versions() []string
	// EndOfLife says whether a major version is past its end of life, and
	// since which day (YYYY-MM-DD): a Database of it still runs, but the
	// CRD refuses new ones and the statefulset controller says so.
	EndOfLife(version string) (day string, past bool)
	// Port is the TCP port clients connect to.
	Port() int32
	// PortName names that port in containers and Services.
	PortName() string
	// User is the numeric user and group the engine's image runs as.
	User() int64
	// DataMountPath is where the data volume is mounted.
	DataMountPath() string
	// Env is the engine container's environment, reading the superuser's
	// credentials (for initdb) from the named Secret.
	Env(superuserSecret string) []corev1.EnvVar
	// ScratchMounts are the writable directories the engine needs besides
	// its data volume (the root filesystem is read-only).
	ScratchMounts() []string
	// SharedMemoryPath is where the engine expects POSIX shared memory
	// (/dev/shm), given a memory-backed volume instead of the runtime's
	// small default; empty when the engine needs none.
	SharedMemoryPath() string
	// ClientEnv is the environment of the dump and restore containers,
	// which connect to host over the network as the application's role
	// of the named Secret, into its database: a dump reads only what the
	// application may, and a restore (statements someone wrote into a
	// file) can do no more than the application.
	ClientEnv(host, secretName string) []corev1.EnvVar
	// VerificationEnv is the environment of the verification restore's
	// server (on a local socket, no password): the superuser's name of
	// superuserSecret, and the application's database and role of
	// appSecret, which the checks run in.
	VerificationEnv(superuserSecret, appSecret string) []corev1.EnvVar
	// BackupCommand is the backup container's command. It dumps the
	// database into dir, keeps the newest retention dumps and exits non-zero
	// on any failure, leaving no partial dump behind.
	BackupCommand(dir, prefix string, retention int32) []string
	// RestoreCommand restores the dump file of dir (written by
	// BackupCommand with prefix; "latest" means the newest) into the
	// database of the ClientEnv credentials, once the server answers and
	// the checksum matches, and only into a database that has never held
	// data: one that carries the mark of an earlier restore (kept in the
	// database itself) is left alone with exit 0, one that holds data
	// without the mark is refused, untouched, with exit code
	// RestoreRefusedExitCode. A restore sets the mark with the data, so a
	// failed one leaves neither. It exits non-zero on any failure.
	RestoreCommand(dir, prefix, file string) []string
	// RoleSQL is the SQL that keeps the application's role and its
	// password on the server (roles.go).
	RoleSQL
	// TLS is how the engine serves TLS and its clients verify it (tls.go).
	TLS
	// Replication is how the agent runs the server for streaming
	// replication (replication.go).
	Replication
}

var catalog = map[dbv1.Engine]Engine{
	dbv1.EnginePostgres: Postgres{},
}

// For returns the engine named in a spec.
func For(name dbv1.Engine) (Engine, error) {
	e, ok := catalog[name]
	if !ok {
		return nil, fmt.Errorf("unknown engine %q: known engines are %v", name, Names())
	}
	return e, nil
}

// Names lists the known engines, sorted.
func Names() []string {
	names := make([]string, 0, len(catalog))
	for n := range catalog {
		names = append(names, string(n))
	}
	sort.Strings(names)
	return names
}

// ImageFor returns the image a Database runs: spec.image when set, else the
// engine's catalog image for spec.version (see Catalog.For for an engine
// whose images come from the manager's flags).
func ImageFor(e Engine, db *dbv1.Database) (string, error) {
	if db.Spec.Image != "" {
		return db.Spec.Image, nil
	}
	return e.Image(db.Spec.Version)
}

// AppDatabase is the application's database a credentials Secret's data
// names: its database key, else its username.
func AppDatabase(data map[string][]byte) string {
	if d := string(data[DatabaseKey]); d != "" {
		return d
	}
	return string(data[UsernameKey])
}

// optionalSecretEnv is secretEnv for a key the Secret may lack.
func optionalSecretEnv(name, secretName, key string) corev1.EnvVar {
	e := secretEnv(name, secretName, key)
	optional := true
	e.ValueFrom.SecretKeyRef.Optional = &optional
	return e
}

func secretEnv(name, secretName, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: secretName},
			Key:                  key,
		},
	}}
}

// RestoreRefusedExitCode is the exit status of every engine's
// RestoreCommand when the target database already holds data it did not
// restore itself: nothing was touched, and retrying cannot help.
const RestoreRefusedExitCode = 42
