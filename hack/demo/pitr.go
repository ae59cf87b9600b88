package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/test/framework/cluster"
	"github.com/dbkeeper/dbkeeper/test/framework/objectstore"
	"github.com/dbkeeper/dbkeeper/test/framework/realnode"
)

// The demo's object store: its bucket, and its Service in the cluster.
const (
	storeBucket  = "backups"
	storeService = "s3"
)

// startObjectStore runs an S3 object store (versitygw, with TLS) on the
// node IP, publishes it in the cluster as Service storeService and
// creates storeBucket. It returns the store and the endpoint pods use.
func startObjectStore(ctx context.Context, c *cluster.Cluster) (*objectstore.Store, string, error) {
	return objectstore.StartPublished(ctx, c.Client, realnode.NodeIP, storeService, storeBucket)
}

// ledgerYAML is a Database name archiving its WAL into the object store
// at endpoint, with more (indented YAML) appended to its spec.
func ledgerYAML(name, endpoint, more string) string {
	return fmt.Sprintf(`apiVersion: database.dbkeeper.io/v1
kind: Database
metadata:
  name: %s
  namespace: default
spec:
  engine: postgres
  version: "17"
  replicas: 1
  storage:
    size: 1Gi
  backup:
    schedule: "0 3 * * *"   # base backups: nightly, and the first one right away
    archiveTimeout: 10s     # a quiet server's WAL reaches the store within 10 s
    # pgBackRest archives every WAL segment into this S3 bucket (path
    # /dbkeeper, region us-east-1 and uriStyle Path are the defaults)
    objectStore:
      endpoint: %s
      bucket: %s
      credentialsSecret: backup-store   # keys accessKeyId, secretAccessKey
      caSecret: backup-store-ca         # key ca.crt: the CA of the store's certificate
%s`, name, endpoint, storeBucket, more)
}

// markRE finds the mark in the psql log: the commit time of the last row
// before it, as printed by the query after 'MARK='.
var markRE = regexp.MustCompile(`MARK=(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z)`)

// walRE finds the WAL segment that holds the last insert.
var walRE = regexp.MustCompile(`WAL=([0-9A-F]{24})`)

// rowRE is a row of `select * from entries` in psql's aligned output.
var rowRE = regexp.MustCompile(`(?m)^ +(\d+) \| `)

