package resources_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TestEnginePodDeclaresTheBackupServer: with TLS and a repository the
// engine container declares the pgBackRest TLS server's port
// ("pgbackrest", 8432/TCP); without TLS, or without a repository, it
// does not. The agent always gets the domain of its peers' names, which
// the Database's certificate covers: the primary's failsafe peer check
// asks every member (issue 28), whatever the backups.
func TestEnginePodDeclaresTheBackupServer(t *testing.T) {
	backupPort := func(c corev1.Container) *corev1.ContainerPort {
		for i, p := range c.Ports {
			if p.Name == agentapi.BackupServerPortName {
				return &c.Ports[i]
			}
		}
		return nil
	}

	db := sample("orders", withStore)
	c := enginePod(t, db, resources.TLSOn).Spec.Template.Spec.Containers[0]
	p := backupPort(c)
	if assert.NotNil(t, p, "no pgbackrest port with TLS and an object store") {
		assert.Equal(t, int32(8432), p.ContainerPort)
		assert.Equal(t, corev1.ProtocolTCP, p.Protocol)
	}
	env := envOf(c)
	assert.Equal(t, "orders-headless.shop.svc", env[agentapi.EnvPeerDomain].Value)
	assert.Contains(t, resources.ServerDNSNames(db), "*."+env[agentapi.EnvPeerDomain].Value,
		"the certificate does not name the standbys as the primary reaches them")

	for name, c := range map[string]corev1.Container{
		"TLS off":         enginePod(t, sample("orders", withStore), resources.TLSOff).Spec.Template.Spec.Containers[0],
		"no repository":   enginePod(t, sample("orders", nil), resources.TLSOn).Spec.Template.Spec.Containers[0],
		"neither of them": enginePod(t, sample("orders", func(*dbv1.Database) {}), resources.TLSOff).Spec.Template.Spec.Containers[0],
	} {
		assert.Nil(t, backupPort(c), "%s: a pgbackrest port", name)
		assert.Equal(t, "orders-headless.shop.svc", envOf(c)[agentapi.EnvPeerDomain].Value, "%s: the peer domain", name)
	}
}
