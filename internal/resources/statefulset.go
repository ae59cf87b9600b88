package resources

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agent"
	"github.com/dbkeeper/dbkeeper/internal/engine"
)

const (
	// EngineContainer is the name of the engine pod's container that runs
	// the agent and the server.
	EngineContainer = "engine"
	// agentVolume is the emptyDir holding the agent's binary.
	agentVolume = "agent-bin"
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

// StatefulSet is the desired StatefulSet that runs the engine under the
// instance agent (copied from agentImage, the manager's own), requiring
// TLS on TCP connections when tls is on (see TLSFor).
//
// The agent is the engine container's PID 1 and owns the server: the
// container's command is `agent -- <the image's entrypoint>`, and its args
// are the server's as before. The kubelet probes the agent, not the
// server: readiness is the agent's ReadyPath (the server accepts
// connections, a standby included), liveness its HealthPath (the agent
// runs). So a long initdb, clone or crash recovery never fails liveness
// (it needed an hour-long startup probe on pg_isready before), and a
// server the agent restarts does not restart the pod.
//
// Rollouts are OnDelete: a changed template restarts no pod by itself;
// the replication controller deletes them in order (standbys, switchover,
// the former primary). Switching an existing StatefulSet to OnDelete in
// the same write as its new template restarts nothing either.
func StatefulSet(db *dbv1.Database, eng engine.Engine, tls ServerTLS, agentImage string) (*appsv1ac.StatefulSetApplyConfiguration, error) {
	image, err := engine.ImageFor(eng, db)
	if err != nil {
		return nil, err
	}
	podLabels := PodSelectorLabels(db)
	for k, v := range Labels(db, ComponentDatabase) {
		podLabels[k] = v
	}

	container := corev1ac.Container().
		WithName(EngineContainer).
		WithImage(image).
		WithCommand(append([]string{agent.Binary, "agent", "--"}, eng.Entrypoint()...)...).
		WithArgs(eng.ServerArgs()...).
		WithPorts(
			corev1ac.ContainerPort().WithName(eng.PortName()).WithContainerPort(eng.Port()).WithProtocol(corev1.ProtocolTCP),
			corev1ac.ContainerPort().WithName(agent.PortName).WithContainerPort(agent.Port).WithProtocol(corev1.ProtocolTCP)).
		WithEnv(envApply(eng.Env(SuperuserSecretName(db)))...).
		WithEnv(envApply(agentEnv(db, tls))...).
		WithResources(resourcesApply(db.Spec.Resources)).
		WithReadinessProbe(readinessProbe()).
		WithLivenessProbe(agentProbe(agent.HealthPath, 6)).
		WithSecurityContext(restrictedContainer(eng.User())).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName(DataVolumeName).WithMountPath(eng.DataMountPath()),
			corev1ac.VolumeMount().WithName(agentVolume).WithMountPath(agent.BinDir).WithReadOnly(true))

	// The agent reads and renews the primary Lease with the pod's
	// ServiceAccount token (InstanceRole: that one Lease, nothing else).
	pod := corev1ac.PodSpec().
		WithEnableServiceLinks(false).
		WithServiceAccountName(InstanceServiceAccountName(db)).
		WithAutomountServiceAccountToken(true).
		WithTerminationGracePeriodSeconds(60).
		WithSecurityContext(restrictedPod(eng.User())).
		WithAffinity(affinity(db)).
		WithVolumes(corev1ac.Volume().WithName(agentVolume).WithEmptyDir(corev1ac.EmptyDirVolumeSource())).
		WithInitContainers(agentCopy(agentImage, eng.User()))
	addScratch(pod, container, eng.ScratchMounts())
	addSharedMemory(pod, container, eng.SharedMemoryPath(), db.Spec.Resources)
	if tls {
		addServerTLS(db, eng, pod, container)
	} else {
		addAgentTLS(db, pod, container)
	}
	if err := addRepository(db, tls, pod, container); err != nil {
		return nil, err
	}
	addBackupServer(db, tls, container)
	pod.WithContainers(container)

	return appsv1ac.StatefulSet(StatefulSetName(db), db.Namespace).
		WithLabels(Labels(db, ComponentDatabase)).
		WithOwnerReferences(OwnerReference(db)).
		WithSpec(appsv1ac.StatefulSetSpec().
			WithReplicas(Instances(db)).
			WithServiceName(HeadlessServiceName(db)).
			WithPodManagementPolicy(appsv1.OrderedReadyPodManagement).
			WithUpdateStrategy(appsv1ac.StatefulSetUpdateStrategy().WithType(appsv1.OnDeleteStatefulSetStrategyType)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(PodSelectorLabels(db))).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(podLabels).
				WithSpec(pod)).
			WithVolumeClaimTemplates(DataVolumeClaimTemplate(db))), nil
}