// pointInTimeRecovery shows continuous archiving and a point-in-time
// recovery through the object store: Database ledger archives into store,
// gets rows before a mark (a commit time) and after it, and Database
// ledger-restored recovers ledger's archive to the mark, which keeps
// exactly the rows before it.
func pointInTimeRecovery(ctx context.Context, c *cluster.Cluster, kubectl func(...string) error, store *objectstore.Store, endpoint string) error {
	step := time.Now()
	took := func() time.Duration {
		d := time.Since(step).Round(100 * time.Millisecond)
		step = time.Now()
		return d
	}
	fmt.Printf("\ndemo: point-in-time recovery. An S3 object store (versitygw, TLS) runs on %s, bucket %q,\n"+
		"demo: published in the cluster as %s; its credentials and CA go into two Secrets\n", store.Endpoint, storeBucket, endpoint)
	if err := kubectlStdin(ctx, c, fmt.Sprintf("accessKeyId=%s\nsecretAccessKey=%s\n", store.AccessKey, store.SecretKey),
		"create", "secret", "generic", "--namespace=default", "backup-store", "--from-env-file=/dev/stdin"); err != nil {
		return fmt.Errorf("creating Secret backup-store: %w", err)
	}
	if err := kubectl("create", "secret", "generic", "--namespace=default", "backup-store-ca", "--from-file=ca.crt="+store.CAFile); err != nil {
		return fmt.Errorf("creating Secret backup-store-ca: %w", err)
	}

	ledger := ledgerYAML("ledger", endpoint, "")
	fmt.Printf("\ndemo: a Database that archives its WAL into the store\n$ kubectl apply -f - <<EOF\n%sEOF\n", ledger)
	if err := kubectlStdin(ctx, c, ledger, "apply", "-f", "-"); err != nil {
		return fmt.Errorf("applying Database ledger: %w", err)
	}
	if err := waitDatabase(kubectl, "ledger", "Ready"); err != nil {
		return err
	}
	fmt.Println("demo: waiting for BackupReady: WAL archived and the first base backup in the store")
	if err := waitDatabase(kubectl, "ledger", "BackupReady"); err != nil {
		return err
	}
	// BackupReady says archiving works; a point in time is recoverable
	// only after the first base backup ended (firstRecoverabilityPoint):
	// a mark before it has no backup to start from.
	fmt.Println("demo: waiting for the first base backup (status.backup.firstRecoverabilityPoint)")
	if err := kubectl("wait", "--namespace=default", "--for=jsonpath={.status.backup.baseBackups}=1", "database/ledger", "--timeout=3m"); err != nil {
		_ = kubectl("describe", "database", "--namespace=default", "ledger")
		return fmt.Errorf("no base backup of Database ledger: %w", err)
	}
	backupStatus := `{.status.conditions[?(@.type=="BackupReady")].message}{"\n"}{.status.backup}{"\n"}`
	fmt.Printf("\n$ kubectl get database ledger -o jsonpath='%s'\n", backupStatus)
	_ = kubectl("get", "database", "--namespace=default", "ledger", "-o", "jsonpath="+backupStatus)
	fmt.Printf("demo: ledger Ready and archiving in %s\n", took())

	fmt.Println("\ndemo: three rows, the mark (the commit time of the third), a second later a bad migration adds three more")
	log, err := runPsql(ctx, c, kubectl, "ledger",
		"--command=create table entries (id int primary key, note text)",
		"--command=insert into entries values (1, 'before the mark'), (2, 'before the mark'), (3, 'before the mark')",
		`--command=select 'MARK=' || to_char(pg_xact_commit_timestamp(xmin) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as mark from entries where id = 3`,
		"--command=select pg_sleep(1)",
		"--command=insert into entries values (4, 'a bad migration after the mark'), (5, 'a bad migration after the mark'), (6, 'a bad migration after the mark')",
		"--command=select id, note, pg_xact_commit_timestamp(xmin) as committed from entries order by id",
		"--command=select 'WAL=' || pg_walfile_name(pg_current_wal_lsn()) as wal_segment_of_the_last_insert")
	if err != nil {
		return err
	}
	m, w := markRE.FindStringSubmatch(log), walRE.FindStringSubmatch(log)
	if m == nil || w == nil {
		return errors.New("no MARK= or WAL= line in the client's log")
	}
	mark, segment := m[1], w[1]
	fmt.Printf("demo: the mark is %s; rows written in %s\n", mark, took())

	fmt.Printf("\ndemo: waiting until WAL segment %s, which holds the bad migration, is archived\n"+
		"demo: (archiveTimeout 10s; the operator reads the primary's archiver every 30 s)\n", segment)
	db := &dbv1.Database{}
	for {
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "ledger"}, db); err != nil {
			return err
		}
		if a := archive(db); a != nil && a.LastArchivedTime != nil && len(a.LastArchivedWAL) >= 24 && a.LastArchivedWAL[:24] >= segment {
			fmt.Printf("demo: status.backup.archive: lastArchivedWAL %s at %s, %s after the rows\n",
				a.LastArchivedWAL, a.LastArchivedTime.UTC().Format(time.RFC3339), took())
			break
		}
		if time.Since(step) > 3*time.Minute {
			return fmt.Errorf("segment %s not archived after 3 minutes: status.backup.archive is %+v", segment, archive(db))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}

	consent := []string{"annotate", "database", "--namespace=default", "ledger", dbv1.AnnotationRestoreAllowedNamespaces + "=default"}
	fmt.Printf("\ndemo: ledger's owner lets Databases of namespace default restore its data (without it the recovery below is refused)\n$ kubectl %s\n", strings.Join(consent, " "))
	if err := kubectl(consent...); err != nil {
		return fmt.Errorf("annotating Database ledger: %w", err)
	}

	restored := ledgerYAML("ledger-restored", endpoint, fmt.Sprintf(`  bootstrap:
    recovery:               # restore ledger's base backup, replay its WAL up to the mark
      database: ledger
      target:
        time: "%s"
`, mark))
	fmt.Printf("\ndemo: a new Database recovered from ledger's archive to the mark (it archives into a path of its own)\n$ kubectl apply -f - <<EOF\n%sEOF\n", restored)
	if err := kubectlStdin(ctx, c, restored, "apply", "-f", "-"); err != nil {
		return fmt.Errorf("applying Database ledger-restored: %w", err)
	}
	if err := waitDatabase(kubectl, "ledger-restored", "Ready"); err != nil {
		return err
	}
	fmt.Println("\n$ kubectl get database ledger-restored -o jsonpath='{.status.backup.recovery}'")
	_ = kubectl("get", "database", "--namespace=default", "ledger-restored", "-o", "jsonpath={.status.backup.recovery}{\"\\n\"}")
	fmt.Printf("demo: ledger-restored Ready in %s\n", took())

	fmt.Println("\ndemo: ledger-restored has the rows up to the mark, not the bad migration")
	log, err = runPsql(ctx, c, kubectl, "ledger-restored", "--command=select * from entries order by id")
	if err != nil {
		return err
	}
	var ids []string
	for _, r := range rowRE.FindAllStringSubmatch(log, -1) {
		ids = append(ids, r[1])
	}
	if !slices.Equal(ids, []string{"1", "2", "3"}) {
		return fmt.Errorf("ledger-restored has the rows %v, want exactly 1, 2 and 3 (those before the mark %s)", ids, mark)
	}
	fmt.Printf("demo: exactly the 3 rows before the mark, checked in %s\n\n$ kubectl get databases\n", took())
	_ = kubectl("get", "databases", "--namespace=default")
	return nil
}

// archive is the Database's status.backup.archive, nil before any.
func archive(db *dbv1.Database) *dbv1.ArchiveStatus {
	if db.Status.Backup == nil {
		return nil
	}
	return db.Status.Backup.Archive
}

// waitDatabase waits up to 3 minutes for condition cond of Database name
// to be True, and shows the Database if it is not.
func waitDatabase(kubectl func(...string) error, name, cond string) error {
	if err := kubectl("wait", "--namespace=default", "--for=condition="+cond, "database/"+name, "--timeout=3m"); err != nil {
		_ = kubectl("describe", "database", "--namespace=default", name)
		return fmt.Errorf("Database %s not %s: %w", name, cond, err)
	}
	return nil
}
