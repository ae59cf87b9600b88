package engine

import (
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// Postgres runs PostgreSQL from the official postgres image.
type Postgres struct{}

var postgresImages = map[string]string{
	"14": "docker.io/library/postgres:14.19",
	"15": "docker.io/library/postgres:15.14",
	"16": "docker.io/library/postgres:16.10",
	"17": "docker.io/library/postgres:17.6",
}

const (
	postgresPort    = 5432
	postgresDataDir = "/var/lib/postgresql/data"
)

// Name implements Engine.
func (Postgres) Name() dbv1.Engine { return dbv1.EnginePostgres }

// Image implements Engine.
func (p Postgres) Image(version string) (string, error) {
	img, ok := postgresImages[version]
	if !ok {
		return "", fmt.Errorf("postgres has no image for version %q: known versions are %v", version, p.Versions())
	}
	return img, nil
}

// Versions implements Engine.
func (Postgres) Versions() []string { return []string{"14", "15", "16", "17"} }

// Port implements Engine.
func (Postgres) Port() int32 { return postgresPort }

// PortName implements Engine.
func (Postgres) PortName() string { return "postgres" }

// User implements Engine: the postgres user of the official Debian-based
// image.
func (Postgres) User() int64 { return 999 }

// DataMountPath implements Engine.
func (Postgres) DataMountPath() string { return postgresDataDir }

// Env implements Engine. PGDATA is a subdirectory of the mount, because
// initdb refuses a directory that holds a filesystem's lost+found.
func (Postgres) Env(secretName string) []corev1.EnvVar {
	return []corev1.EnvVar{
		secretEnv("POSTGRES_USER", secretName, UsernameKey),
		secretEnv("POSTGRES_PASSWORD", secretName, PasswordKey),
		{Name: "PGDATA", Value: postgresDataDir + "/pgdata"},
	}
}

// ScratchMounts implements Engine: the socket directory and /tmp.
func (Postgres) ScratchMounts() []string { return []string{"/var/run/postgresql", "/tmp"} }

// SharedMemoryPath implements Engine: PostgreSQL's dynamic shared memory
// (dynamic_shared_memory_type posix) lives in /dev/shm, which container
// runtimes cap at 64 MiB; parallel queries then fail with "could not resize
// shared memory segment".
func (Postgres) SharedMemoryPath() string { return "/dev/shm" }

func pgIsReady() corev1.ProbeHandler {
	return corev1.ProbeHandler{Exec: &corev1.ExecAction{
		Command: []string{"pg_isready", "--quiet", "--host=127.0.0.1", "--port=" + strconv.Itoa(postgresPort)},
	}}
}

// StartupTimeout is how long the startup probe gives initdb or crash
// recovery before liveness takes over (and restarts a server that never
// answered): an hour, as CloudNativePG allows, because crash recovery of a
// large database replays WAL for a long time and restarting it starts over.
const StartupTimeout = time.Hour

const startupPeriod = 5 * time.Second

// StartupProbe implements Engine: StartupTimeout for initdb or crash
// recovery before liveness takes over.
func (Postgres) StartupProbe() *corev1.Probe {
	return &corev1.Probe{ProbeHandler: pgIsReady(), PeriodSeconds: int32(startupPeriod.Seconds()), TimeoutSeconds: 5,
		FailureThreshold: int32(StartupTimeout / startupPeriod)}
}

// ReadinessProbe implements Engine.
func (Postgres) ReadinessProbe() *corev1.Probe {
	return &corev1.Probe{ProbeHandler: pgIsReady(), PeriodSeconds: 10, TimeoutSeconds: 5, FailureThreshold: 3}
}

// LivenessProbe implements Engine: a TCP check, so that a busy server that is
// slow to answer pg_isready is not restarted.
func (Postgres) LivenessProbe() *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(postgresPort)}},
		PeriodSeconds: 10, TimeoutSeconds: 5, FailureThreshold: 6,
	}
}

