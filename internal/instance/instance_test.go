package instance_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dbkeeper/dbkeeper/internal/controller/facet/facettest"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/sqlconn"
)

// TestPodsWaitsForAReadyPod: no pod, a pod that is not Ready, a Ready pod
// without an IP are ErrNotReady, named; a Ready pod with an IP is dialled
// (here an address where nothing listens: a connection error, not
// ErrNotReady, and without the password).
func TestPodsWaitsForAReadyPod(t *testing.T) {
	db := facettest.Database()
	login := instance.Login{User: "postgres", Password: "the-superuser-password"}
	pod := func(ready corev1.ConditionStatus, ip string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: db.Name + "-0"},
			Status: corev1.PodStatus{PodIP: ip, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}}}
	}
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want string
	}{
		"no pod":    {nil, "pod orders-0 does not exist"},
		"not ready": {pod(corev1.ConditionFalse, "10.0.0.9"), "pod orders-0 is not ready"},
		"no IP":     {pod(corev1.ConditionTrue, ""), "pod orders-0 has no IP"},
	} {
		t.Run(name, func(t *testing.T) {
			c := facettest.Client(t, db)
			if tc.pod != nil {
				require.NoError(t, c.Create(context.Background(), tc.pod))
				require.NoError(t, c.Status().Update(context.Background(), tc.pod))
			}
			_, err := instance.Pods{Pods: c}.Connect(context.Background(), db, login, "")
			require.ErrorIs(t, err, instance.ErrNotReady)
			assert.ErrorContains(t, err, tc.want)
		})
	}
	t.Run("ready", func(t *testing.T) {
		c := facettest.Client(t, db)
		p := pod(corev1.ConditionTrue, "127.0.0.1")
		require.NoError(t, c.Create(context.Background(), p))
		require.NoError(t, c.Status().Update(context.Background(), p))
		// Port 5432 on 127.0.0.1 may host a server on a developer's
		// machine: whatever it answers, it is not ErrNotReady.
		conn, err := instance.Pods{Pods: c}.Connect(context.Background(), db, login, "")
		if err == nil {
			_ = conn.Close(context.Background())
			return
		}
		assert.False(t, errors.Is(err, instance.ErrNotReady), "a Ready pod with an IP: %v", err)
		assert.NotContains(t, err.Error(), login.Password)
		assert.True(t, sqlconn.Unreachable(err) || sqlconn.AuthFailed(err), "neither unreachable nor refused: %v", err)
	})
}

// TestSuperuserLogin reads <name>-superuser and names a missing Secret or
// key without the password.
func TestSuperuserLogin(t *testing.T) {
	db := facettest.Database()
	c := facettest.Client(t, db)
	_, err := instance.SuperuserLogin(context.Background(), c, db)
	assert.ErrorContains(t, err, "getting Secret orders-superuser")

	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: db.Namespace, Name: "orders-superuser"},
		Data: map[string][]byte{"username": []byte("postgres")}}
	require.NoError(t, c.Create(context.Background(), sec))
	_, err = instance.SuperuserLogin(context.Background(), c, db)
	assert.ErrorContains(t, err, "Secret orders-superuser lacks the key username or password")

	sec.Data["password"] = []byte("pw-of-the-superuser")
	require.NoError(t, c.Update(context.Background(), sec))
	login, err := instance.SuperuserLogin(context.Background(), c, db)
	require.NoError(t, err)
	assert.Equal(t, instance.Login{User: "postgres", Password: "pw-of-the-superuser", Superuser: true}, login)
}

// TestUnreachable: what waits for the primary, and what is a refusal.
func TestUnreachable(t *testing.T) {
	assert.True(t, instance.Unreachable(fmt.Errorf("x: %w", instance.ErrNotReady)))
	assert.True(t, instance.Unreachable(context.DeadlineExceeded))
	assert.True(t, instance.Unreachable(&pgconn.PgError{Code: "25006", Message: "cannot execute CREATE ROLE in a read-only transaction"}), "a demoted primary")
	assert.True(t, instance.Unreachable(&pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}))
	assert.False(t, instance.Unreachable(&pgconn.PgError{Code: "2BP01", Message: "role cannot be dropped"}))
	assert.False(t, instance.Unreachable(errors.New("role \"x\" does not exist")))
}
