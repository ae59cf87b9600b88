package engine

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// SCRAM-SHA-256 as PostgreSQL stores it (RFC 5802, RFC 7677; PostgreSQL's
// src/common/scram-common.c):
//
//	SCRAM-SHA-256$<iterations>:<base64 salt>$<base64 StoredKey>:<base64 ServerKey>
//
// A verifier sent in ALTER ROLE ... PASSWORD is stored as it is, so the
// plaintext never reaches the server: not its logs, not pg_stat_activity,
// not pg_stat_statements.
const (
	// ScramIterations is the PBKDF2 iteration count, PostgreSQL's default
	// (scram_iterations).
	ScramIterations = 4096
	// ScramSaltBytes is the length of the random salt, PostgreSQL's.
	ScramSaltBytes = 16
	scramPrefix    = "SCRAM-SHA-256"
)

// Errors of ScramVerifier for a password it will not hash: each says what
// to change, never the password itself.
var (
	// ErrEmptyPassword: PostgreSQL would store an empty password as none
	// (no password login at all).
	ErrEmptyPassword = errors.New("the password is empty")
	// ErrPasswordNUL: libpq cannot send a password with a NUL byte.
	ErrPasswordNUL = errors.New("the password contains a NUL byte, which PostgreSQL clients cannot send")
	// ErrPasswordNotNormalized: clients and server prepare a non-ASCII
	// password with SASLprep (RFC 4013) before hashing it; a password that
	// SASLprep would change is refused rather than hashed differently
	// from what a client sends.
	ErrPasswordNotNormalized = errors.New("the password has non-ASCII characters that SASLprep (RFC 4013) would change (non-ASCII spaces, invisible characters, or not in Unicode NFKC form): use ASCII or NFKC-normalized text")
)

// ScramVerifier returns the SCRAM-SHA-256 verifier of password with a new
// random salt and ScramIterations, in PostgreSQL's format: what
// ALTER ROLE ... PASSWORD takes in place of the plaintext.
func ScramVerifier(password string) (string, error) {
	salt := make([]byte, ScramSaltBytes)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("reading a random salt: %w", err)
	}
	return scramVerifier(password, salt, ScramIterations)
}

// scramVerifier is ScramVerifier with a given salt and iteration count.
func scramVerifier(password string, salt []byte, iterations int) (string, error) {
	if err := CheckPassword(password); err != nil {
		return "", err
	}
	salted, err := pbkdf2.Key(sha256.New, password, salt, iterations, sha256.Size)
	if err != nil {
		return "", fmt.Errorf("deriving the salted password: %w", err)
	}
	clientKey := hmacSHA256(salted, "Client Key")
	storedKey := sha256.Sum256(clientKey)
	serverKey := hmacSHA256(salted, "Server Key")
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("%s$%d:%s$%s:%s", scramPrefix, iterations, b64(salt), b64(storedKey[:]), b64(serverKey)), nil
}

func hmacSHA256(key []byte, msg string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// CheckPassword says whether a password can be set as a SCRAM verifier
// that clients then log in with: not empty, no NUL byte, and, when not
// pure ASCII, unchanged by SASLprep. The error never quotes the password.
//
// PostgreSQL (src/common/saslprep.c) passes pure ASCII through SASLprep
// unchanged, and uses the raw bytes of a string that is not valid UTF-8 or
// that SASLprep prohibits; so a password whose mapping (RFC 3454 tables
// B.1 and C.1.2) and NFKC normalization leave it as it is hashes the same
// on both sides whatever else SASLprep checks. Any other password is
// refused.
func CheckPassword(password string) error {
	switch {
	case password == "":
		return ErrEmptyPassword
	case strings.IndexByte(password, 0) >= 0:
		return ErrPasswordNUL
	case isASCII(password) || !utf8.ValidString(password):
		return nil
	}
	for _, r := range password {
		if saslprepMapped(r) {
			return ErrPasswordNotNormalized
		}
	}
	if !norm.NFKC.IsNormalString(password) {
		return ErrPasswordNotNormalized
	}
	return nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// saslprepMapped reports the characters SASLprep maps: non-ASCII spaces
// (RFC 3454 C.1.2) to a space, and those of table B.1 to nothing.
func saslprepMapped(r rune) bool {
	switch {
	// C.1.2, non-ASCII space characters
	case r == 0x00A0, r == 0x1680, r >= 0x2000 && r <= 0x200B, r == 0x202F, r == 0x205F, r == 0x3000:
		return true
	// B.1, commonly mapped to nothing
	case r == 0x00AD, r == 0x034F, r == 0x1806, r >= 0x180B && r <= 0x180D, r >= 0x200B && r <= 0x200D,
		r == 0x2060, r >= 0xFE00 && r <= 0xFE0F, r == 0xFEFF:
		return true
	}
	return false
}

// IsScramVerifier says whether s has the shape of a SCRAM-SHA-256
// verifier (as pg_authid.rolpassword holds one), without checking it
// against any password.
func IsScramVerifier(s string) bool {
	_, ok := parseScramVerifier(s)
	return ok
}

// ScramVerifierMatches says whether verifier (as pg_authid.rolpassword
// holds it) is the verifier of password: it recomputes it with the
// verifier's own salt and iteration count. It is how the operator finds
// out, without writing anything, whether the server already has a
// Secret's password. A password CheckPassword refuses never matches.
func ScramVerifierMatches(verifier, password string) bool {
	v, ok := parseScramVerifier(verifier)
	if !ok || v.iterations > maxScramIterations {
		return false
	}
	computed, err := scramVerifier(password, v.salt, v.iterations)
	if err != nil {
		return false
	}
	return hmac.Equal([]byte(computed), []byte(verifier))
}

// maxScramIterations bounds the work of ScramVerifierMatches on a verifier
// somebody else set (PostgreSQL's scram_iterations may be raised).
const maxScramIterations = 1 << 20

type scramParams struct {
	iterations int
	salt       []byte
}

func parseScramVerifier(s string) (scramParams, bool) {
	rest, ok := strings.CutPrefix(s, scramPrefix+"$")
	if !ok {
		return scramParams{}, false
	}
	params, keys, ok := strings.Cut(rest, "$")
	if !ok {
		return scramParams{}, false
	}
	iter, salt, ok := strings.Cut(params, ":")
	if !ok {
		return scramParams{}, false
	}
	n, err := strconv.Atoi(iter)
	if err != nil || n < 1 || strings.Trim(iter, "0123456789") != "" {
		return scramParams{}, false
	}
	stored, server, ok := strings.Cut(keys, ":")
	if !ok {
		return scramParams{}, false
	}
	p := scramParams{iterations: n}
	for i, part := range []string{salt, stored, server} {
		raw, err := base64.StdEncoding.DecodeString(part)
		if err != nil || len(raw) == 0 || (i > 0 && len(raw) != sha256.Size) {
			return scramParams{}, false
		}
		if i == 0 {
			p.salt = raw
		}
	}
	return p, true
}
