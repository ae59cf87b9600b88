package agentapi

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseLSN reads a WAL position written as PostgreSQL does (X/Y, hex), as
// Status carries them.
func ParseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("WAL position %q: want X/Y", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("WAL position %q: %w", s, err)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("WAL position %q: %w", s, err)
	}
	return h<<32 | l, nil
}

// WALFileName is the name of the WAL segment (of segSize bytes) that holds
// position lsn on timeline tli, as pg_walfile_name says it.
func WALFileName(tli uint32, lsn, segSize uint64) string {
	segNo := lsn / segSize
	// perID is how many segments a name's middle part (the high 32 bits
	// of a WAL position) counts.
	perID := 0x100000000 / segSize
	return fmt.Sprintf("%08X%08X%08X", tli, segNo/perID, segNo%perID)
}
