package marker

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// TestMark: a Secret marked with the key verifies; the same mark on
// another name or namespace, over another password, under another key, or
// none at all, does not; the zero key marks and verifies nothing.
func TestMark(t *testing.T) {
	k, err := NewKey()
	require.NoError(t, err)
	secret := func(ns, name, password string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{"password": []byte(password)}}
	}
	made := secret("shop", "orders-superuser", "s3cret")
	k.Mark(made, "password")
	assert.True(t, k.Verify(made, "password"))

	for what, other := range map[string]*corev1.Secret{
		"another name":      secret("shop", "billing-superuser", "s3cret"),
		"another namespace": secret("other", "orders-superuser", "s3cret"),
		"another password":  secret("shop", "orders-superuser", "chosen-by-them"),
	} {
		other.Annotations = map[string]string{Annotation: made.Annotations[Annotation]}
		assert.False(t, k.Verify(other, "password"), "the mark copied to %s", what)
	}
	assert.False(t, k.Verify(secret("shop", "orders-superuser", "s3cret"), "password"), "no mark")
	other, err := NewKey()
	require.NoError(t, err)
	assert.False(t, other.Verify(made, "password"), "another key")
	var zero Key
	assert.False(t, zero.Verify(made, "password"))
	zero.Mark(made, "password")
	assert.True(t, k.Verify(made, "password"), "the zero key leaves a mark alone")
}

// TestLoad: the first Load makes the key Secret, later ones read it.
func TestLoad(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().Build()
	first, err := Load(ctx, c, "dbkeeper-system")
	require.NoError(t, err)
	assert.Len(t, first, keySize)
	again, err := Load(ctx, c, "dbkeeper-system")
	require.NoError(t, err)
	assert.Equal(t, first, again, "the key is kept")
	sec := &corev1.Secret{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "dbkeeper-system", Name: KeySecretName}, sec))
	assert.Equal(t, []byte(first), sec.Data[KeyKey])

	require.NoError(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "short", Name: KeySecretName},
		Data: map[string][]byte{KeyKey: []byte("too short")}}))
	_, err = Load(ctx, c, "short")
	assert.ErrorContains(t, err, "fewer than 32")
}
