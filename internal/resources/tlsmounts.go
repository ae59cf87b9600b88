package resources

import (
	corev1 "k8s.io/api/core/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/engine"
)

// addServerTLS mounts the server certificate, key and CA into the engine
// container at TLSMountPath (one projected volume, so a renewal swaps the
// certificate and key together) and starts the engine with TLS required.
// With a cert-manager issuer the volume holds the Database's own CA
// (agentapi.ClientCAFile) and the instances' client certificate
// (ReplicationClientSecret, agentapi.ClientCertFile and ClientKeyFile) too.
// The agent writes the authentication rules (agentEnv). It must run
// before the container is added to the pod.
func addServerTLS(db *dbv1.Database, eng engine.Engine, pod *corev1ac.PodSpecApplyConfiguration, c *corev1ac.ContainerApplyConfiguration) {
	sources := []*corev1ac.VolumeProjectionApplyConfiguration{
		corev1ac.VolumeProjection().WithSecret(corev1ac.SecretProjection().
			WithName(TLSSecretName(db)).
			WithItems(
				corev1ac.KeyToPath().WithKey(corev1.TLSCertKey).WithPath(corev1.TLSCertKey),
				corev1ac.KeyToPath().WithKey(corev1.TLSPrivateKeyKey).WithPath(corev1.TLSPrivateKeyKey),
				corev1ac.KeyToPath().WithKey(CACertKey).WithPath(CACertKey))),
	}
	if db.Spec.TLS != nil && db.Spec.TLS.IssuerRef != nil {
		sources = append(sources,
			corev1ac.VolumeProjection().WithSecret(corev1ac.SecretProjection().
				WithName(CASecretName(db)).
				WithItems(corev1ac.KeyToPath().WithKey(CACertKey).WithPath(agentapi.ClientCAFile))),
			corev1ac.VolumeProjection().WithSecret(corev1ac.SecretProjection().
				WithName(ReplicationClientSecretName(db)).
				WithItems(
					corev1ac.KeyToPath().WithKey(corev1.TLSCertKey).WithPath(agentapi.ClientCertFile),
					corev1ac.KeyToPath().WithKey(corev1.TLSPrivateKeyKey).WithPath(agentapi.ClientKeyFile))))
	}
	pod.WithVolumes(corev1ac.Volume().WithName(tlsVolume).WithProjected(corev1ac.ProjectedVolumeSource().
		WithDefaultMode(tlsFileMode).
		WithSources(sources...)))
	c.WithVolumeMounts(corev1ac.VolumeMount().WithName(tlsVolume).WithMountPath(TLSMountPath).WithReadOnly(true))
	c.WithArgs(eng.TLSArgs(TLSMountPath+"/"+corev1.TLSCertKey, TLSMountPath+"/"+corev1.TLSPrivateKeyKey, "")...)
}

// addAgentTLS mounts the Database's certificate (TLSSecretName, which the
// tls controller issues from the Database's CA whatever spec.tls.mode
// says) at AgentTLSMountPath for the agent's endpoint alone, when the
// server itself has no TLS: the agent's token and the manager's requests
// never travel in clear, while PostgreSQL stays as the user asked.
func addAgentTLS(db *dbv1.Database, pod *corev1ac.PodSpecApplyConfiguration, c *corev1ac.ContainerApplyConfiguration) {
	pod.WithVolumes(corev1ac.Volume().WithName(AgentTLSVolume).WithSecret(corev1ac.SecretVolumeSource().
		WithSecretName(TLSSecretName(db)).
		WithDefaultMode(tlsFileMode).
		WithItems(
			corev1ac.KeyToPath().WithKey(corev1.TLSCertKey).WithPath(corev1.TLSCertKey),
			corev1ac.KeyToPath().WithKey(corev1.TLSPrivateKeyKey).WithPath(corev1.TLSPrivateKeyKey),
			corev1ac.KeyToPath().WithKey(CACertKey).WithPath(CACertKey))))
	c.WithVolumeMounts(corev1ac.VolumeMount().WithName(AgentTLSVolume).WithMountPath(AgentTLSMountPath).WithReadOnly(true))
}

// addClientTLS mounts the CA of the Database's server certificate into a
// backup or restore container at TLSCAMountPath and makes its client verify
// the server with it. It must run before the container is added to the pod.
func addClientTLS(db *dbv1.Database, eng engine.Engine, pod *corev1ac.PodSpecApplyConfiguration, c *corev1ac.ContainerApplyConfiguration) {
	pod.WithVolumes(corev1ac.Volume().WithName(tlsCAVolume).WithSecret(corev1ac.SecretVolumeSource().
		WithSecretName(TLSSecretName(db)).
		WithDefaultMode(0o444).
		WithItems(corev1ac.KeyToPath().WithKey(CACertKey).WithPath(CACertKey))))
	c.WithVolumeMounts(corev1ac.VolumeMount().WithName(tlsCAVolume).WithMountPath(TLSCAMountPath).WithReadOnly(true))
	c.WithEnv(envApply(eng.ClientTLSEnv(TLSCAMountPath + "/" + CACertKey))...)
}
