package secret

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
)

// PasswordBytes is the number of random bytes in a generated password (256
// bits), encoded as unpadded URL-safe base64.
const PasswordBytes = 32

// NewPassword returns PasswordBytes bytes from crypto/rand as unpadded
// URL-safe base64: safe in URIs and shells, and 256 bits of entropy.
func NewPassword() (string, error) {
	b := make([]byte, PasswordBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("reading random bytes for a password: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}