// BackupEnv implements Engine with libpq's environment variables.
func (Postgres) BackupEnv(host, secretName string) []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: "PGHOST", Value: host},
		{Name: "PGPORT", Value: strconv.Itoa(postgresPort)},
		secretEnv("PGUSER", secretName, UsernameKey),
		secretEnv("PGPASSWORD", secretName, PasswordKey),
		optionalSecretEnv("PGDATABASE", secretName, DatabaseKey),
		{Name: "PGCONNECT_TIMEOUT", Value: "10"},
	}
}

// BackupCommand implements Engine: pg_dump -Fc of the user's database into a
// temporary file, a SHA-256 checksum beside it, both renamed into place only
// when complete, then the oldest dumps beyond retention removed.
func (Postgres) BackupCommand(dir, prefix string, retention int32) []string {
	return []string{"/bin/bash", "-c", postgresBackupScript, "backup", dir, prefix, strconv.Itoa(int(retention))}
}

// RestoreCommand implements Engine: the checksum is verified, then
// pg_restore replaces the objects of the dump in the target database in one
// transaction, so a failed restore leaves the database as it was.
func (Postgres) RestoreCommand(dir, prefix, file string) []string {
	return []string{"/bin/bash", "-c", postgresRestoreScript, "restore", dir, prefix, file}
}

const postgresRestoreScript = `set -euo pipefail
dir=$1 prefix=$2 name=$3
db=${PGDATABASE:-$PGUSER}
if [[ $name == latest ]]; then
	name=$(ls -1 "$dir" | grep -E "^$prefix-[0-9]{8}T[0-9]{6}Z\.dump$" | sort | tail -n 1 || true)
	[[ -n $name ]] || { echo "no dump of $prefix in $dir" >&2; exit 1; }
fi
file=$dir/$name
for i in $(seq 1 60); do
	pg_isready --quiet --timeout=5 && break
	[[ $i == 60 ]] && { echo "server $PGHOST:$PGPORT not ready" >&2; exit 1; }
	sleep 5
done
test -f "$file" || { echo "no dump $file" >&2; exit 1; }
test -f "$file.sha256" || { echo "no checksum $file.sha256: not a complete dbkeeper dump" >&2; exit 1; }
(cd "$(dirname "$file")" && sha256sum --check --status "$(basename "$file").sha256") || { echo "checksum mismatch for $file" >&2; exit 1; }
echo "restoring $file into database $db on $PGHOST:$PGPORT"
pg_restore --no-password --clean --if-exists --no-owner --exit-on-error --single-transaction --dbname="$db" "$file"
echo "restored $file"
`

// postgresBackupScript takes the backup directory, the dump file prefix and
// the retention as $1, $2 and $3.
const postgresBackupScript = `set -euo pipefail
dir=$1 prefix=$2 retention=$3
db=${PGDATABASE:-$PGUSER}
stamp=$(date -u +%Y%m%dT%H%M%SZ)
name="$prefix-$stamp.dump"
tmp="$dir/.$name.tmp"
trap 'rm -f "$tmp" "$tmp.sha256"' EXIT
echo "dumping database $db from $PGHOST:$PGPORT into $dir/$name"
pg_dump --format=custom --no-password --dbname="$db" --file="$tmp"
pg_restore --list "$tmp" >/dev/null
(cd "$dir" && sha256sum "$(basename "$tmp")" | sed "s|\.$name\.tmp|$name|") >"$tmp.sha256"
mv "$tmp.sha256" "$dir/$name.sha256"
mv "$tmp" "$dir/$name"
sync "$dir/$name" "$dir/$name.sha256" 2>/dev/null || sync
echo "wrote $dir/$name ($(stat -c %s "$dir/$name") bytes)"
ls -1 "$dir" | grep -E "^$prefix-[0-9]{8}T[0-9]{6}Z\.dump$" | sort -r | tail -n +$((retention + 1)) | while read -r old; do
	echo "pruning $old (retention $retention)"
	rm -f "$dir/$old" "$dir/$old.sha256"
done
`