// agentCopy is the init container that copies the manager binary, the
// agent, from agentImage into the agent volume: the image has no shell,
// so the binary copies itself.
func agentCopy(agentImage string, uid int64) *corev1ac.ContainerApplyConfiguration {
	return corev1ac.Container().
		WithName(AgentContainer).
		WithImage(agentImage).
		WithCommand("/manager", "copy-self", agent.BinDir).
		WithResources(corev1ac.ResourceRequirements().
			WithRequests(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}).
			WithLimits(corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")})).
		WithSecurityContext(restrictedContainer(uid)).
		WithVolumeMounts(corev1ac.VolumeMount().WithName(agentVolume).WithMountPath(agent.BinDir))
}

// addBackupServer declares the port of the instance's pgBackRest TLS
// server, through which the primary's base backups read a streaming
// standby's files, and gives the agent the domain of its peers' names
// (<pod>.<headless Service>.<namespace>.svc, which the Database's
// certificate carries). The agent runs that server with TLS and a
// repository only (agent.BackupServerPort): without TLS pgBackRest could
// not reach a standby, and without a repository there is no base backup.
func addBackupServer(db *dbv1.Database, tls ServerTLS, container *corev1ac.ContainerApplyConfiguration) {
	if !tls || Store(db, tls) == nil {
		return
	}
	container.WithPorts(corev1ac.ContainerPort().WithName(agent.BackupServerPortName).WithContainerPort(agent.BackupServerPort).WithProtocol(corev1.ProtocolTCP))
}

// PeerDomain is the domain of the instances' own DNS names under the
// headless Service: <headless>.<namespace>.svc.
func PeerDomain(db *dbv1.Database) string {
	return HeadlessServiceName(db) + "." + db.Namespace + ".svc"
}

// agentEnv is the agent's environment (see the agent.Env* constants).
func agentEnv(db *dbv1.Database, tls ServerTLS) []corev1.EnvVar {
	secretKey := func(key string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: ReplicationSecretName(db)}, Key: key}}
	}
	env := []corev1.EnvVar{
		{Name: agent.EnvPodName, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
		{Name: agent.EnvToken, ValueFrom: secretKey(AgentTokenKey)},
		{Name: agent.EnvReplicationPassword, ValueFrom: secretKey(ReplicationPasswordKey)},
		{Name: agent.EnvPrimaryHost, Value: ClientServiceHost(db)},
		{Name: agent.EnvNamespace, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}},
		{Name: agent.EnvPodUID, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.uid"}}},
		{Name: agent.EnvLeaseName, Value: LeaseName(db)},
		// how an instance names the others: the primary's failsafe peer
		// check asks every member, a base backup is copied from a standby
		{Name: agent.EnvPeerDomain, Value: PeerDomain(db)},
	}
	if !tls {
		// the endpoint's alone (addAgentTLS)
		return append(env, corev1.EnvVar{Name: agent.EnvAPITLSDir, Value: AgentTLSMountPath})
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
		corev1.EnvVar{Name: agent.EnvTLSDir, Value: TLSMountPath},
		corev1.EnvVar{Name: agent.EnvClientCertAuth, Value: "true"})
}

// The readiness probe's pace: a frozen agent (or one whose server stopped
// taking connections) makes the pod NotReady within about
// readinessPeriod*readinessFailures + readinessTimeout = 5 s, so the
// Services and the replication controller see it by the time the primary
// lease could be taken over (agent.LeaseDuration).
const (
	readinessPeriod   = 2
	readinessTimeout  = 1
	readinessFailures = 2
)

