package instance_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// countingReader counts the Secret reads that reach the API server.
type countingReader struct {
	client.Reader
	gets int
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.gets++
	return c.Reader.Get(ctx, key, obj, opts...)
}

// TestSecretReaderReadsAgainOnlyOnceChanged: every call to an agent reads
// the agents' token; the API server is asked once per version of the
// Secret (the metadata cache tells the version), so a failover's polls
// no longer run into the client's rate limit; a changed Secret is read
// again at once, a deleted one is not found.
func TestSecretReaderReadsAgainOnlyOnceChanged(t *testing.T) {
	ctx := context.Background()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders-replication"},
		Data: map[string][]byte{"token": []byte("one")}}
	c := fake.NewClientBuilder().WithObjects(sec).Build()
	live := &countingReader{Reader: c}
	r := instance.NewSecretReader(live, c)
	key := client.ObjectKeyFromObject(sec)

	for range 5 {
		got := &corev1.Secret{}
		require.NoError(t, r.Get(ctx, key, got))
		assert.Equal(t, "one", string(got.Data["token"]))
		got.Data["token"] = []byte("changed by a caller")
	}
	assert.Equal(t, 1, live.gets, "reads of an unchanged Secret reached the API server")

	cur := &corev1.Secret{}
	require.NoError(t, c.Get(ctx, key, cur))
	cur.Data["token"] = []byte("two")
	require.NoError(t, c.Update(ctx, cur))
	got := &corev1.Secret{}
	require.NoError(t, r.Get(ctx, key, got))
	assert.Equal(t, "two", string(got.Data["token"]), "a changed Secret is read again")
	assert.Equal(t, 2, live.gets)

	require.NoError(t, c.Delete(ctx, cur))
	assert.Error(t, r.Get(ctx, key, &corev1.Secret{}), "a deleted Secret")
}

// TestSecretReaderWithoutMetadata reads every time.
func TestSecretReaderWithoutMetadata(t *testing.T) {
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "s"}}
	live := &countingReader{Reader: fake.NewClientBuilder().WithObjects(sec).Build()}
	r := instance.NewSecretReader(live, nil)
	for range 3 {
		require.NoError(t, r.Get(context.Background(), client.ObjectKeyFromObject(sec), &corev1.Secret{}))
	}
	assert.Equal(t, 3, live.gets)
}
