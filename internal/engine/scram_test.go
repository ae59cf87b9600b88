package engine_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/internal/engine"
)

func salt(t *testing.T, b64 string) []byte {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(b64)
	require.NoError(t, err)
	return raw
}

// TestScramVerifierGolden compares with verifiers computed by an
// independent implementation (Python's hashlib.pbkdf2_hmac and hmac, as in
// PostgreSQL's scram-common.c); the first uses the salt of RFC 7677's
// example.
func TestScramVerifierGolden(t *testing.T) {
	for _, tc := range []struct{ password, salt, want string }{
		{"pencil", "W22ZaJ0SNY7soEsUEjb6gQ==",
			"SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU="},
		{"correct horse battery staple", "AAECAwQFBgcICQoLDA0ODw==",
			"SCRAM-SHA-256$4096:AAECAwQFBgcICQoLDA0ODw==$ONYbSJBXtKl6bP6PVqw8pm9e7EiacprLnoUQPFS80Hw=:IPOtHuGJ2HifEQg74W2XXqqCrCyQG55GbPRHa6g6n9w="},
		{"pässwörd", "EBESExQVFhcYGRobHB0eHw==",
			"SCRAM-SHA-256$4096:EBESExQVFhcYGRobHB0eHw==$TCYqUfPAo2K8fpn/LsytpjGVOVHnWLaOuYPZmwg5bAA=:UWbsheiDSfc4fBpK5aHOFPd75cV0EThSklHrNv1sYuA="},
	} {
		got, err := engine.ScramVerifierWithSalt(tc.password, salt(t, tc.salt), engine.ScramIterations)
		require.NoError(t, err, tc.password)
		assert.Equal(t, tc.want, got, tc.password)
		assert.True(t, engine.IsScramVerifier(got))
	}
}

// TestScramVerifierSaltsAreRandom: two verifiers of one password differ
// (a new 16-byte salt each time) and never contain the password.
func TestScramVerifierSaltsAreRandom(t *testing.T) {
	const password = "the-same-password"
	a, err := engine.ScramVerifier(password)
	require.NoError(t, err)
	b, err := engine.ScramVerifier(password)
	require.NoError(t, err)
	assert.NotEqual(t, a, b)
	for _, v := range []string{a, b} {
		assert.True(t, strings.HasPrefix(v, "SCRAM-SHA-256$4096:"), v)
		assert.True(t, engine.IsScramVerifier(v), v)
		assert.NotContains(t, v, password)
		saltB64 := strings.SplitN(strings.SplitN(v, ":", 2)[1], "$", 2)[0]
		assert.Len(t, salt(t, saltB64), engine.ScramSaltBytes)
	}
}

// TestScramVerifierRefuses the passwords it cannot set so that clients log
// in with them; the errors never quote the password.
func TestScramVerifierRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		password string
		err      error
	}{
		"empty":                   {"", engine.ErrEmptyPassword},
		"NUL byte":                {"ab\x00cd", engine.ErrPasswordNUL},
		"non-ASCII space":         {"pass\u00a0word", engine.ErrPasswordNotNormalized},
		"soft hyphen":             {"pass\u00adword", engine.ErrPasswordNotNormalized},
		"zero-width space":        {"pass\u200bword", engine.ErrPasswordNotNormalized},
		"not NFKC (decomposed ä)": {"pa\u0308sswort", engine.ErrPasswordNotNormalized},
		"not NFKC (ligature)":     {"\ufb01nance", engine.ErrPasswordNotNormalized},
	} {
		v, err := engine.ScramVerifier(tc.password)
		assert.ErrorIs(t, err, tc.err, name)
		assert.Empty(t, v, name)
		if tc.password != "" {
			assert.NotContains(t, err.Error(), tc.password, name)
		}
	}
	for name, password := range map[string]string{
		"ASCII with spaces and symbols": `a b'c"d\e$f%g`,
		"ASCII control character":       "tab\there",
		"NFKC non-ASCII":                "pässwörd-日本",
		"invalid UTF-8 (used raw)":      "\xff\xfe-bytes",
		"generated (base64url)":         "q7G3_x-0aZ9v2c8HkLmN1pQrStUvWxYz0123456789A",
	} {
		_, err := engine.ScramVerifier(password)
		assert.NoError(t, err, name)
	}
}

func TestIsScramVerifier(t *testing.T) {
	for s, want := range map[string]bool{
		"SCRAM-SHA-256$4096:AAECAwQFBgcICQoLDA0ODw==$ONYbSJBXtKl6bP6PVqw8pm9e7EiacprLnoUQPFS80Hw=:IPOtHuGJ2HifEQg74W2XXqqCrCyQG55GbPRHa6g6n9w=": true,
		"SCRAM-SHA-256$x:AAECAwQFBgcICQoLDA0ODw==$ONYbSJBXtKl6bP6PVqw8pm9e7EiacprLnoUQPFS80Hw=:IPOtHuGJ2HifEQg74W2XXqqCrCyQG55GbPRHa6g6n9w=":    false,
		"SCRAM-SHA-256$4096:AAECAwQFBgcICQoLDA0ODw==$ONYb:IPOtHuGJ2HifEQg74W2XXqqCrCyQG55GbPRHa6g6n9w=":                                         false,
		"md5a3556571e93b0d20722ba62be61e8c2d": false,
		"plain password":                      false,
		"":                                    false,
	} {
		assert.Equal(t, want, engine.IsScramVerifier(s), s)
	}
}

func TestScramVerifierMatches(t *testing.T) {
	v, err := engine.ScramVerifier("the-password")
	require.NoError(t, err)
	assert.True(t, engine.ScramVerifierMatches(v, "the-password"))
	assert.False(t, engine.ScramVerifierMatches(v, "the-password "))
	assert.False(t, engine.ScramVerifierMatches(v, ""))
	assert.False(t, engine.ScramVerifierMatches("md5a3556571e93b0d20722ba62be61e8c2d", "the-password"))
	assert.False(t, engine.ScramVerifierMatches("", "the-password"))
	golden := "SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU="
	assert.True(t, engine.ScramVerifierMatches(golden, "pencil"))
	assert.False(t, engine.ScramVerifierMatches(golden, "Pencil"))
}
