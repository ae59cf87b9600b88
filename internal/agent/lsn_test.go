package agent

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
