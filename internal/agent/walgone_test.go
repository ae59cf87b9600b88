package agent

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The server command's own max_slot_wal_keep_size wins over the one the
// agent derives from the volume.
func TestCommandSetsTheSlotCap(t *testing.T) {
	dir := t.TempDir()
	a := &Agent{cfg: Config{PGData: dir, Port: 5432, SocketDir: "/run",
		Command: []string{"docker-entrypoint.sh", "postgres", "-c", "max_slot_wal_keep_size=1MB"}}}
	args := strings.Join(a.serverArgs(), " ")
	assert.Equal(t, 1, strings.Count(args, "max_slot_wal_keep_size="), args)
	assert.Contains(t, args, "max_slot_wal_keep_size=1MB")
	a.cfg.Command = []string{"docker-entrypoint.sh", "postgres", "-c", "wal_keep_size=0"}
	args = strings.Join(a.serverArgs(), " ")
	assert.Equal(t, 1, strings.Count(args, "max_slot_wal_keep_size="), "the agent's own: %s", args)
	assert.NotContains(t, args, "max_slot_wal_keep_size=1MB")
}

// The refusal a standby's WAL receiver logs when its primary recycled the
// WAL it needs (PostgreSQL 13 to 17 word it alike), and not the refusal of
// an invalidated slot (18), which the replication controller mends first.
func TestWALGoneRefusal(t *testing.T) {
	line := `2026-12-06 07:38:44.227 UTC [18623] FATAL:  could not receive data from WAL stream: ERROR:  requested WAL segment 000000010000000000000003 has already been removed`
	m := walGoneRE.FindStringSubmatch(line)
	if assert.NotNil(t, m) {
		assert.Equal(t, "000000010000000000000003", m[1])
	}
	assert.Nil(t, walGoneRE.FindStringSubmatch(`FATAL:  could not start WAL streaming: ERROR:  can no longer access replication slot "dbkeeper_db_1"`))
	assert.Nil(t, walGoneRE.FindStringSubmatch(`FATAL:  could not connect to the primary server: connection refused`))
}
