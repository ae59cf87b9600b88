package agent

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

const segSize16MB = 16 << 20

func writeSegments(t *testing.T, dir string, names ...string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o700))
	for _, n := range names {
		require.NoError(t, os.WriteFile(filepath.Join(dir, n), []byte("wal "+n), 0o600))
	}
}

func segmentsIn(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

// TestKeepWALAcrossRewind: the segments of the shared history that
// pg_rewind removed (the source recycled them) come back, with their
// content; those it kept or copied stay as they are; segments from the
// divergence's on, of later timelines, and other files are not restored.
func TestKeepWALAcrossRewind(t *testing.T) {
	pgdata := t.TempDir()
	wal := filepath.Join(pgdata, "pg_wal")
	keep := filepath.Join(t.TempDir(), "kept")
	writeSegments(t, wal,
		"000000010000000000000002", // the last common checkpoint is here
		"000000010000000000000003",
		"000000010000000000000004", // the divergence (0/412F5E0) is here
		"000000020000000000000003", // a timeline the divergence's history does not reach
		"000000010000000100000000", // a segment after the divergence
		"00000002.history")
	require.NoError(t, os.Mkdir(filepath.Join(wal, "archive_status"), 0o700))
	require.NoError(t, keepWAL(pgdata, keep))
	assert.Equal(t, []string{"000000010000000000000002", "000000010000000000000003", "000000010000000000000004",
		"000000010000000100000000", "000000020000000000000003"}, segmentsIn(t, keep), "every segment kept, nothing else")

	// pg_rewind: removes what the source lacks, copies the source's
	// segment 3 and its new timeline's first segment.
	for _, n := range []string{"000000010000000000000002", "000000010000000000000003", "000000010000000000000004",
		"000000020000000000000003", "000000010000000100000000"} {
		require.NoError(t, os.Remove(filepath.Join(wal, n)))
	}
	writeSegments(t, wal, "000000010000000000000003", "000000020000000000000004")
	require.NoError(t, os.WriteFile(filepath.Join(wal, "000000010000000000000003"), []byte("from the source"), 0o600))

	diverged, err := agentapi.ParseLSN("0/412F5E0")
	require.NoError(t, err)
	restored, err := restoreWAL(pgdata, keep, diverged, 1, segSize16MB)
	require.NoError(t, err)
	assert.Equal(t, []string{"000000010000000000000002"}, restored)
	b, err := os.ReadFile(filepath.Join(wal, "000000010000000000000002"))
	require.NoError(t, err)
	assert.Equal(t, "wal 000000010000000000000002", string(b), "the kept content")
	b, err = os.ReadFile(filepath.Join(wal, "000000010000000000000003"))
	require.NoError(t, err)
	assert.Equal(t, "from the source", string(b), "a segment pg_rewind copied is not replaced")
	assert.Equal(t, []string{"000000010000000000000002", "000000010000000000000003", "00000002.history",
		"000000020000000000000004", "archive_status"}, segmentsIn(t, wal))
	_, err = os.Stat(keep)
	assert.True(t, os.IsNotExist(err), "the kept links are removed: %v", err)

	// a second rewind after one cut short: the old links are replaced
	writeSegments(t, keep, "000000010000000000000001")
	require.NoError(t, keepWAL(pgdata, keep))
	assert.NotContains(t, segmentsIn(t, keep), "000000010000000000000001")
}

func TestWALSegment(t *testing.T) {
	tli, seg, ok := walSegment("00000003000000010000000A", segSize16MB)
	require.True(t, ok)
	assert.EqualValues(t, 3, tli)
	assert.EqualValues(t, 256+10, seg, "256 segments of 16 MB per 4 GB")
	_, seg, ok = walSegment("000000010000000100000002", 1<<30)
	require.True(t, ok)
	assert.EqualValues(t, 4+2, seg, "4 segments of 1 GB per 4 GB")
	assert.Equal(t, "00000003000000010000000A", walSegmentName(3, 256+10, segSize16MB), "the inverse")
	assert.Equal(t, "000000010000000100000002", walSegmentName(1, 4+2, 1<<30))
	for _, name := range []string{"00000002.history", "000000010000000000000002.partial", "0000000100000000000002", ""} {
		_, _, ok := walSegment(name, segSize16MB)
		assert.False(t, ok, name)
	}
}

// TestMissingRecoveryWAL: recovery after pg_rewind replays from the
// segment its backup_label names to the minimum recovery point; without
// the history file of the timeline it follows, a file of each segment on
// any timeline up to that one will do.
func TestMissingRecoveryWAL(t *testing.T) {
	pgdata := t.TempDir()
	wal := filepath.Join(pgdata, "pg_wal")
	writeSegments(t, wal, "000000010000000000000003", "000000020000000000000004")
	until, err := agentapi.ParseLSN("0/4000100")
	require.NoError(t, err)
	missing, err := missingRecoveryWAL(pgdata, until, 2, segSize16MB)
	require.NoError(t, err)
	assert.Empty(t, missing, "no backup_label: nothing to check")

	label := "START WAL LOCATION: 0/2000028 (file 000000010000000000000002)\nCHECKPOINT LOCATION: 0/2000080\nBACKUP METHOD: pg_rewind\nBACKUP FROM: standby\n"
	require.NoError(t, os.WriteFile(filepath.Join(pgdata, "backup_label"), []byte(label), 0o600))
	missing, err = missingRecoveryWAL(pgdata, until, 2, segSize16MB)
	require.NoError(t, err)
	assert.Equal(t, "000000020000000000000002", missing, "the start, named on the timeline recovery follows")

	writeSegments(t, wal, "000000020000000000000002")
	missing, err = missingRecoveryWAL(pgdata, until, 2, segSize16MB)
	require.NoError(t, err)
	assert.Empty(t, missing, "the start on a later timeline, then each segment to the minimum recovery point")

	until, err = agentapi.ParseLSN("0/6000000")
	require.NoError(t, err)
	missing, err = missingRecoveryWAL(pgdata, until, 2, segSize16MB)
	require.NoError(t, err)
	assert.Equal(t, "000000020000000000000005", missing, "the source recycled WAL after the divergence")

	require.NoError(t, os.WriteFile(filepath.Join(pgdata, "backup_label"), []byte("CHECKPOINT LOCATION: 0/2000080\n"), 0o600))
	_, err = missingRecoveryWAL(pgdata, until, 2, segSize16MB)
	assert.ErrorContains(t, err, "START WAL LOCATION")
}

// TestMissingRecoveryWALFollowsTheHistory: a segment counts only on a
// timeline of the history recovery follows, for the segments that
// timeline served; the former primary's own segment after the switch (of
// the discarded history) is no substitute.
func TestMissingRecoveryWALFollowsTheHistory(t *testing.T) {
	pgdata := t.TempDir()
	wal := filepath.Join(pgdata, "pg_wal")
	writeSegments(t, wal, "000000010000000000000002", "000000010000000000000003", "000000010000000000000004",
		"000000010000000000000005", "000000020000000000000004")
	require.NoError(t, os.WriteFile(filepath.Join(wal, "00000002.history"), []byte("1\t0/4000000\tno recovery target specified\n"), 0o600))
	label := "START WAL LOCATION: 0/2000028 (file 000000010000000000000002)\n"
	require.NoError(t, os.WriteFile(filepath.Join(pgdata, "backup_label"), []byte(label), 0o600))
	until, err := agentapi.ParseLSN("0/5000100")
	require.NoError(t, err)
	missing := func(tli uint32) string {
		t.Helper()
		m, err := missingRecoveryWAL(pgdata, until, tli, segSize16MB)
		require.NoError(t, err)
		return m
	}
	assert.Equal(t, "000000020000000000000005", missing(2), "timeline 1's segment 5 is after its switch to 2")
	writeSegments(t, wal, "000000020000000000000005")
	assert.Empty(t, missing(2))

	// three timelines: 1 to 0/3000000 (a segment's start), 2 to 0/50000A0
	// (inside segment 5: that segment comes from timeline 3's file)
	require.NoError(t, os.WriteFile(filepath.Join(wal, "00000003.history"),
		[]byte("1\t0/3000000\tno recovery target specified\n\n2\t0/50000A0\tno recovery target specified\n"), 0o600))
	assert.Equal(t, "000000020000000000000003", missing(3), "segment 3 and on come from timeline 2 or later")
	writeSegments(t, wal, "000000020000000000000003")
	assert.Equal(t, "000000030000000000000005", missing(3), "timeline 2's segment 5 ends at the switch to 3")
	writeSegments(t, wal, "000000030000000000000005")
	assert.Empty(t, missing(3))

	require.NoError(t, os.WriteFile(filepath.Join(wal, "00000003.history"), []byte("1\tnot-a-position\n"), 0o600))
	_, err = missingRecoveryWAL(pgdata, until, 3, segSize16MB)
	assert.ErrorContains(t, err, "history of timeline 3")
}
