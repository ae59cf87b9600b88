package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCopyEngine copies the host's PostgreSQL server as the old image's
// init container does: its programs run from the copy with the libraries
// copied beside them (the C library left to the image that runs them),
// and nothing is copied once the data directory is of another major.
func TestCopyEngine(t *testing.T) {
	bin := mustBinDir(t)
	major := filepath.Base(filepath.Dir(bin))
	dst := t.TempDir()
	msg, err := CopyEngine(major, dst)
	require.NoError(t, err)
	t.Log(msg)
	copied := filepath.Join(dst, "usr/lib/postgresql", major, "bin")
	for _, p := range []string{"postgres", "pg_ctl", "initdb", "pg_controldata"} {
		assert.FileExists(t, filepath.Join(copied, p))
	}
	assert.DirExists(t, filepath.Join(dst, "usr/share/postgresql", major, "extension"))
	libs, err := os.ReadDir(filepath.Join(dst, "libs"))
	require.NoError(t, err)
	var names []string
	for _, l := range libs {
		names = append(names, l.Name())
	}
	assert.Contains(t, names, "libpq.so.5", "psql's and pg_dump's client library")
	for _, n := range names {
		assert.False(t, strings.HasPrefix(n, "libc.so") || strings.HasPrefix(n, "ld-linux"), "the C library is the image's own: %s copied", n)
	}
	out, err := exec.Command(filepath.Join(copied, "postgres"), "--version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "(PostgreSQL) "+major)
	// the copy finds its share directory relative to itself
	out, err = exec.Command(filepath.Join(copied, "pg_config"), "--sharedir").CombinedOutput()
	if err == nil {
		assert.Equal(t, filepath.Join(dst, "usr/share/postgresql", major), strings.TrimSpace(string(out)))
	}

	pgdata := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(pgdata, "PG_VERSION"), []byte("99\n"), 0o600))
	t.Setenv("PGDATA", pgdata)
	again := t.TempDir()
	msg, err = CopyEngine(major, again)
	require.NoError(t, err)
	assert.Contains(t, msg, "nothing to copy")
	assert.NoDirExists(t, filepath.Join(again, "usr"))
}

// TestUpgradeSwapAndRollBack: a restart between the swap's two renames
// finishes the swap, and only once pg_upgrade succeeded (the marker);
// a rollback puts pg_control back and removes the new cluster.
func TestUpgradeSwapAndRollBack(t *testing.T) {
	parent := t.TempDir()
	f := upgradeFiles{pgdata: filepath.Join(parent, "pgdata"), next: filepath.Join(parent, "pgdata.next"),
		kept: filepath.Join(parent, "pgdata.major-17"), work: filepath.Join(parent, "major-upgrade")}
	cluster := func(dir, version string) {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "global"), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "PG_VERSION"), []byte(version+"\n"), 0o600))
	}
	require.NoError(t, os.MkdirAll(f.work, 0o700))

	t.Log("pg_upgrade linked (pg_control renamed) and the pod died: rolled back")
	cluster(f.pgdata, "17")
	require.NoError(t, os.WriteFile(filepath.Join(f.pgdata, "global", "pg_control.old"), []byte("ctl"), 0o600))
	cluster(f.next, "18")
	require.NoError(t, rollBackUpgrade(f))
	assert.FileExists(t, filepath.Join(f.pgdata, "global", "pg_control"))
	assert.NoFileExists(t, filepath.Join(f.pgdata, "global", "pg_control.old"))
	assert.NoDirExists(t, f.next)
	assert.Equal(t, "17", dataVersion(f.pgdata))

	t.Log("cut between the renames without the marker: nothing is swapped")
	require.NoError(t, os.Rename(f.pgdata, f.kept))
	cluster(f.next, "18")
	require.NoError(t, finishSwap(f))
	assert.NoDirExists(t, f.pgdata)
	t.Log("with the marker: the swap is finished")
	require.NoError(t, os.WriteFile(f.upgraded(), []byte("17 18\n"), 0o600))
	require.NoError(t, finishSwap(f))
	assert.Equal(t, "18", dataVersion(f.pgdata))
	assert.NoDirExists(t, f.next)
	assert.Equal(t, "17", dataVersion(f.kept))
	require.NoError(t, finishSwap(f), "a finished swap is left alone")
	assert.Equal(t, "18", dataVersion(f.pgdata))
}

// TestUpgradeFailure: pg_upgrade's output becomes one sentence, with the
// report file it names quoted (it goes with the new cluster).
func TestUpgradeFailure(t *testing.T) {
	dir := t.TempDir()
	report := filepath.Join(dir, "tables_using_reg.txt")
	require.NoError(t, os.WriteFile(report, []byte("In database: app\n  public.procs.p\n"), 0o600))
	out := "Performing Consistency Checks\n-----------------------------\nChecking cluster versions                                     ok\n" +
		"Checking data type usage                                      fatal\n\n" +
		"Your installation contains one of the reg* data types in user tables.\nA list of the problem columns is in the file:\n    " + report + "\nFailure, exiting\n"
	got := upgradeFailure(out)
	assert.Equal(t, "Checking data type usage                                      fatal "+
		"Your installation contains one of the reg* data types in user tables. A list of the problem columns is in the file: tables_using_reg.txt Failure, exiting "+
		"[tables_using_reg.txt: In database: app public.procs.p]", got)
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int{"16MB": 16 << 20, "1GB": 1 << 30, "64kB": 64 << 10, "8192": 8192} {
		got, err := parseSize(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
}
