package agentapi

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseLSN(t *testing.T) {
	v, err := ParseLSN("1/412F5E0")
	require.NoError(t, err)
	assert.EqualValues(t, uint64(1)<<32|0x412F5E0, v)
	for _, bad := range []string{"", "412F5E0", "x/1", "1/y"} {
		_, err := ParseLSN(bad)
		assert.Error(t, err, bad)
	}
}

func TestWALFileName(t *testing.T) {
	assert.Equal(t, "000000010000000100000004", WALFileName(1, 0x1_0412F5E0, 16<<20))
	assert.Equal(t, "00000002000000000000007F", WALFileName(2, 0x7F_000000, 16<<20))
}
