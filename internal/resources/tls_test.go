package resources_test

import (
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

func TestTLSFor(t *testing.T) {
	plain := &appsv1.StatefulSet{}
	withTLS := &appsv1.StatefulSet{}
	withTLS.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "tls"}}
	mode := func(m dbv1.TLSMode) func(*dbv1.Database) {
		return func(db *dbv1.Database) { db.Spec.TLS = &dbv1.TLSSpec{Mode: m} }
	}
	issuer := func(db *dbv1.Database) { db.Spec.TLS = &dbv1.TLSSpec{IssuerRef: &dbv1.IssuerReference{Name: "ca"}} }
	for name, tc := range map[string]struct {
		db   *dbv1.Database
		live *appsv1.StatefulSet
		want resources.TLSState
	}{
		"new Database":                       {sample("a", nil), nil, resources.TLSRequired},
		"running with TLS":                   {sample("a", nil), withTLS, resources.TLSRequired},
		"made before TLS: kept":              {sample("a", nil), plain, resources.TLSPlaintextKept},
		"made before TLS, mode Required":     {sample("a", mode(dbv1.TLSModeRequired)), plain, resources.TLSRequired},
		"made before TLS, issuerRef":         {sample("a", issuer), plain, resources.TLSRequired},
		"Disabled":                           {sample("a", mode(dbv1.TLSModeDisabled)), nil, resources.TLSDisabled},
		"Disabled on a server that had TLS":  {sample("a", mode(dbv1.TLSModeDisabled)), withTLS, resources.TLSDisabled},
		"spec.tls without a mode, no server": {sample("a", mode("")), nil, resources.TLSRequired},
	} {
		t.Run(name, func(t *testing.T) {
			got := resources.TLSFor(tc.db, tc.live)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, resources.ServerTLS(tc.want == resources.TLSRequired), got.On())
		})
	}
	// The StatefulSet a new Database gets is one TLSFor keeps on TLS.
	eng, _ := engine.For(dbv1.EnginePostgres)
	sts, err := resources.StatefulSet(sample("a", nil), eng, resources.TLSOn, testAgentImage)
	assert.NoError(t, err)
	live := &appsv1.StatefulSet{}
	for _, v := range sts.Spec.Template.Spec.Volumes {
		live.Spec.Template.Spec.Volumes = append(live.Spec.Template.Spec.Volumes, corev1.Volume{Name: *v.Name})
	}
	assert.Equal(t, resources.TLSRequired, resources.TLSFor(sample("a", nil), live))
}

func TestServerDNSNames(t *testing.T) {
	names := resources.ServerDNSNames(sample("orders", nil))
	assert.Equal(t, "orders", names[0])
	for _, want := range []string{
		"orders.shop.svc", "orders.shop.svc.cluster.local", // the uri's host, and its long form
		"orders-headless.shop.svc", "*.orders-headless.shop.svc", // the restore Job's pod host
		"orders-ro.shop.svc", // the read-only Service
	} {
		assert.Contains(t, names, want)
	}
	assert.Contains(t, names, resources.ClientServiceHost(sample("orders", nil)))
	assert.Len(t, names, 14)
}

func TestCredentialsDriftTLS(t *testing.T) {
	eng, _ := engine.For(dbv1.EnginePostgres)
	db := sample("orders", nil)
	tls := resources.ClientTLS{On: resources.TLSOn, CA: []byte("ca")}
	plain := resources.CredentialsSecret(db, eng, "pw", resources.ClientTLS{}).Data
	assert.NotContains(t, plain, resources.CAKey)
	assert.Equal(t, "postgres://app:pw@orders.shop.svc:5432/app", string(plain[resources.URIKey]))

	drift := resources.CredentialsDrift(db, eng, plain, tls)
	assert.Equal(t, "postgres://app:pw@orders.shop.svc:5432/app?sslmode=verify-full", string(drift[resources.URIKey]))
	assert.Equal(t, "postgres://app:pw@orders-ro.shop.svc:5432/app?sslmode=verify-full", string(drift[resources.ReadOnlyURIKey]))
	assert.Equal(t, "ca", string(drift[resources.CAKey]))
	assert.Len(t, drift, 3)

	withTLS := resources.CredentialsSecret(db, eng, "pw", tls).Data
	assert.Empty(t, resources.CredentialsDrift(db, eng, withTLS, tls))
	back := resources.CredentialsDrift(db, eng, withTLS, resources.ClientTLS{})
	assert.Contains(t, back, resources.CAKey)
	assert.Nil(t, back[resources.CAKey], "ca.crt is removed when TLS goes off")

	// TLS on, the CA not known yet: the uri already asks for verify-full.
	early := resources.CredentialsSecret(db, eng, "pw", resources.ClientTLS{On: resources.TLSOn}).Data
	assert.NotContains(t, early, resources.CAKey)
	assert.Contains(t, string(early[resources.URIKey]), "sslmode=verify-full")
	assert.Contains(t, string(early[resources.ReadOnlyURIKey]), "sslmode=verify-full")
}

