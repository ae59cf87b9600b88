package agent

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPgBackRestErrorsKeepTheirCause: archive-push wraps the store's
// error on indented lines below its own ("[103]: unable to find a valid
// repository"); the message keeps them (the backup controller names the
// cause from them), not the HINTs, and adds the store's error code.
func TestPgBackRestErrorsKeepTheirCause(t *testing.T) {
	paused := `2026-12-06 00:14:29.101 P00   INFO: archive-push command begin 2.55.1: [pg_wal/000000010000000000000005] --archive-async=n
2026-12-06 00:15:49.322 P00  ERROR: [103]: unable to find a valid repository:
                                    repo1: [FileReadError] unable to load info file '/dbkeeper/ns/db/u/archive/db/archive.info' or '/dbkeeper/ns/db/u/archive/db/archive.info.copy':
                                    FileReadError: timeout after 10000ms waiting for read from '198.18.0.1:40000'
                                    FileReadError: timeout after 10000ms waiting for read from '198.18.0.1:40000'
                                    HINT: archive.info cannot be opened but is required to push/get WAL segments.
2026-12-06 00:15:49.322 P00   INFO: archive-push command end: aborted with exception [103]
`
	msg := lastErrorIn(paused)
	assert.Contains(t, msg, "ERROR: [103]: unable to find a valid repository:")
	assert.Contains(t, msg, "timeout after 10000ms waiting for read")
	assert.NotContains(t, msg, "HINT")
	assert.NotContains(t, msg, "2026-12-06", "the log's timestamp")

	noBucket := `ERROR: [039]: HTTP request failed with 404 (Not Found):
       *** Path/Query ***:
       GET /no-such-bucket/?delimiter=%2F
       *** Response Content ***:
       <?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message></Error>`
	assert.Contains(t, pgbackrestError(noBucket, errors.New("exit status 39")), "NoSuchBucket")
	assert.Equal(t, "exit status 1", pgbackrestError("", errors.New("exit status 1")))
	assert.Empty(t, lastErrorIn("2026-12-06 P00   INFO: archive-push command end: completed successfully\n"))
}

// TestMakeRuntimeDirRemovesEarlierOnes: a restarted agent's new runtime
// directory replaces those of its earlier runs in the pod's /tmp, whose
// configuration holds the store's key.
func TestMakeRuntimeDirRemovesEarlierOnes(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	stale := filepath.Join(tmp, runtimeDirPrefix+"123")
	require.NoError(t, os.MkdirAll(stale, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(stale, "pgbackrest.conf"), []byte("repo1-s3-key-secret=old"), 0o600))
	other := filepath.Join(tmp, "someone-else")
	require.NoError(t, os.MkdirAll(other, 0o700))
	dir, err := makeRuntimeDir(Config{}, "")
	require.NoError(t, err)
	assert.DirExists(t, filepath.Join(dir, "lock"))
	assert.NoDirExists(t, stale)
	assert.DirExists(t, other, "only the agent's own")
}

// TestMakeRuntimeDirKeepsTheAdoptedServers: an agent that took over in
// place keeps its predecessor's runtime directory, which the running
// server's archive_command names (the demo's archiving failed with
// "Directory nonexistent" after a takeover that made a new one), and
// still removes the others.
func TestMakeRuntimeDirKeepsTheAdoptedServers(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	kept := filepath.Join(tmp, runtimeDirPrefix+"running")
	require.NoError(t, os.MkdirAll(kept, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(kept, "pgbackrest.conf"), []byte("repo1-s3-key-secret=current"), 0o600))
	stale := filepath.Join(tmp, runtimeDirPrefix+"123")
	require.NoError(t, os.MkdirAll(stale, 0o700))
	dir, err := makeRuntimeDir(Config{}, kept)
	require.NoError(t, err)
	assert.Equal(t, kept, dir)
	assert.FileExists(t, filepath.Join(kept, "pgbackrest.conf"))
	assert.DirExists(t, filepath.Join(kept, "lock"))
	assert.NoDirExists(t, stale)

	// a handover naming a directory that is gone: a new one
	dir, err = makeRuntimeDir(Config{}, filepath.Join(tmp, runtimeDirPrefix+"gone"))
	require.NoError(t, err)
	assert.NotEqual(t, kept, dir)
	assert.DirExists(t, dir)
}
