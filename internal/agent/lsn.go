package agent

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
