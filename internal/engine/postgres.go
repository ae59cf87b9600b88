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
// POSTGRES_DB is the Secret's optional database key, the database that the
// image's entrypoint creates on the first start and that backups dump;
// without the key the variable is unset and the entrypoint creates the
// database named like POSTGRES_USER, which backups then dump.
func (Postgres) Env(secretName string) []corev1.EnvVar {
	return []corev1.EnvVar{
		secretEnv("POSTGRES_USER", secretName, UsernameKey),
		secretEnv("POSTGRES_PASSWORD", secretName, PasswordKey),
		optionalSecretEnv("POSTGRES_DB", secretName, DatabaseKey),
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
// temporary file of this pod's own, a SHA-256 checksum beside it, both
// linked into place under a name no other dump holds only when complete,
// then the oldest dumps beyond retention removed.
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
// the retention as $1, $2 and $3. Two dumps of one Database can run at once
// (an on-demand or final backup beside a scheduled one) and can start in the
// same second, so none of its files is shared: the temporary files are named
// after the pod (HOSTNAME is the pod's name; the shell's pid besides), and
// the dump's name is claimed with a hard link of its checksum file, which
// fails when the name is taken (link(2) never replaces a file); the loser
// takes the next second's stamp. The dump is linked last, so a dump never
// appears without its checksum.
const postgresBackupScript = `set -euo pipefail
dir=$1 prefix=$2 retention=$3
db=${PGDATABASE:-$PGUSER}
tmp="$dir/.$prefix.${HOSTNAME:-local}.$$.tmp"
claimed=
trap 'rm -f "$tmp" "$tmp.sha256" ${claimed:+"$claimed"}' EXIT
stamp=$(date -u +%Y%m%dT%H%M%SZ)
echo "dumping database $db from $PGHOST:$PGPORT into $tmp"
pg_dump --format=custom --no-password --dbname="$db" --file="$tmp"
pg_restore --list "$tmp" >/dev/null
sum=$(sha256sum <"$tmp" | cut -d " " -f 1)
for attempt in $(seq 1 60); do
	name="$prefix-$stamp.dump"
	printf "%s  %s\n" "$sum" "$name" >"$tmp.sha256"
	if ln "$tmp.sha256" "$dir/$name.sha256" 2>/dev/null; then
		claimed="$dir/$name.sha256"
		break
	fi
	[[ -e $dir/$name.sha256 ]] || { echo "cannot link $dir/$name.sha256 (the backup volume needs hard links)" >&2; exit 1; }
	[[ $attempt == 60 ]] && { echo "no free dump name in $dir after 60 tries" >&2; exit 1; }
	echo "$name is taken by another dump; taking a later stamp"
	sleep 1
	stamp=$(date -u +%Y%m%dT%H%M%SZ)
done
ln "$tmp" "$dir/$name"
claimed=
sync "$dir/$name" "$dir/$name.sha256" 2>/dev/null || sync
echo "wrote $dir/$name ($(stat -c %s "$dir/$name") bytes)"
ls -1 "$dir" | grep -E "^$prefix-[0-9]{8}T[0-9]{6}Z\.dump$" | sort -r | tail -n +$((retention + 1)) | while read -r old; do
	echo "pruning $old (retention $retention)"
	rm -f "$dir/$old" "$dir/$old.sha256"
done
`