// readinessProbe is the agent's ReadyPath at the readiness pace.
func readinessProbe() *corev1ac.ProbeApplyConfiguration {
	return agentProbe(agent.ReadyPath, readinessFailures).
		WithPeriodSeconds(readinessPeriod).
		WithTimeoutSeconds(readinessTimeout)
}

// agentProbe is an HTTP probe of the agent's path, over HTTPS: the agent
// always serves the Database's certificate (the kubelet does not verify
// it).
func agentProbe(path string, failures int32) *corev1ac.ProbeApplyConfiguration {
	return corev1ac.Probe().
		WithHTTPGet(corev1ac.HTTPGetAction().WithPath(path).WithPort(intstr.FromString(agent.PortName)).WithScheme(corev1.URISchemeHTTPS)).
		WithPeriodSeconds(10).
		WithTimeoutSeconds(5).
		WithFailureThreshold(failures)
}

// affinity is spec.affinity, or by default a preferred anti-affinity of
// the Database's pods on kubernetes.io/hostname: the scheduler spreads
// the instances over nodes when it can, and still places them all on one
// node when there is only one.
func affinity(db *dbv1.Database) *corev1ac.AffinityApplyConfiguration {
	if db.Spec.Affinity != nil {
		return ViaJSON[corev1ac.AffinityApplyConfiguration](db.Spec.Affinity)
	}
	return corev1ac.Affinity().WithPodAntiAffinity(corev1ac.PodAntiAffinity().
		WithPreferredDuringSchedulingIgnoredDuringExecution(corev1ac.WeightedPodAffinityTerm().
			WithWeight(100).
			WithPodAffinityTerm(corev1ac.PodAffinityTerm().
				WithTopologyKey(corev1.LabelHostname).
				WithLabelSelector(metav1ac.LabelSelector().WithMatchLabels(PodSelectorLabels(db))))))
}

// Instances is the number of engine pods the Database runs: spec.replicas
// (default 1), but never fewer than the current (or switchover target)
// primary's ordinal + 1, so that a scale-down keeps the primary's pod
// until the replication controller has switched over to a lower ordinal;
// spec.replicas 0 stops every pod, the primary's included.
func Instances(db *dbv1.Database) int32 {
	want := db.Spec.ReplicaCount()
	if want <= 0 {
		return 0
	}
	if r := db.Status.Replication; r != nil {
		for _, pod := range []string{r.CurrentPrimary, r.TargetPrimary} {
			if n, ok := InstanceOrdinal(db, pod); ok {
				want = max(want, int32(n)+1)
			}
		}
	}
	return want
}

// InstanceOrdinal is the ordinal of the Database's engine pod named pod
// (InstanceName), false when pod is not one: the StatefulSet's name, a
// dash and a decimal ordinal as the StatefulSet controller writes it (no
// sign, no leading zero, below MaxInt32).
func InstanceOrdinal(db *dbv1.Database, pod string) (int, bool) {
	rest, ok := strings.CutPrefix(pod, StatefulSetName(db)+"-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 || n > math.MaxInt32-1 || strconv.Itoa(n) != rest {
		return 0, false
	}
	return n, true
}

// DataVolumeClaimTemplate is the claim template of the data volumes.
// StatefulSets never change their claim templates, so a grown
// spec.storage.size reaches the PVCs through DataVolumeClaimSize instead.
func DataVolumeClaimTemplate(db *dbv1.Database) *corev1ac.PersistentVolumeClaimApplyConfiguration {
	spec := corev1ac.PersistentVolumeClaimSpec().
		WithAccessModes(corev1.ReadWriteOnce).
		WithResources(corev1ac.VolumeResourceRequirements().
			WithRequests(corev1.ResourceList{corev1.ResourceStorage: db.Spec.DataSize()}))
	if db.Spec.Storage.StorageClassName != nil {
		spec.WithStorageClassName(*db.Spec.Storage.StorageClassName)
	}
	// No kind, apiVersion or namespace: the API server stores templates
	// without them.
	claim := &corev1ac.PersistentVolumeClaimApplyConfiguration{}
	return claim.WithName(DataVolumeName).
		WithLabels(Labels(db, ComponentDatabase)).
		WithSpec(spec)
}

