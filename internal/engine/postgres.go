package engine

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// Postgres runs PostgreSQL from the official postgres image.
type Postgres struct{}

// postgresImages is the built-in catalog: the newest minor release of each
// major on the day of the dbkeeper release (PostgreSQL releases every
// supported major together). A dbkeeper release moves these tags, and the
// new manager rolls the new minor out in the usual order (standbys, one
// switchover, the former primary); docs/user-guide/upgrades.md says how a
// user pins a minor version with spec.image instead.
var postgresImages = map[string]string{
	"14": "docker.io/library/postgres:14.25",
	"15": "docker.io/library/postgres:15.20",
	"16": "docker.io/library/postgres:16.16",
	"17": "docker.io/library/postgres:17.12",
	"18": "docker.io/library/postgres:18.6",
}

// postgresEndOfLife is the day each major reached the end of its community
// support (https://www.postgresql.org/support/versioning/): no fix comes
// after it. New Databases cannot ask for these versions (the CRD's rule);
// existing ones keep running and are told.
var postgresEndOfLife = map[string]string{
	"14": "2026-11-12",
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
		return "", fmt.Errorf("postgres has no image for version %q: set spec.version to one of %s, or spec.image to an image of that version",
			version, strings.Join(p.Versions(), ", "))
	}
	return img, nil
}

// Versions implements Engine.
func (Postgres) Versions() []string { return []string{"14", "15", "16", "17", "18"} }

// EndOfLife implements Engine.
func (Postgres) EndOfLife(version string) (string, bool) {
	day, ok := postgresEndOfLife[version]
	return day, ok
}

// Port implements Engine.
func (Postgres) Port() int32 { return postgresPort }

// PortName implements Engine.
func (Postgres) PortName() string { return "postgres" }

// User implements Engine: the postgres user of the official Debian-based
// image.
func (Postgres) User() int64 { return 999 }

// DataMountPath implements Engine.
func (Postgres) DataMountPath() string { return postgresDataDir }

// Env implements Engine: the superuser's Secret gives POSTGRES_USER and
// POSTGRES_PASSWORD, which only initdb reads, on the first start. There is
// no POSTGRES_DB: the entrypoint then creates nothing beyond initdb's
// postgres database, and dbkeeper creates the application's role and
// database once the server answers (docs/design/roles-and-rotation.md,
// D3). PGDATA is a subdirectory of the mount, because initdb refuses a
// directory that holds a filesystem's lost+found.
func (Postgres) Env(superuserSecret string) []corev1.EnvVar {
	return []corev1.EnvVar{
		secretEnv("POSTGRES_USER", superuserSecret, UsernameKey),
		secretEnv("POSTGRES_PASSWORD", superuserSecret, PasswordKey),
		{Name: "PGDATA", Value: postgresDataDir + "/pgdata"},
	}
}

// LegacyEnvPrefix is the prefix of the environment variables the image's
// entrypoint reads only on the first start (initdb), which an existing
// StatefulSet keeps as they were (resources.PinLegacyEnv).
const LegacyEnvPrefix = "POSTGRES_"

// ScratchMounts implements Engine: the socket directory and /tmp.
func (Postgres) ScratchMounts() []string { return []string{"/var/run/postgresql", "/tmp"} }

// SharedMemoryPath implements Engine: PostgreSQL's dynamic shared memory
// (dynamic_shared_memory_type posix) lives in /dev/shm, which container
// runtimes cap at 64 MiB; parallel queries then fail with "could not resize
// shared memory segment".
func (Postgres) SharedMemoryPath() string { return "/dev/shm" }

// ClientEnv implements Engine with libpq's environment variables.
func (Postgres) ClientEnv(host, secretName string) []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: "PGHOST", Value: host},
		{Name: "PGPORT", Value: strconv.Itoa(postgresPort)},
		secretEnv("PGUSER", secretName, UsernameKey),
		secretEnv("PGPASSWORD", secretName, PasswordKey),
		optionalSecretEnv("PGDATABASE", secretName, DatabaseKey),
		{Name: "PGCONNECT_TIMEOUT", Value: "10"},
	}
}

