package resources

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// AgentContainer is the engine pod's init container that copies the agent
// from the manager's image (--agent-image).
const AgentContainer = "agent-bin"

// PodPredatesAgent reports whether an engine pod was made before dbkeeper
// had replication: it has the engine container but not the init container
// that copies the instance agent (its engine runs the image's entrypoint
// itself). Such a Database ran one instance, its primary.
func PodPredatesAgent(pod *corev1.Pod) bool {
	engine, agent := false, false
	for _, c := range pod.Spec.Containers {
		engine = engine || c.Name == EngineContainer
	}
	for _, c := range pod.Spec.InitContainers {
		agent = agent || c.Name == AgentContainer
	}
	return engine && !agent
}

// agentCopy is the init container that copies the manager binary, the
// agent, from agentImage into the agent volume: the image has no shell,
// so the binary copies itself.
func agentCopy(agentImage string, uid int64) *corev1ac.ContainerApplyConfiguration {
	return corev1ac.Container().
		WithName(AgentContainer).
		WithImage(agentImage).
		WithCommand("/manager", "copy-self", agentapi.BinDir).
		WithResources(corev1ac.ResourceRequirements().
			WithRequests(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}).
			WithLimits(corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")})).
		WithSecurityContext(restrictedContainer(uid)).
		WithVolumeMounts(corev1ac.VolumeMount().WithName(agentVolume).WithMountPath(agentapi.BinDir))
}

// addBackupServer declares the port of the instance's pgBackRest TLS
// server, through which the primary's base backups read a streaming
// standby's files, and gives the agent the domain of its peers' names
// (<pod>.<headless Service>.<namespace>.svc, which the Database's
// certificate carries). The agent runs that server with TLS and a
// repository only (agentapi.BackupServerPort): without TLS pgBackRest could
// not reach a standby, and without a repository there is no base backup.
func addBackupServer(db *dbv1.Database, tls ServerTLS, container *corev1ac.ContainerApplyConfiguration) {
	if !tls || Store(db, tls) == nil {
		return
	}
	container.WithPorts(corev1ac.ContainerPort().WithName(agentapi.BackupServerPortName).WithContainerPort(agentapi.BackupServerPort).WithProtocol(corev1.ProtocolTCP))
}

// PeerDomain is the domain of the instances' own DNS names under the
// headless Service: <headless>.<namespace>.svc.
func PeerDomain(db *dbv1.Database) string {
	return HeadlessServiceName(db) + "." + db.Namespace + ".svc"
}

// agentEnv is the agent's environment (see the agentapi.Env* constants).
func agentEnv(db *dbv1.Database, tls ServerTLS) []corev1.EnvVar {
	secretKey := func(key string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: ReplicationSecretName(db)}, Key: key}}
	}
	env := []corev1.EnvVar{
		{Name: agentapi.EnvPodName, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
		{Name: agentapi.EnvToken, ValueFrom: secretKey(AgentTokenKey)},
		{Name: agentapi.EnvReplicationPassword, ValueFrom: secretKey(ReplicationPasswordKey)},
		{Name: agentapi.EnvPrimaryHost, Value: ClientServiceHost(db)},
		{Name: agentapi.EnvNamespace, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}},
		{Name: agentapi.EnvPodUID, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.uid"}}},
		{Name: agentapi.EnvLeaseName, Value: LeaseName(db)},
		// how an instance names the others: the primary's failsafe peer
		// check asks every member, a base backup is copied from a standby
		{Name: agentapi.EnvPeerDomain, Value: PeerDomain(db)},
	}
	if !tls {
		// the endpoint's alone (addAgentTLS)
		return append(env, corev1.EnvVar{Name: agentapi.EnvAPITLSDir, Value: AgentTLSMountPath})
	}
	// The TLS volume holds tls.crt, tls.key and ca.crt (addServerTLS).
	// With TLS the server logs in its superuser and the replication role
	// over TCP with certificates of the Database's own CA (<name>-ca)
	// only, never a password; with a cert-manager issuer, whose CA may sign
	// for others too, the server's certificate is cert-manager's but the
	// client certificates are still only the Database's CA's (addServerTLS
	// mounts that CA and the instances' client certificate beside it). The
	// agent writes the rules; the manager signs a certificate for each of
	// its superuser sessions (instance.SuperuserCertificate).
	return append(env,
		corev1.EnvVar{Name: agentapi.EnvTLSDir, Value: TLSMountPath},
		corev1.EnvVar{Name: agentapi.EnvClientCertAuth, Value: "true"})
}

// The readiness probe's pace: a frozen agent (or one whose server stopped
// taking connections) makes the pod NotReady within about
// readinessPeriod*readinessFailures + readinessTimeout = 5 s, so the
// Services and the replication controller see it by the time the primary
// lease could be taken over (agentapi.LeaseDuration).
const (
	readinessPeriod   = 2
	readinessTimeout  = 1
	readinessFailures = 2
)

// readinessProbe is the agent's ReadyPath at the readiness pace.
func readinessProbe() *corev1ac.ProbeApplyConfiguration {
	return agentProbe(agentapi.ReadyPath, readinessFailures).
		WithPeriodSeconds(readinessPeriod).
		WithTimeoutSeconds(readinessTimeout)
}

// agentProbe is an HTTP probe of the agent's path, over HTTPS: the agent
// always serves the Database's certificate (the kubelet does not verify
// it).
func agentProbe(path string, failures int32) *corev1ac.ProbeApplyConfiguration {
	return corev1ac.Probe().
		WithHTTPGet(corev1ac.HTTPGetAction().WithPath(path).WithPort(intstr.FromString(agentapi.PortName)).WithScheme(corev1.URISchemeHTTPS)).
		WithPeriodSeconds(10).
		WithTimeoutSeconds(5).
		WithFailureThreshold(failures)
}