// PinClaimTemplate keeps the claim template of an existing StatefulSet,
// whose templates the API server never lets change, in the desired one.
func PinClaimTemplate(desired *appsv1ac.StatefulSetApplyConfiguration, live *appsv1.StatefulSet) {
	if live == nil || len(live.Spec.VolumeClaimTemplates) == 0 {
		return
	}
	for i := range desired.Spec.VolumeClaimTemplates {
		t := &desired.Spec.VolumeClaimTemplates[i]
		for _, l := range live.Spec.VolumeClaimTemplates {
			if t.Name != nil && l.Name == *t.Name {
				t.Spec.Resources.Requests = &l.Spec.Resources.Requests
			}
		}
	}
}

// PinLegacyEnv keeps, in the desired StatefulSet, the initdb-only
// environment (engine.LegacyEnvPrefix: POSTGRES_USER, POSTGRES_PASSWORD,
// POSTGRES_DB) of an existing StatefulSet made before issue 17, which read
// the application's credentials Secret: initdb has run, the image never
// reads them again, and changing them would restart every pod of every
// existing Database on upgrade for nothing
// (docs/design/roles-and-rotation.md, D6). The other variables are the
// desired ones, in the live order. A StatefulSet whose POSTGRES_USER
// already reads the desired Secret, or none at all, is left as desired.
func PinLegacyEnv(desired *appsv1ac.StatefulSetApplyConfiguration, live *appsv1.StatefulSet) {
	if live == nil || desired.Spec == nil || desired.Spec.Template == nil || desired.Spec.Template.Spec == nil {
		return
	}
	var liveEnv []corev1.EnvVar
	for _, c := range live.Spec.Template.Spec.Containers {
		if c.Name == EngineContainer {
			liveEnv = c.Env
		}
	}
	var want *corev1ac.ContainerApplyConfiguration
	for i := range desired.Spec.Template.Spec.Containers {
		if c := &desired.Spec.Template.Spec.Containers[i]; c.Name != nil && *c.Name == EngineContainer {
			want = c
		}
	}
	if want == nil || !legacyEnv(liveEnv, want.Env) {
		return
	}
	byName := map[string]corev1ac.EnvVarApplyConfiguration{}
	for _, e := range want.Env {
		byName[ptr.Deref(e.Name, "")] = e
	}
	pinned := make([]corev1ac.EnvVarApplyConfiguration, 0, len(liveEnv)+len(want.Env))
	for _, e := range liveEnv {
		switch d, ok := byName[e.Name]; {
		case strings.HasPrefix(e.Name, engine.LegacyEnvPrefix):
			pinned = append(pinned, *envApply([]corev1.EnvVar{e})[0])
		case ok:
			pinned = append(pinned, d)
		default:
			continue
		}
		delete(byName, e.Name)
	}
	for _, e := range want.Env {
		if _, left := byName[ptr.Deref(e.Name, "")]; left {
			pinned = append(pinned, e)
		}
	}
	want.Env = pinned
}

// legacyEnv says whether the live environment's POSTGRES_USER reads
// another Secret than the desired one's.
func legacyEnv(live []corev1.EnvVar, desired []corev1ac.EnvVarApplyConfiguration) bool {
	const user = engine.LegacyEnvPrefix + "USER"
	var liveSecret, wantSecret string
	for _, e := range live {
		if e.Name == user && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			liveSecret = e.ValueFrom.SecretKeyRef.Name
		}
	}
	for _, e := range desired {
		if ptr.Deref(e.Name, "") == user && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			wantSecret = ptr.Deref(e.ValueFrom.SecretKeyRef.Name, "")
		}
	}
	return liveSecret != "" && liveSecret != wantSecret
}

// DataPVCName is the name of the data PVC of one replica.
func DataPVCName(db *dbv1.Database, ordinal int) string {
	return fmt.Sprintf("%s-%s-%d", DataVolumeName, StatefulSetName(db), ordinal)
}
