package realnode

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
)

const sslQuery = "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"

// TestTLSVerifyFull: a new Database requires TLS. psql with
// sslmode=verify-full and the Secret's ca.crt reaches it through the
// client Service (by the Secret's uri, and by the Service's name with
// libpq's variables) over TLS; sslmode=disable is refused by the server's
// pg_hba; TLSReady says the server serves the Secret's certificate.
func TestTLSVerifyFull(t *testing.T) {
	ns := newNamespace(t)
	startOperator(t, ns)
	db := newDatabase(ns, "tls", "17")
	create(t, db)
	waitReady(t, db)
	cond := waitCondition(t, db, dbv1.ConditionTLSReady, metav1.ConditionTrue, dbv1.ReasonTLSReady)
	t.Logf("TLSReady: %s", cond.Message)
	assert.Contains(t, cond.Message, "serves certificate")

	sec := &corev1.Secret{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: resources.GeneratedSecretName(db)}, sec))
	assert.Contains(t, string(sec.Data[resources.URIKey]), "?sslmode=verify-full")

	// The Secret's uri, as an application given the Secret uses it.
	assert.Equal(t, "t", queryEventually(t, generated(db), sslQuery))

	// psql "sslmode=verify-full sslrootcert=ca.crt" by the Service's name.
	host := resources.ClientServiceHost(db)
	conn := dbtest.Conn{Namespace: ns, Secret: resources.GeneratedSecretName(db), Host: host}
	script := `exec psql "sslmode=$1 sslrootcert=$PGSSLROOTCERT" --no-psqlrc --no-password -At --set=ON_ERROR_STOP=1 --command="$2" 2>&1`
	out, err := psql.RunWithCA(context.Background(), ns, resources.GeneratedSecretName(db), envOf(conn), script, []string{"verify-full", sslQuery}, queryTimeout)
	require.NoError(t, err, out)
	assert.Equal(t, "t", out)
	t.Logf("psql \"sslmode=verify-full sslrootcert=ca.crt\" host=%s: ssl = %s", host, out)

	out, err = psql.RunWithCA(context.Background(), ns, resources.GeneratedSecretName(db), envOf(conn), script, []string{"disable", sslQuery}, queryTimeout)
	require.Error(t, err, "sslmode=disable must be refused: %s", out)
	assert.Contains(t, out, "no encryption")
	t.Logf("psql sslmode=disable: %s", out)

	// A name the certificate does not hold fails verify-full.
	out, err = psql.RunWithCA(context.Background(), ns, resources.GeneratedSecretName(db),
		envOf(dbtest.Conn{Namespace: ns, Secret: resources.GeneratedSecretName(db), Host: readyPodIP(t, db)}),
		script, []string{"verify-full", sslQuery}, queryTimeout)
	require.Error(t, err, "verify-full to the pod's IP must fail: %s", out)
	t.Logf("psql verify-full by IP: %s", out)

	assertNothingSecret(t, db)
}

// verifyFullLoop is a client pod's script: a new connection with the
// credentials Secret's uri (verify-full, the mounted ca.crt as the kubelet
// updates it) every 200 ms for $1 seconds, each failure printed, then
// "ok=N failed=M".
const verifyFullLoop = `end=$((SECONDS+$1)) ok=0 failed=0
while (( SECONDS < end )); do
	if out=$(psql "$PGURI" --no-psqlrc --no-password -At --set=ON_ERROR_STOP=1 --command="` + sslQuery + `" 2>&1) && [[ $out == t ]]; then
		ok=$((ok+1))
	else
		failed=$((failed+1)); echo "failed at $(date -u +%T): $out"
	fi
	sleep 0.2
done
echo "ok=$ok failed=$failed"`

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// readyPodIP is the IP of the Database's pod 0.
func readyPodIP(t *testing.T, db *dbv1.Database) string {
	t.Helper()
	pod := &corev1.Pod{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: db.Namespace, Name: db.Name + "-0"}, pod))
	return pod.Status.PodIP
}

// assertNothingSecret: no private key and no password in the Database's
// status or the namespace's Events.
func assertNothingSecret(t *testing.T, db *dbv1.Database) {
	t.Helper()
	ctx := context.Background()
	var secrets []string
	for _, name := range []string{resources.GeneratedSecretName(db), resources.TLSSecretName(db), resources.CASecretName(db)} {
		sec := &corev1.Secret{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, sec))
		for _, key := range []string{"password", "tls.key", "ca.key"} {
			v := string(sec.Data[key])
			if lines := strings.Split(strings.TrimSpace(v), "\n"); len(lines) > 1 {
				v = lines[1] // a PEM key's first base64 line
			}
			secrets = append(secrets, v)
		}
	}
	require.NotEmpty(t, secrets)
	cur := dbtest.Get(t, k8s, db)
	status, err := json.Marshal(cur.Status)
	require.NoError(t, err)
	events := &eventsv1.EventList{}
	require.NoError(t, k8s.List(ctx, events, client.InNamespace(db.Namespace)))
	var notes []string
	for _, e := range events.Items {
		notes = append(notes, e.Note)
	}
	for _, s := range secrets {
		if s == "" {
			continue
		}
		assert.NotContains(t, string(status), s, "status holds a secret")
		assert.NotContains(t, strings.Join(notes, "\n"), s, "an Event holds a secret")
	}
	assert.NotContains(t, string(status), "PRIVATE KEY")
	assert.NotContains(t, strings.Join(notes, "\n"), "PRIVATE KEY")
}

// envOf is the client environment of conn (its connection argument is
// "$PGURI" or the libpq variables, which the scripts here use).
func envOf(conn dbtest.Conn) []corev1.EnvVar {
	env, _ := conn.Env()
	return env
}