// TestCredentialsReadOnlyKeys: the generated Secret names the read-only
// Service as ro-host and ro-uri, with the application's login; a Secret
// made before them gains exactly those two keys.
func TestCredentialsReadOnlyKeys(t *testing.T) {
	eng, _ := engine.For(dbv1.EnginePostgres)
	db := sample("orders", nil)
	data := resources.CredentialsSecret(db, eng, "pw", resources.ClientTLS{}).Data
	assert.Equal(t, "orders-ro.shop.svc", string(data[resources.ReadOnlyHostKey]))
	assert.Equal(t, "postgres://app:pw@orders-ro.shop.svc:5432/app", string(data[resources.ReadOnlyURIKey]))

	old := maps.Clone(data)
	delete(old, resources.ReadOnlyHostKey)
	delete(old, resources.ReadOnlyURIKey)
	drift := resources.CredentialsDrift(db, eng, old, resources.ClientTLS{})
	assert.Equal(t, map[string][]byte{resources.ReadOnlyHostKey: data[resources.ReadOnlyHostKey], resources.ReadOnlyURIKey: data[resources.ReadOnlyURIKey]}, drift)
}

func TestCertificateGolden(t *testing.T) {
	assert.Nil(t, resources.Certificate(sample("orders", nil)), "no Certificate without an issuerRef")
	db := sample("orders", func(db *dbv1.Database) {
		db.Spec.TLS = &dbv1.TLSSpec{IssuerRef: &dbv1.IssuerReference{Name: "team-ca", Kind: "ClusterIssuer"}}
	})
	got, err := yaml.Marshal(resources.Certificate(db))
	require.NoError(t, err)
	golden := filepath.Join("testdata", "issuer-certificate.golden.yaml")
	if *update {
		require.NoError(t, os.WriteFile(golden, got, 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err, "run go test ./internal/resources -update to create it")
	assert.Equal(t, string(want), string(got))
}

// TestServerTLSVolumeNeedsNoPasswordRules: the server's TLS volume holds
// the certificate, key and CA, and no password rules (the agent writes
// the rules of client certificates); with a cert-manager issuer it holds
// the Database's own CA and the instances' client certificate besides
// (before: the ConfigMap's rules, which let the superuser and the
// replication role in with passwords over TCP).
func TestServerTLSVolumeNeedsNoPasswordRules(t *testing.T) {
	eng, _ := engine.For(dbv1.EnginePostgres)
	for name, tc := range map[string]struct {
		mutate func(*dbv1.Database)
		want   map[string][]string // Secret -> paths
	}{
		"dbkeeper's CA": {nil, map[string][]string{"orders-tls": {"tls.crt", "tls.key", "ca.crt"}}},
		"cert-manager": {func(db *dbv1.Database) {
			db.Spec.TLS = &dbv1.TLSSpec{IssuerRef: &dbv1.IssuerReference{Name: "team-ca", Kind: "ClusterIssuer"}}
		}, map[string][]string{
			"orders-tls":             {"tls.crt", "tls.key", "ca.crt"},
			"orders-ca":              {agentapi.ClientCAFile},
			"orders-replication-tls": {agentapi.ClientCertFile, agentapi.ClientKeyFile},
		}},
	} {
		t.Run(name, func(t *testing.T) {
			db := sample("orders", tc.mutate)
			ac, err := resources.StatefulSet(db, eng, resources.TLSOn, "agent:1")
			require.NoError(t, err)
			pod := decode[appsv1.StatefulSet](t, ac).Spec.Template.Spec
			got := map[string][]string{}
			for _, v := range pod.Volumes {
				if v.Name != "tls" {
					continue
				}
				for _, src := range v.Projected.Sources {
					require.Nil(t, src.ConfigMap, "password rules mounted: %s", src.ConfigMap)
					for _, item := range src.Secret.Items {
						got[src.Secret.Name] = append(got[src.Secret.Name], item.Path)
					}
				}
			}
			assert.Equal(t, tc.want, got)
			c := pod.Containers[0]
			for _, arg := range c.Args {
				assert.NotContains(t, arg, "hba_file", "the agent's rules, not a mounted file")
			}
			assert.Contains(t, c.Env, corev1.EnvVar{Name: agentapi.EnvClientCertAuth, Value: "true"})
		})
	}
}
