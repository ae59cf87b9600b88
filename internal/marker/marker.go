// Package marker signs the Secrets dbkeeper generates without an owner
// reference (a Database's credentials and superuser Secrets, which a
// deletion policy may keep for a Database of the same name), so that one
// dbkeeper made is told apart from one somebody planted under that name
// before the Database existed: labels are what anybody who may create a
// Secret can write, a signature with the manager's key is not.
//
// The mark is an HMAC-SHA256, with the manager's key, of the Secret's
// namespace, name and password: copied to another Secret, or kept over a
// changed password, it no longer verifies.
package marker

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Annotation holds a Secret's mark.
const Annotation = "database.dbkeeper.io/made-by-dbkeeper"

// KeySecretName is the Secret of the manager's namespace that holds the
// key, under KeyKey.
const (
	KeySecretName = "dbkeeper-secret-marker"
	KeyKey        = "key"
)

// keySize is the key's length in bytes.
const keySize = 32

// Key signs and verifies marks. The zero Key signs nothing and verifies
// nothing.
type Key []byte

// NewKey is a random key.
func NewKey() (Key, error) {
	k := make([]byte, keySize)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("generating the Secrets' marker key: %w", err)
	}
	return k, nil
}

// Sign is the mark of the Secret namespace/name holding password.
func (k Key) Sign(namespace, name string, password []byte) string {
	if len(k) == 0 {
		return ""
	}
	m := hmac.New(sha256.New, k)
	pw := sha256.Sum256(password)
	for _, part := range [][]byte{[]byte("dbkeeper-secret-v1"), []byte(namespace), []byte(name), pw[:]} {
		m.Write([]byte{byte(len(part) >> 8), byte(len(part))})
		m.Write(part)
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Verify reports whether sec carries the mark of its namespace, name and
// the password under passwordKey.
func (k Key) Verify(sec *corev1.Secret, passwordKey string) bool {
	got := sec.Annotations[Annotation]
	if len(k) == 0 || got == "" {
		return false
	}
	return hmac.Equal([]byte(got), []byte(k.Sign(sec.Namespace, sec.Name, sec.Data[passwordKey])))
}

// Mark sets sec's mark for the password under passwordKey.
func (k Key) Mark(sec *corev1.Secret, passwordKey string) {
	if len(k) == 0 {
		return
	}
	if sec.Annotations == nil {
		sec.Annotations = map[string]string{}
	}
	sec.Annotations[Annotation] = k.Sign(sec.Namespace, sec.Name, sec.Data[passwordKey])
}

// Load reads the key from Secret KeySecretName of namespace, creating it
// with a new key when it does not exist (the first manager to start makes
// it; the others read it).
func Load(ctx context.Context, c client.Client, namespace string) (Key, error) {
	key := client.ObjectKey{Namespace: namespace, Name: KeySecretName}
	for range 2 {
		sec := &corev1.Secret{}
		err := c.Get(ctx, key, sec)
		if err == nil {
			if len(sec.Data[KeyKey]) < keySize {
				return nil, fmt.Errorf("secret %s/%s: key %q has %d bytes, fewer than %d: delete the Secret to have a new key made "+
					"(the Secrets dbkeeper marked with the old one are then marked again only while their Databases use them)",
					namespace, KeySecretName, KeyKey, len(sec.Data[KeyKey]), keySize)
			}
			return Key(sec.Data[KeyKey]), nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading Secret %s/%s: %w", namespace, KeySecretName, err)
		}
		k, err := NewKey()
		if err != nil {
			return nil, err
		}
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: KeySecretName,
				Labels: map[string]string{"app.kubernetes.io/name": "dbkeeper", "app.kubernetes.io/component": "secret-marker"}},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{KeyKey: k},
		}
		err = c.Create(ctx, sec)
		if err == nil {
			return k, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating Secret %s/%s: %w", namespace, KeySecretName, err)
		}
		// another manager made it meanwhile: read that one
	}
	return nil, errors.New("the marker key Secret appeared and vanished: try again")
}
