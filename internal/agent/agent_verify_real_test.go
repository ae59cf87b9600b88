package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/test/framework"
)

// TestVerifyBackup runs `manager verify-backup` as the verification pod
// does, against a real repository: it restores the newest base backup,
// replays the archive to its end (the rows written after the backup are
// there), checks the cluster with pg_amcheck and counts the rows; it
// writes nothing into the repository. With one file of the backup
// corrupted in the store, it fails and its report says which file.
func TestVerifyBackup(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and an object store; skipped under -short")
	}
	c := newCluster(t)
	f := newArchiveFixture(t, c)
	ctx := context.Background()
	const repoPath = "/dbkeeper/ns/ledger/uid-1"
	a := c.startArchiving(t, f.env(t, repoPath))
	conn := sql(t, a)
	mustExec(t, conn, "CREATE TABLE ledger (id int PRIMARY KEY, note text)")
	mustExec(t, conn, "CREATE TABLE audit (id int)")
	mustExec(t, conn, "INSERT INTO ledger SELECT i, md5(i::text) FROM generate_series(1, 500) i")
	mustExec(t, conn, "INSERT INTO audit SELECT generate_series(1, 7)")
	_, err := c.client.Backup(ctx, a.url, agentapi.BackupRequest{ID: "b1", Type: "full"})
	require.NoError(t, err)
	s := c.waitStatus(a, 3*time.Minute, "the base backup finished", func(s agentapi.Status) bool {
		return s.Archive != nil && s.Archive.Run != nil && s.Archive.Run.Finished != nil && len(s.Archive.Backups) == 1
	})
	require.Empty(t, s.Archive.Run.Error)
	label := s.Archive.Backups[0].Label
	// rows after the backup reach the verification through the archive.
	mustExec(t, conn, "INSERT INTO ledger SELECT i, md5(i::text) FROM generate_series(501, 800) i")
	var segment, relPath string
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_relation_filepath('ledger')").Scan(&relPath))
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_walfile_name(pg_switch_wal())").Scan(&segment))
	c.waitStatus(a, time.Minute, "segment "+segment+" archived", func(s agentapi.Status) bool {
		return s.Archive != nil && s.Archive.LastArchivedWAL >= segment
	})
	prefix := strings.TrimPrefix(repoPath, "/") + "/"
	before, err := f.store.List(ctx, f.bucket, prefix)
	require.NoError(t, err)

	rep, err := c.verify(t, "verify-1", f.env(t, repoPath))
	require.NoError(t, err, "the verification of a sound backup")
	assert.Empty(t, rep.Error)
	assert.Equal(t, label, rep.Backup, "the newest base backup")
	assert.Equal(t, 2, rep.Tables)
	assert.Equal(t, int64(807), rep.Rows, "every row, the 300 written after the backup included")
	assert.NotEmpty(t, rep.ReplayedLSN)
	after, err := f.store.List(ctx, f.bucket, prefix)
	require.NoError(t, err)
	assert.Equal(t, before, after, "the verification wrote into the repository")

	// one file of the backup corrupted in the store: the ledger's table
	// (its checksum no longer matches), then a tiny one whose compressed
	// frame no longer decodes (pgBackRest's restore does not name it:
	// verify does).
	for i, file := range []string{relPath, "PG_VERSION"} {
		var key string
		for _, k := range after {
			if strings.Contains(k, "/backup/"+agentapi.Stanza+"/"+label+"/pg_data/"+file+".") {
				key = k
			}
		}
		require.NotEmpty(t, key, "file %s in backup %s among %v", file, label, after)
		require.NoError(t, f.store.Corrupt(ctx, f.bucket, key))
		rep, err = c.verify(t, "verify-corrupt-"+strconv.Itoa(i), f.env(t, repoPath))
		require.Error(t, err, "the verification of a corrupted backup must fail")
		assert.Equal(t, label, rep.Backup)
		assert.Contains(t, rep.Error, file, "the report names the corrupted file")
		t.Logf("the corrupted backup: %s", rep.Error)
	}
}

// verify runs `manager verify-backup` in a directory of its own, as the
// agents' user, and returns its report.
func (c *cluster) verify(t *testing.T, name string, env ...string) (agentapi.VerifyReport, error) {
	t.Helper()
	dir := filepath.Join(c.dir, name)
	c.mkdir(dir, 0o755)
	c.mkdir(filepath.Join(dir, "run"), 0o755)
	port, err := framework.FreePort()
	require.NoError(t, err)
	report := filepath.Join(dir, "report.json")
	cmd := exec.Command(c.bin, agentapi.VerifyCommand, "--pgdata="+filepath.Join(dir, "data"), "--socket-dir="+filepath.Join(dir, "run"),
		"--port="+strconv.Itoa(port), "--user=postgres", "--database=postgres", "--report="+report, "--timeout=3m")
	cmd.Env = append(os.Environ(), childEnv+"=1", "PATH="+c.pgBin+":"+os.Getenv("PATH"), "HOME="+dir)
	cmd.Env = append(cmd.Env, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGTERM}
	runErr := cmd.Run()
	t.Logf("%s:\n%s", name, out.String())
	var rep agentapi.VerifyReport
	raw, err := os.ReadFile(report)
	require.NoError(t, err, "the report")
	require.NoError(t, json.Unmarshal(raw, &rep))
	assert.Less(t, len(raw), 4096, "the report fits a termination message")
	return rep, runErr
}