// VerificationEnv implements Engine: PGUSER, PGDATABASE (the credentials
// Secret's optional database key; the verification falls back to the
// role's name) and DBKEEPER_APP_ROLE.
func (Postgres) VerificationEnv(superuserSecret, appSecret string) []corev1.EnvVar {
	return []corev1.EnvVar{
		secretEnv("PGUSER", superuserSecret, UsernameKey),
		optionalSecretEnv("PGDATABASE", appSecret, DatabaseKey),
		secretEnv("DBKEEPER_APP_ROLE", appSecret, UsernameKey),
	}
}

// BackupCommand implements Engine: pg_dump -Fc of the user's database into a
// temporary file of this pod's own, a SHA-256 checksum beside it, both
// linked into place under a name no other dump holds only when complete,
// then the oldest dumps beyond retention removed.
func (Postgres) BackupCommand(dir, prefix string, retention int32) []string {
	return []string{"/bin/bash", "-c", postgresBackupScript, "backup", dir, prefix, strconv.Itoa(int(retention))}
}

// RestoreCommand implements Engine. Once the server answers, the target
// database decides: one that carries dbkeeper's mark (a comment on the
// database, which a dump of it does not copy) was restored before, and is
// left alone with exit 0; one that holds anything a user created (a
// relation, function, type, schema, extension, large object...) is refused
// with RestoreRefusedExitCode, untouched. Only a database as initdb and the
// image's POSTGRES_DB leave it is restored: the checksum is verified, then
// the dump's statements and the mark run in one transaction, so a failed or
// interrupted restore leaves the database empty and unmarked.
func (Postgres) RestoreCommand(dir, prefix, file string) []string {
	return []string{"/bin/bash", "-c", postgresRestoreScript, "restore", dir, prefix, file, strconv.Itoa(RestoreRefusedExitCode)}
}

// postgresUserObjects lists what a user created in the current database,
// as "kind name" rows: everything outside the system schemas, schemas
// besides public, extensions besides plpgsql, large objects, event
// triggers and publications. A database fresh from template1 has none.
const postgresUserObjects = `WITH sys(oid) AS (
  SELECT oid FROM pg_catalog.pg_namespace
  WHERE nspname IN ('pg_catalog', 'information_schema') OR nspname ~ '^pg_(toast|temp_|toast_temp_)'
), objects(kind, name) AS (
  SELECT 'relation', oid::pg_catalog.regclass::text FROM pg_catalog.pg_class WHERE relnamespace NOT IN (SELECT oid FROM sys)
  UNION ALL SELECT 'function', oid::pg_catalog.regprocedure::text FROM pg_catalog.pg_proc WHERE pronamespace NOT IN (SELECT oid FROM sys)
  UNION ALL SELECT 'type', oid::pg_catalog.regtype::text FROM pg_catalog.pg_type WHERE typnamespace NOT IN (SELECT oid FROM sys)
  UNION ALL SELECT 'operator', oid::pg_catalog.regoperator::text FROM pg_catalog.pg_operator WHERE oprnamespace NOT IN (SELECT oid FROM sys)
  UNION ALL SELECT 'collation', collname FROM pg_catalog.pg_collation WHERE collnamespace NOT IN (SELECT oid FROM sys)
  UNION ALL SELECT 'text search configuration', cfgname FROM pg_catalog.pg_ts_config WHERE cfgnamespace NOT IN (SELECT oid FROM sys)
  UNION ALL SELECT 'schema', nspname FROM pg_catalog.pg_namespace WHERE oid NOT IN (SELECT oid FROM sys) AND nspname <> 'public'
  UNION ALL SELECT 'extension', extname FROM pg_catalog.pg_extension WHERE extname <> 'plpgsql'
  UNION ALL SELECT 'large object', oid::text FROM pg_catalog.pg_largeobject_metadata
  UNION ALL SELECT 'event trigger', evtname FROM pg_catalog.pg_event_trigger
  UNION ALL SELECT 'publication', pubname FROM pg_catalog.pg_publication
)
SELECT kind || ' ' || name FROM objects`

