package secret

import (
	"encoding/base64"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNewPassword: 10,000 passwords are distinct, decode to PasswordBytes
// random bytes (at least 128 bits), and their bytes look uniform.
func TestNewPassword(t *testing.T) {
	const n = 10000
	seen := make(map[string]bool, n)
	var counts [256]int
	for range n {
		p, err := NewPassword()
		require.NoError(t, err)
		require.False(t, seen[p], "password repeated after %d", len(seen))
		seen[p] = true
		raw, err := base64.RawURLEncoding.DecodeString(p)
		require.NoError(t, err, "not unpadded base64url: %q", p)
		require.Len(t, raw, PasswordBytes)
		for _, b := range raw {
			counts[b]++
		}
	}
	assert.GreaterOrEqual(t, PasswordBytes*8, 128, "declared entropy in bits")

	// Chi-squared of the byte histogram against uniform, 255 degrees of
	// freedom: the 99.99th percentile is about 330.
	expected := float64(n*PasswordBytes) / 256
	chi2 := 0.0
	for _, c := range counts {
		d := float64(c) - expected
		chi2 += d * d / expected
	}
	assert.Less(t, chi2, 330.0, "byte distribution far from uniform (chi2 %.1f)", chi2)
	assert.False(t, math.IsNaN(chi2))
}