// postgresMark is the comment dbkeeper's restore leaves on the database it
// filled; postgresMarkOf reads it back (empty when the database has none).
const (
	postgresMark   = "dbkeeper: restored from "
	postgresMarkOf = `SELECT d FROM pg_catalog.shobj_description(
  (SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database()), 'pg_database') d
WHERE d LIKE 'dbkeeper: restored from %'`
)

// postgresRestoreScript takes the backup directory, the source's dump
// prefix, the dump file name (or latest) and the refusal exit code as $1
// to $4. It logs in as the application's role (ClientEnv), into its
// database (which defaults to the role's name), and waits until it can:
// dbkeeper makes the role and the database once the server answers. So
// the application owns every restored object, and the statements of the
// dump, which whoever wrote the file chose, can do no more than the
// application (a superuser session with SET ROLE could RESET it). The
// restore statements come from pg_restore as a script and run through
// psql between an explicit BEGIN and a COMMIT that is only sent once
// pg_restore has succeeded: if pg_restore dies, psql reaches the end of
// its input inside the transaction and the server rolls it back.
const postgresRestoreScript = `set -euo pipefail
dir=$1 prefix=$2 name=$3 refused=$4
db=${PGDATABASE:-$PGUSER}
sql() { psql --no-psqlrc --no-password --quiet --set=ON_ERROR_STOP=1 --dbname="$db" "$@"; }
marked="` + postgresMarkOf + `"
objects="` + postgresUserObjects + `"
for i in $(seq 1 60); do
	pg_isready --quiet --timeout=5 && break
	[[ $i == 60 ]] && { echo "server $PGHOST:$PGPORT not ready" >&2; exit 1; }
	sleep 5
done
for i in $(seq 1 60); do
	sql --command="SELECT 1" >/dev/null 2>&1 && break
	[[ $i == 60 ]] && { sql --command="SELECT 1" >&2 || true; echo "cannot log in as $PGUSER into database $db after 5 minutes (dbkeeper makes them once the server answers)" >&2; exit 1; }
	sleep 5
done
mark=$(sql --tuples-only --no-align --command="$marked")
if [[ -n $mark ]]; then
	echo "database $db was already ${mark#dbkeeper: }: not restoring again"
	exit 0
fi
found=$(sql --tuples-only --no-align --command="SELECT string_agg(o, ', ') FROM ($objects LIMIT 5) user_objects(o)")
if [[ -n $found ]]; then
	echo "refusing to restore into database $db: it holds data that no dbkeeper restore put there (${found}, ...); nothing was touched" >&2
	exit "$refused"
fi
if [[ $name == latest ]]; then
	name=$(ls -1 "$dir" | grep -E "^$prefix-[0-9]{8}T[0-9]{6}Z\.dump$" | sort | tail -n 1 || true)
	[[ -n $name ]] || { echo "no dump of $prefix in $dir" >&2; exit 1; }
fi
file=$dir/$name
test -f "$file" || { echo "no dump $file" >&2; exit 1; }
test -f "$file.sha256" || { echo "no checksum $file.sha256: not a complete dbkeeper dump" >&2; exit 1; }
(cd "$(dirname "$file")" && sha256sum --check --status "$(basename "$file").sha256") || { echo "checksum mismatch for $file" >&2; exit 1; }
pg_restore --list "$file" >/dev/null
marking=$(sql --tuples-only --no-align --set=mark="` + postgresMark + `$prefix/$name" <<<"SELECT pg_catalog.format('COMMENT ON DATABASE %I IS %L;', pg_catalog.current_database(), :'mark')")
echo "restoring $file into database $db on $PGHOST:$PGPORT"
{
	echo "BEGIN;"
	echo "SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('dbkeeper restore'));"
	echo "DO \$dbkeeper\$ BEGIN IF EXISTS ($marked) OR EXISTS ($objects) THEN RAISE EXCEPTION 'database % got data or a mark since it was checked: not restoring', pg_catalog.current_database(); END IF; END \$dbkeeper\$;"
	pg_restore --no-owner --file=- "$file"
	echo "$marking"
	echo "COMMIT;"
} | sql --output=/dev/null --file=-
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
