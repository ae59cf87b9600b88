package v1

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Engine names a database engine that dbkeeper can run.
// +kubebuilder:validation:Enum=postgres
type Engine string

// EnginePostgres is PostgreSQL, run from the official postgres image.
const EnginePostgres Engine = "postgres"

// DeletionPolicy says what happens to a Database's data when the Database is
// deleted.
// +kubebuilder:validation:Enum=Delete;Retain;WipeOut;DoNotDelete
type DeletionPolicy string

const (
	// DeletionPolicyDelete deletes the data volumes and the credentials
	// Secret, and keeps the backup volume.
	DeletionPolicyDelete DeletionPolicy = "Delete"
	// DeletionPolicyRetain keeps the data volumes, the credentials Secret and
	// the backup volume; a new Database of the same name adopts them.
	DeletionPolicyRetain DeletionPolicy = "Retain"
	// DeletionPolicyWipeOut deletes the data volumes, the credentials Secret
	// and the backup volume.
	DeletionPolicyWipeOut DeletionPolicy = "WipeOut"
	// DeletionPolicyDoNotDelete refuses deletion until the policy is changed.
	DeletionPolicyDoNotDelete DeletionPolicy = "DoNotDelete"
)

// Database is a managed database: dbkeeper runs the engine in a StatefulSet,
// exposes it through Services, keeps its credentials in a Secret and backs it
// up on a schedule, and reports each of those facets as a condition.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=db,categories=dbkeeper
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:printcolumn:name="Engine",type=string,JSONPath=`.spec.engine`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="StatefulSet",type=string,JSONPath=`.status.conditions[?(@.type=="StatefulSetReady")].status`
// +kubebuilder:printcolumn:name="Service",type=string,JSONPath=`.status.conditions[?(@.type=="ServiceReady")].status`
// +kubebuilder:printcolumn:name="Credentials",type=string,JSONPath=`.status.conditions[?(@.type=="CredentialsReady")].status`
// +kubebuilder:printcolumn:name="Backup",type=string,JSONPath=`.status.conditions[?(@.type=="BackupReady")].status`
// +kubebuilder:printcolumn:name="TLS",type=string,JSONPath=`.status.conditions[?(@.type=="TLSReady")].status`
// +kubebuilder:printcolumn:name="Replication",type=string,JSONPath=`.status.conditions[?(@.type=="ReplicationReady")].status`
// +kubebuilder:printcolumn:name="Config",type=string,JSONPath=`.status.conditions[?(@.type=="ConfigurationReady")].status`
// +kubebuilder:printcolumn:name="Roles",type=string,JSONPath=`.status.conditions[?(@.type=="RolesReady")].status`
// +kubebuilder:printcolumn:name="Extensions",type=string,JSONPath=`.status.conditions[?(@.type=="ExtensionsReady")].status`
// +kubebuilder:printcolumn:name="Primary",type=string,JSONPath=`.status.replication.currentPrimary`
// +kubebuilder:printcolumn:name="Last Backup",type=date,JSONPath=`.status.backup.lastSuccessfulTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`,priority=1
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`,priority=1
// +kubebuilder:printcolumn:name="Generation",type=integer,JSONPath=`.metadata.generation`,priority=1
// +kubebuilder:printcolumn:name="Observed",type=integer,JSONPath=`.status.observedGeneration`,priority=1
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 45",message="metadata.name must be at most 45 characters: the names of the Database's children (such as <name>-backup and its Jobs) must fit in 63"
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must start with a lower-case letter and contain only lower-case letters, digits and '-': it names Services, which must be DNS-1035 labels"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.version) || !has(oldSelf.spec.version) || self.spec.version == oldSelf.spec.version || (self.spec.version.matches('^[0-9]+$') && oldSelf.spec.version.matches('^[0-9]+$') && int(self.spec.version) > int(oldSelf.spec.version)) || (has(oldSelf.status) && has(oldSelf.status.replication) && has(oldSelf.status.replication.majorUpgrade) && oldSelf.status.replication.majorUpgrade.phase == 'Failed' && self.spec.version == oldSelf.status.replication.majorUpgrade.from)",message="spec.version cannot go down: a data directory of a major cannot be read by an older one (restore a backup into a new Database instead); only after a failed in-place upgrade may it go back to status.replication.majorUpgrade.from",fieldPath=".spec.version"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.credentials) || !has(self.spec.credentials.secretName) || self.spec.credentials.secretName != self.metadata.name + '-superuser'",message="spec.credentials.secretName may not be <metadata.name>-superuser: dbkeeper keeps the superuser's credentials in that Secret, which applications never get"
type Database struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the database the user asks for.
	// +kubebuilder:default={}
	Spec DatabaseSpec `json:"spec,omitempty"`
	// Status is what dbkeeper observed, one condition per facet.
	Status DatabaseStatus `json:"status,omitempty"`
}

// DatabaseSpec is the desired state of a Database.
//
// +kubebuilder:validation:XValidation:rule="!has(self.engine) || !has(self.version) || self.engine != 'postgres' || self.version in ['14', '15', '16', '17', '18']",message="spec.version must be one of 15, 16, 17, 18 for engine postgres"
// +kubebuilder:validation:XValidation:rule="oldSelf.hasValue() || !has(self.engine) || !has(self.version) || self.engine != 'postgres' || self.version != '14'",message="spec.version: PostgreSQL 14 reached its end of life on 2026-11-12 and gets no more fixes, security ones included: new Databases use 15, 16, 17 or 18 (Databases of 14 created before keep running)",fieldPath=".version",optionalOldSelf=true
// +kubebuilder:validation:XValidation:rule="!has(self.highAvailability) || !has(self.highAvailability.synchronous) || self.highAvailability.synchronous.dataDurability == 'Preferred' || (has(self.replicas) ? self.replicas : 1) == 0 || self.highAvailability.synchronous.number < (has(self.replicas) ? self.replicas : 1)",message="spec.highAvailability.synchronous.number must be below spec.replicas with dataDurability Required: every commit would wait for standbys that do not exist"
// +kubebuilder:validation:XValidation:rule="!has(self.backup) || !has(self.backup.volumeRepository) || self.backup.volumeRepository != 'Enabled' || !has(self.tls) || self.tls.mode != 'Disabled'",message="spec.backup.volumeRepository Enabled needs TLS: the repository's S3 server serves the Database's certificate, and spec.tls.mode is Disabled"
// +kubebuilder:validation:XValidation:rule="!has(self.bootstrap) || !has(self.bootstrap.recovery) || !has(self.backup) || has(self.backup.objectStore) || !has(self.backup.volumeRepository) || self.backup.volumeRepository == 'Enabled'",message="spec.bootstrap.recovery needs a repository of the new Database's own, which it archives into from its first promotion: spec.backup.objectStore, or the repository on its backup volume (spec.backup.volumeRepository unset or Enabled), and spec.backup.volumeRepository is Disabled"
// +kubebuilder:validation:XValidation:rule="!has(self.backup) || !has(self.backup.verification) || has(self.backup.objectStore) || !has(self.tls) || self.tls.mode != 'Disabled'",message="spec.backup.verification needs a repository: spec.backup.objectStore, or the repository on the backup volume, which needs TLS, and spec.tls.mode is Disabled"
// +kubebuilder:validation:XValidation:rule="!has(self.bootstrap) || !has(self.bootstrap.recovery) || !has(self.tls) || self.tls.mode != 'Disabled'",message="spec.bootstrap.recovery needs TLS: the operator hands the source store's credentials to the new instance's agent, which speaks HTTPS only with TLS, and spec.tls.mode is Disabled"
// +kubebuilder:validation:XValidation:rule="has(self.bootstrap) == has(oldSelf.bootstrap)",message="spec.bootstrap cannot be added or removed after creation: it only says how the Database was first filled"
// +kubebuilder:validation:XValidation:rule="has(self.credentials) == has(oldSelf.credentials)",message="spec.credentials cannot be added or removed after creation: the data directory was initialised with the first credentials"
// +kubebuilder:validation:XValidation:rule="!has(self.roles) || (has(self.credentials) && has(self.credentials.secretName) && size(self.credentials.secretName) > 0) || self.roles.all(r, r.name != 'app')",message="spec.roles: app is the application's role (generated credentials), which dbkeeper keeps from the credentials Secret: give the role another name",fieldPath=".roles"
// +kubebuilder:validation:XValidation:rule="!has(self.databases) || (has(self.credentials) && has(self.credentials.secretName) && size(self.credentials.secretName) > 0) || self.databases.all(d, d.name != 'app')",message="spec.databases: app is the application's database (generated credentials), which dbkeeper keeps from the credentials Secret: give the database another name",fieldPath=".databases"
// +kubebuilder:validation:XValidation:rule="!has(self.roles) || self.roles.all(r, !has(r.inRoles) || r.inRoles.all(g, g.startsWith('pg_') || self.roles.exists(o, o.name == g && (!has(o.ensure) || o.ensure == 'Present'))))",message="spec.roles: inRoles names a role that is neither a predefined pg_ role nor a role of spec.roles with ensure Present",fieldPath=".roles"
// +kubebuilder:validation:XValidation:rule="!has(self.roles) || !has(self.version) || !(self.version in ['14', '15', '16']) || self.roles.all(r, !has(r.inRoles) || !('pg_maintain' in r.inRoles))",message="spec.roles: inRoles names pg_maintain, which PostgreSQL has from version 17 on, and spec.version is older",fieldPath=".roles"
// +kubebuilder:validation:XValidation:rule="!has(self.roles) || !has(self.version) || self.version != '14' || self.roles.all(r, !has(r.inRoles) || !('pg_checkpoint' in r.inRoles))",message="spec.roles: inRoles names pg_checkpoint, which PostgreSQL has from version 15 on, and spec.version is 14",fieldPath=".roles"
// +kubebuilder:validation:XValidation:rule="!has(self.databases) || self.databases.all(d, !has(d.owner) || size(d.owner) == 0 || (has(self.roles) && self.roles.exists(r, r.name == d.owner && (!has(r.ensure) || r.ensure == 'Present'))) || (!(has(self.roles) && self.roles.exists(r, r.name == d.owner)) && (d.owner == 'app' || (has(self.credentials) && has(self.credentials.secretName) && size(self.credentials.secretName) > 0))))",message="spec.databases: owner must be a role of spec.roles with ensure Present, or the application's role (the default)",fieldPath=".databases"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.postgresql) || !has(oldSelf.postgresql.extensions) || oldSelf.postgresql.extensions.all(e, !(e.name in ['pg_stat_statements', 'pgaudit']) || (has(e.ensure) && e.ensure == 'Absent') || (has(self.postgresql) && has(self.postgresql.extensions) && self.postgresql.extensions.exists(n, n.name == e.name)))",message="spec.postgresql.extensions: an extension whose library is in shared_preload_libraries (pg_stat_statements, pgaudit) leaves the list only after ensure: Absent dropped it (without its library it fails every use)"
// +kubebuilder:validation:XValidation:rule="!has(self.monitoring) || !has(self.monitoring.topStatements) || self.monitoring.topStatements == 0 || (has(self.postgresql) && has(self.postgresql.extensions) && self.postgresql.extensions.exists(e, e.name == 'pg_stat_statements' && (!has(e.ensure) || e.ensure == 'Present')))",message="spec.monitoring.topStatements needs pg_stat_statements in spec.postgresql.extensions (ensure Present): its view is what the statements are read from",fieldPath=".monitoring.topStatements"
type DatabaseSpec struct {
	// Engine is the database engine. It cannot change after creation.
	// +kubebuilder:default=postgres
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.engine is immutable: create a new Database to change the engine"
	Engine Engine `json:"engine,omitempty"`

	// Version is the engine's major version; it picks the image from the
	// engine's catalog (PostgreSQL: 15, 16, 17, 18; 14 is past its end of
	// life, refused for new Databases and kept running for existing ones).
	// Raising it upgrades the data directories in place (pg_upgrade on the
	// primary, the standbys cloned again: status.replication.majorUpgrade);
	// it never goes down, except back to the old major after an upgrade
	// that failed.
	// +kubebuilder:default="17"
	// +kubebuilder:validation:MaxLength=8
	Version string `json:"version,omitempty"`

	// Image overrides the catalog image for the version, for example to pin a
	// digest or use a mirror. It must run the same engine and major version.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^[^\s]+$`
	Image string `json:"image,omitempty"`

	// Replicas is the number of engine instances (pods): one primary and
	// replicas-1 hot standbys streaming from it, or 0 to stop the database
	// and keep its data. The client Service <name> reaches the primary,
	// <name>-ro the ready standbys.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=9
	Replicas *int32 `json:"replicas,omitempty"`

	// Storage is the data volume of each instance.
	// +kubebuilder:default={}
	Storage StorageSpec `json:"storage,omitempty"`

	// Affinity places the engine pods. Unset, the pods of one Database
	// prefer different nodes (a preferred pod anti-affinity on
	// kubernetes.io/hostname), so that losing a node loses one instance.
	// It stays beside the default topologySpreadConstraints because the
	// scheduler scores those only on nodes that carry every one of their
	// topology labels: where nodes have no zone label, the anti-affinity
	// is what still spreads the instances over nodes. Set, it replaces
	// that default whole (for example with a required anti-affinity, or a
	// node affinity). Like every placement field, a change rolls out in
	// the usual order: the standbys one at a time, a switchover, then the
	// former primary.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// Tolerations let the engine pods run on nodes with matching taints,
	// such as nodes a platform team keeps for databases (tainted, say,
	// dedicated=database:NoSchedule). A toleration allows such nodes but
	// does not require them: pair it with nodeSelector to keep the pods
	// there. Refused at admission, as Kubernetes refuses them in a pod: an
	// operator other than Equal or Exists, a value with Exists, an empty
	// key without Exists, an unknown effect, tolerationSeconds without
	// effect NoExecute; a key or value that is no label passes admission
	// and StatefulSetReady names it. Server-side apply replaces the list
	// whole, as it does a pod's.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.operator) || t.operator in ['', 'Equal', 'Exists'])",message="spec.tolerations: operator must be Equal (the default) or Exists"
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.operator) || t.operator != 'Exists' || !has(t.value) || t.value == '')",message="spec.tolerations: a toleration with operator Exists takes no value (it tolerates every value of its key): remove the value, or use operator Equal"
	// +kubebuilder:validation:XValidation:rule="self.all(t, (has(t.key) && t.key != '') || (has(t.operator) && t.operator == 'Exists'))",message="spec.tolerations: a toleration without a key must have operator Exists (it then tolerates every taint)"
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.effect) || t.effect in ['', 'NoSchedule', 'PreferNoSchedule', 'NoExecute'])",message="spec.tolerations: effect must be NoSchedule, PreferNoSchedule or NoExecute, or empty for all three"
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.tolerationSeconds) || (has(t.effect) && t.effect == 'NoExecute'))",message="spec.tolerations: tolerationSeconds needs effect NoExecute (it is how long a pod stays on a node that gets a NoExecute taint)"
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// NodeSelector keeps the engine pods on nodes that carry every one of
	// these labels (for example node-role.example.com/database: ""), as a
	// pod's nodeSelector does; a node must also match spec.affinity's
	// nodeAffinity when both are set. Keys are label keys ([prefix/]name),
	// values label values. Server-side apply replaces the map whole, as it
	// does a pod's.
	// +optional
	// +mapType=atomic
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$') && size(k.split('/')[size(k.split('/')) - 1]) <= 63 && (size(k.split('/')) == 1 || size(k.split('/')[0]) <= 253))",message="spec.nodeSelector: each key must be a label key, [prefix/]name: name at most 63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter or digit; prefix a DNS subdomain"
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// TopologySpreadConstraints spread the engine pods over topology
	// domains, as a pod's do. Unset, the instances spread over nodes
	// (kubernetes.io/hostname) and over zones (topology.kubernetes.io/zone),
	// each with maxSkew 1 and whenUnsatisfiable ScheduleAnyway: a
	// preference, so that one node, or one zone, still runs them all. Set,
	// the list replaces that default whole, and an empty list ([]) turns it
	// off: no spread constraint at all. A constraint without a
	// labelSelector counts the Database's own instances (dbkeeper fills in
	// their selector); matchLabelKeys is left to the user (the default sets
	// none, so that the instances of every revision count together during
	// a rollout). Two constraints with the same topologyKey and
	// whenUnsatisfiable, which Kubernetes refuses in a pod, pass admission
	// (comparing them costs more CEL than a CRD may spend): StatefulSetReady
	// then says so, and the running pods stay as they are.
	//
	// Unlike a pod's, the list is atomic under server-side apply: one field
	// manager owns it whole, [] included. So [] stays while its manager
	// applies it, whatever other managers apply, and goes when that manager
	// stops applying it, which brings the default back. (Merged per entry,
	// an applied [] would belong to no manager and stay for good.)
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(c, c.maxSkew >= 1)",message="spec.topologySpreadConstraints: maxSkew must be at least 1"
	// +kubebuilder:validation:XValidation:rule="self.all(c, c.topologyKey != '')",message="spec.topologySpreadConstraints: topologyKey must name a node label, such as topology.kubernetes.io/zone"
	// +kubebuilder:validation:XValidation:rule="self.all(c, c.whenUnsatisfiable in ['DoNotSchedule', 'ScheduleAnyway'])",message="spec.topologySpreadConstraints: whenUnsatisfiable must be DoNotSchedule or ScheduleAnyway"
	// +kubebuilder:validation:XValidation:rule="self.all(c, !has(c.minDomains) || (c.minDomains >= 1 && c.whenUnsatisfiable == 'DoNotSchedule'))",message="spec.topologySpreadConstraints: minDomains must be at least 1, and only goes with whenUnsatisfiable DoNotSchedule"
	// +kubebuilder:validation:XValidation:rule="self.all(c, (!has(c.nodeAffinityPolicy) || c.nodeAffinityPolicy in ['Honor', 'Ignore']) && (!has(c.nodeTaintsPolicy) || c.nodeTaintsPolicy in ['Honor', 'Ignore']))",message="spec.topologySpreadConstraints: nodeAffinityPolicy and nodeTaintsPolicy must be Honor or Ignore"
	TopologySpreadConstraints *[]corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`

	// PriorityClassName is the PriorityClass of the engine pods, such as
	// one a platform team keeps for databases, so that they may preempt
	// lower-priority pods when the nodes are full and are preempted after
	// them. The class must exist when a pod is made: the API server
	// refuses a pod of a class it does not know (the StatefulSet's
	// FailedCreate events say so). Unset: the cluster's global default
	// class, if it has one.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// Resources are the compute resources of the engine container. A cpu
	// or memory request may not exceed its limit.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.requests) || !has(self.limits) || ['cpu', 'memory'].all(k, !(k in self.requests) || !(k in self.limits) || quantity(string(self.requests[k])).compareTo(quantity(string(self.limits[k]))) <= 0)",message="spec.resources: the cpu and memory requests must be less than or equal to their limits"
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// Credentials names the Secret with the application's credentials: a
	// role that owns its database and is not a superuser. It is set once,
	// at creation.
	// +optional
	Credentials *CredentialsSpec `json:"credentials,omitempty"`

	// Service shapes the client Service.
	// +kubebuilder:default={}
	Service ServiceSpec `json:"service,omitempty"`

	// NetworkPolicy says who may connect to the Database's pods, through a
	// NetworkPolicy dbkeeper keeps (when the manager's --network-policies
	// is on, its default).
	// +optional
	NetworkPolicy NetworkPolicySpec `json:"networkPolicy,omitempty"`

	// Backup configures the scheduled backups.
	// +kubebuilder:default={}
	Backup BackupSpec `json:"backup,omitempty"`

	// DeletionPolicy says what happens to the data when the Database is
	// deleted: Delete (data volumes and Secret go, backups stay), Retain
	// (everything stays for a new Database of the same name), WipeOut
	// (everything goes, backups too) or DoNotDelete (deletion is refused).
	// +kubebuilder:default=Delete
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`

	// Paused stops dbkeeper from changing the Database's children; every
	// facet condition then reads Paused. Deletion is still honoured.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// TLS says how clients connect: over TLS with a server certificate
	// from the operator's own CA (the default for a new Database), from a
	// cert-manager issuer (issuerRef), or in plaintext (mode Disabled). A
	// Database created before dbkeeper had TLS keeps plaintext until this
	// is set.
	// +optional
	TLS *TLSSpec `json:"tls,omitempty"`

	// Bootstrap fills a new Database before it reports Ready. Immutable.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.bootstrap is immutable: it only says how the Database was first filled"
	Bootstrap *BootstrapSpec `json:"bootstrap,omitempty"`

	// PostgreSQL tunes the server: its parameters.
	// +optional
	PostgreSQL PostgreSQLSpec `json:"postgresql,omitempty"`

	// HighAvailability says what happens when the primary is lost
	// (failover) and whether commits wait for standbys (synchronous
	// replication). It matters with two or more replicas.
	// +optional
	HighAvailability HighAvailabilitySpec `json:"highAvailability,omitempty"`

	// Roles are roles dbkeeper keeps on the server beside the
	// application's own: logins for other services or people, group
	// roles, memberships of PostgreSQL's predefined roles
	// (pg_read_all_data, pg_monitor, ...). dbkeeper creates them, sets
	// their passwords from Secrets, and puts back what is changed by hand
	// (attributes, memberships, passwords), on the primary. A role that
	// leaves the list is left on the server as it is; only ensure: Absent
	// drops one. RolesReady reports them.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Roles []RoleSpec `json:"roles,omitempty"`

	// Databases are databases inside the server that dbkeeper keeps
	// beside the application's own: created with their owner, the owner
	// put back when it changes. A database that leaves the list stays on
	// the server with its data; only ensure: Absent drops one, and only
	// while nobody is connected to it. RolesReady reports them.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Databases []ServerDatabaseSpec `json:"databases,omitempty"`

	// Monitoring says what the instances' metrics include beyond the
	// defaults (docs/operations/metrics.md).
	// +optional
	Monitoring MonitoringSpec `json:"monitoring,omitempty"`
}

// MonitoringSpec is what a Database's metrics include beyond the defaults.
type MonitoringSpec struct {
	// TopStatements, above 0, adds the statements of pg_stat_statements
	// that took the most execution time on each instance, this many (by
	// pg_stat_statements' normalised text: constants are $1, $2, ...), as
	// dbkeeper_postgres_statement_calls_total, _exec_seconds_total and
	// _rows_total labelled with queryid, datname, user and the statement's
	// first 120 characters. Needs pg_stat_statements in
	// spec.postgresql.extensions. 0, the default, reports none: each
	// statement is three series on the manager and in Prometheus.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	TopStatements int32 `json:"topStatements,omitempty"`

	// CustomQueries names a ConfigMap of the Database's namespace whose key
	// holds user-defined metric queries in postgres_exporter's format
	// (name: {query, database, metrics: [column: {usage: LABEL, GAUGE or
	// COUNTER, description}]}), reported as
	// dbkeeper_postgres_custom_<name>_<column>. Each runs on every
	// instance as the application's role (it reads what the application
	// may; grant more to that role) in a read-only transaction of the
	// application's database or the one it names. The ConfigMap is mounted
	// into the pods: naming one, or another, rolls out a restart in the
	// usual order; its content is read again at each scrape. A query that
	// fails is left out and counted in dbkeeper_postgres_scrape_errors,
	// the agent's log says why.
	// +optional
	CustomQueries *CustomQueriesSpec `json:"customQueries,omitempty"`
}

// CustomQueriesSpec is where a Database's user-defined metric queries are.
type CustomQueriesSpec struct {
	// ConfigMapName is the ConfigMap's name, in the Database's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ConfigMapName string `json:"configMapName"`

	// Key is the ConfigMap's key that holds the queries.
	// +kubebuilder:default=queries.yaml
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +optional
	Key string `json:"key,omitempty"`
}

// HighAvailabilitySpec is how a Database with standbys survives the loss
// of its primary.
type HighAvailabilitySpec struct {
	// Failover promotes the most advanced healthy standby when the primary
	// has been lost for FailoverDelay. Default true; false leaves a lost
	// primary to a person (ReplicationReady says so).
	// +optional
	Failover *bool `json:"failover,omitempty"`

	// FailoverDelay is how long the primary must be unavailable before a
	// standby is promoted: a primary that restarts in place within it
	// (its server or agent crashed) keeps its role. Default 10s.
	// +optional
	FailoverDelay *metav1.Duration `json:"failoverDelay,omitempty"`

	// MaxFailoverLag is how much WAL a standby may lack (the old
	// primary's last reported position minus what the standby received)
	// and still be promoted by a failover; a failover that would lose
	// more waits for a person (or for the primary). Default 16Mi; 0
	// removes the limit.
	// +optional
	MaxFailoverLag *resource.Quantity `json:"maxFailoverLag,omitempty"`

	// Synchronous makes each commit wait until standbys confirm it. With
	// dataDurability Required no acknowledged commit is lost by a
	// failover. Unset: asynchronous replication, where a failover may
	// lose the last commits and status.replication.lastFailover says how
	// much.
	// +optional
	Synchronous *SynchronousSpec `json:"synchronous,omitempty"`
}

// SynchronousSpec is synchronous replication (synchronous_standby_names).
type SynchronousSpec struct {
	// Method is Any (quorum: any Number standbys confirm) or First
	// (priority: the first Number in ordinal order). Default Any.
	// +kubebuilder:default=Any
	// +optional
	Method SynchronousMethod `json:"method,omitempty"`

	// Number is how many standbys confirm each commit. Default 1.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=8
	// +optional
	Number int32 `json:"number,omitempty"`

	// DataDurability is Required (commits wait when fewer than Number
	// standbys are available: writes block, nothing acknowledged is lost)
	// or Preferred (only available standbys are named: writes never wait
	// for a missing one, and a failover may lose what only the primary
	// had). Default Required.
	// +kubebuilder:default=Required
	// +optional
	DataDurability DataDurability `json:"dataDurability,omitempty"`
}

// SynchronousMethod is how synchronous standbys are counted.
// +kubebuilder:validation:Enum=Any;First
type SynchronousMethod string

// The synchronous methods.
const (
	SynchronousAny   SynchronousMethod = "Any"
	SynchronousFirst SynchronousMethod = "First"
)

// DataDurability says what happens when too few standbys can confirm.
// +kubebuilder:validation:Enum=Required;Preferred
type DataDurability string

// The data durabilities.
const (
	DataDurabilityRequired  DataDurability = "Required"
	DataDurabilityPreferred DataDurability = "Preferred"
)

// TLSMode says whether the server requires TLS.
// +kubebuilder:validation:Enum=Required;Disabled
type TLSMode string

const (
	// TLSModeRequired: the server refuses TCP connections without TLS; the
	// credentials Secret carries ca.crt and a uri with sslmode=verify-full.
	TLSModeRequired TLSMode = "Required"
	// TLSModeDisabled: no certificate, plaintext connections.
	TLSModeDisabled TLSMode = "Disabled"
)

// TLSSpec configures the server's TLS.
//
// +kubebuilder:validation:XValidation:rule="!has(self.issuerRef) || !has(self.mode) || self.mode != 'Disabled'",message="spec.tls.issuerRef cannot be set with spec.tls.mode Disabled: remove one of them"
type TLSSpec struct {
	// Mode is Required (the server refuses TCP connections without TLS)
	// or Disabled (plaintext). Unset means Required, except on a Database
	// created before dbkeeper had TLS, which keeps plaintext until Mode is
	// set (turning it on restarts the server, and its clients must then use
	// TLS).
	// +optional
	Mode TLSMode `json:"mode,omitempty"`

	// IssuerRef names a cert-manager issuer that issues and renews the
	// server certificate; unset, dbkeeper issues it from a CA of the
	// Database's own (Secret <name>-ca).
	// +optional
	IssuerRef *IssuerReference `json:"issuerRef,omitempty"`

	// CARotationOverlap is how long each half of a rotation of the
	// Database's CA (annotation database.dbkeeper.io/rotate-ca) lasts:
	// first the new CA is trusted beside the old one, so that clients take
	// the two-CA ca.crt before the server presents a certificate of the new
	// one; then the server presents it while the old CA is still trusted.
	// Longer than your clients take to read ca.crt again (the kubelet
	// updates a mounted Secret within about a minute). Default 24h.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="spec.tls.caRotationOverlap must be at least 1m"
	// +optional
	CARotationOverlap *metav1.Duration `json:"caRotationOverlap,omitempty"`
}

// IssuerReference names a cert-manager Issuer or ClusterIssuer.
type IssuerReference struct {
	// Name is the issuer's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`

	// Kind is Issuer (in the Database's namespace) or ClusterIssuer.
	// +kubebuilder:default=Issuer
	// +kubebuilder:validation:Enum=Issuer;ClusterIssuer
	// +optional
	Kind string `json:"kind,omitempty"`

	// Group is the issuer's API group.
	// +kubebuilder:default=cert-manager.io
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Group string `json:"group,omitempty"`
}

// BootstrapSpec says where a new Database's data comes from: a logical
// dump (fromBackup) or a point-in-time recovery from a WAL archive
// (recovery), exactly one of them.
//
// +kubebuilder:validation:XValidation:rule="has(self.fromBackup) != has(self.recovery)",message="spec.bootstrap needs exactly one of fromBackup (a logical dump) and recovery (a point-in-time recovery from an archive)"
type BootstrapSpec struct {
	// FromBackup restores a dump from the backup volume of a Database in the
	// same namespace (which may be this one's own, Retained predecessor).
	// +optional
	FromBackup *BootstrapFromBackup `json:"fromBackup,omitempty"`

	// Recovery restores a base backup and replays archived WAL up to a
	// target (point-in-time recovery), from another Database's archive or
	// from a repository path in an object store. The new Database then
	// archives into a path of its own, never into the source's; clients
	// cannot connect until the recovery has reached its target and the
	// server was promoted.
	// +optional
	Recovery *BootstrapRecovery `json:"recovery,omitempty"`
}

// BootstrapRecovery is a point-in-time recovery: where the archive is and
// how far to replay it.
//
// +kubebuilder:validation:XValidation:rule="has(self.database) != has(self.objectStore)",message="spec.bootstrap.recovery needs exactly one source: database (a Database's archive) or objectStore (a repository path, such as one whose Database is gone)"
// +kubebuilder:validation:XValidation:rule="!has(self.namespace) || has(self.database)",message="spec.bootstrap.recovery.namespace names the namespace of spec.bootstrap.recovery.database: set database too"
type BootstrapRecovery struct {
	// Database is the Database whose archive (status.backup.repositoryPath
	// in its object store) is restored; it must consent (see namespace).
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	Database string `json:"database,omitempty"`

	// Namespace is the source Database's namespace, empty for this one's.
	// The source must consent, in this namespace too: its annotation
	// database.dbkeeper.io/restore-allowed-namespaces lists this namespace
	// (or "*"). The object store's credentials Secret (the source's
	// spec.backup.objectStore.credentialsSecret, same name) and CA Secret
	// must exist in this Database's namespace too.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace,omitempty"`

	// ObjectStore is the repository to restore from when no Database
	// describes it any more: path is the whole repository path, as the
	// source's status.backup.repositoryPath showed it.
	// +optional
	ObjectStore *ObjectStoreSpec `json:"objectStore,omitempty"`

	// Target is how far to replay; empty: to the end of the archive.
	// +optional
	Target *RecoveryTarget `json:"target,omitempty"`
}

// RecoveryTarget is the point a recovery stops at (at most one of its
// fields; none: the end of the archive). The server replays every
// transaction committed at or before the target, on the timeline that
// was current at the target, and is then promoted.
//
// +kubebuilder:validation:XValidation:rule="(has(self.time) ? 1 : 0) + (has(self.lsn) ? 1 : 0) + (has(self.xid) ? 1 : 0) + (has(self.name) ? 1 : 0) <= 1",message="spec.bootstrap.recovery.target takes at most one of time, lsn, xid and name"
type RecoveryTarget struct {
	// Time is a commit time (RFC 3339, fractions of a second allowed, such
	// as 2026-12-05T14:02:00.250Z): every transaction committed at or
	// before it is kept, none after.
	// +optional
	// +kubebuilder:validation:Format=date-time
	// +kubebuilder:validation:MaxLength=40
	Time string `json:"time,omitempty"`

	// LSN is a WAL position, such as 0/3000060: recovery stops at it
	// (inclusive).
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$`
	LSN string `json:"lsn,omitempty"`

	// XID is a transaction id: recovery stops after its commit.
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9]{1,20}$`
	XID string `json:"xid,omitempty"`

	// Name is a restore point created with pg_create_restore_point().
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[-A-Za-z0-9_.:]+$`
	Name string `json:"name,omitempty"`
}

// ObjectStoreSpec is an S3-compatible object store holding a pgBackRest
// repository: the WAL archive and the base backups. It is reached over
// HTTPS only (pgBackRest's S3 client speaks nothing else), its
// certificate verified with the system's roots or with caSecret's.
type ObjectStoreSpec struct {
	// Endpoint is the store's host name (or IP address) and optional port,
	// such as s3.eu-west-1.amazonaws.com or minio.storage.svc:9000.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?(:[0-9]{1,5})?$`
	Endpoint string `json:"endpoint"`

	// Bucket is the bucket; it must exist.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9][-a-z0-9.]*[a-z0-9]$`
	Bucket string `json:"bucket"`

	// Path is the prefix under which repositories live. Each Database
	// archives under <path>/<namespace>/<name>/<uid> (its
	// status.backup.repositoryPath), a path no other Database ever
	// writes. For a recovery source, path is the whole repository path.
	// +kubebuilder:default="/dbkeeper"
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^/[-A-Za-z0-9_./]*$`
	// +optional
	Path string `json:"path,omitempty"`

	// Region is the store's region (us-east-1 for stores that ignore it).
	// +kubebuilder:default=us-east-1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[-a-z0-9]+$`
	// +optional
	Region string `json:"region,omitempty"`

	// URIStyle is how the bucket is addressed: Path (https://endpoint/bucket,
	// what most self-hosted stores need) or Host (https://bucket.endpoint).
	// +kubebuilder:default=Path
	// +kubebuilder:validation:Enum=Path;Host
	// +optional
	URIStyle string `json:"uriStyle,omitempty"`

	// CredentialsSecret names a Secret in the Database's namespace with the
	// keys accessKeyId and secretAccessKey. A change of its values is used
	// from the next archived segment on, without restarting PostgreSQL.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	CredentialsSecret string `json:"credentialsSecret"`

	// CASecret names a Secret in the Database's namespace whose key ca.crt
	// holds the CA bundle (PEM) that verifies the store's certificate;
	// empty: the image's system roots.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	CASecret string `json:"caSecret,omitempty"`

	// EncryptionSecret names a Secret in the Database's namespace whose key
	// passphrase encrypts the repository at rest (pgBackRest's
	// aes-256-cbc). It cannot change once the repository exists; losing
	// the passphrase loses the backups.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="encryptionSecret is immutable: the repository was encrypted with its passphrase"
	EncryptionSecret string `json:"encryptionSecret,omitempty"`
}

// BootstrapFromBackup names a dump to restore.
type BootstrapFromBackup struct {
	// Database is the Database of this namespace whose backup volume
	// (<database>-backup) holds the dump. Another Database that exists
	// must consent: its annotation
	// database.dbkeeper.io/restore-allowed-namespaces lists this namespace
	// (or "*"). This Database's own name (a Retained predecessor) and a
	// Database that no longer exists (its Retained backup volume) need no
	// consent. The restore logs in as this Database's application role.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	Database string `json:"database"`

	// File is a dump file name in that volume, such as
	// orders-20261202T030000Z.dump, or "latest" for the newest.
	// +kubebuilder:default=latest
	// +kubebuilder:validation:Pattern=`^(latest|[a-z0-9][-a-z0-9]*-[0-9]{8}T[0-9]{6}Z\.dump)$`
	// +optional
	File string `json:"file,omitempty"`
}

// StorageSpec is a volume request.
//
// +kubebuilder:validation:XValidation:rule="has(self.storageClassName) == has(oldSelf.storageClassName)",message="storageClassName cannot be added or removed after creation: volumes already exist in the class they were created with"
type StorageSpec struct {
	// Size is the requested capacity. It may grow (when the storage class
	// allows volume expansion) but never shrink.
	// +kubebuilder:default="10Gi"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="size must be greater than zero"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity(string(oldSelf))) >= 0",message="size may only grow: a volume cannot be shrunk"
	Size *resource.Quantity `json:"size,omitempty"`

	// StorageClassName is the StorageClass of the volume; empty uses the
	// cluster's default class. It cannot change after creation.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="storageClassName is immutable: volumes cannot move between storage classes"
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// CredentialsSpec names the Secret with the application's credentials.
//
// +kubebuilder:validation:XValidation:rule="has(self.secretName) == has(oldSelf.secretName)",message="spec.credentials.secretName cannot be added or removed after creation: the data directory was initialised with the first credentials"
type CredentialsSpec struct {
	// SecretName names an existing Secret in the Database's namespace with
	// the keys username and password (and optionally database). dbkeeper
	// reads it and never modifies it; it creates the role and its database
	// and sets the role's password on the server whenever the Secret's
	// password changes. When empty, dbkeeper generates <name>-credentials
	// once and keeps it. It may not be <name>-superuser.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.credentials.secretName is immutable: the data directory was initialised with these credentials"
	SecretName string `json:"secretName,omitempty"`
}

// ServiceSpec shapes the client Service.
type ServiceSpec struct {
	// Type is the client Service's type.
	// +kubebuilder:default=ClusterIP
	// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer
	Type corev1.ServiceType `json:"type,omitempty"`

	// Annotations are added to the client Service, for example to configure
	// a cloud load balancer. Keys are qualified names ([prefix/]name).
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$') && size(k.split('/')[size(k.split('/')) - 1]) <= 63 && (size(k.split('/')) == 1 || size(k.split('/')[0]) <= 253))",message="spec.service.annotations: each key must be a qualified name, [prefix/]name, as Kubernetes requires of annotation keys: name at most 63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter or digit; prefix a DNS subdomain"
	Annotations map[string]string `json:"annotations,omitempty"`
}

// NetworkPolicySpec says who may connect to the Database's pods. The
// NetworkPolicy dbkeeper keeps for them admits, on PostgreSQL's port, the
// pods of AllowFrom (by default every pod of the Database's namespace),
// the Database's own pods (its standbys, backup and restore Jobs) and the
// manager; on the agent's port only the Database's own pods and the
// manager. It has effect only where the cluster's network enforces
// NetworkPolicies.
type NetworkPolicySpec struct {
	// Enabled keeps the NetworkPolicy; false removes it (for a cluster
	// without a NetworkPolicy engine, or to manage one yourself). Unset
	// means true.
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// AllowFrom are the peers that may connect to PostgreSQL's port
	// besides the Database's own pods and the manager, as a
	// NetworkPolicy's ingress "from": pods by label, namespaces by label,
	// or address blocks. Empty allows every pod of the Database's
	// namespace.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	AllowFrom []networkingv1.NetworkPolicyPeer `json:"allowFrom,omitempty"`
}

// NetworkPolicyEnabled reports whether spec.networkPolicy.enabled is true
// or unset.
func (s DatabaseSpec) NetworkPolicyEnabled() bool {
	return s.NetworkPolicy.Enabled == nil || *s.NetworkPolicy.Enabled
}

// BackupSpec configures the scheduled backups.
// +kubebuilder:validation:XValidation:rule="!has(self.verification) || has(self.objectStore) || !has(self.volumeRepository) || self.volumeRepository == 'Enabled'",message="spec.backup.verification needs a repository: spec.backup.objectStore, or the repository on the backup volume (spec.backup.volumeRepository unset or Enabled), and spec.backup.volumeRepository is Disabled"
// +kubebuilder:validation:XValidation:rule="!has(self.objectStore) || !has(self.volumeRepository) || self.volumeRepository != 'Enabled'",message="spec.backup.volumeRepository Enabled and spec.backup.objectStore exclude each other: the archive goes to one repository"
type BackupSpec struct {
	// Schedule is the cron schedule of the backups: five fields (minute hour
	// day-of-month month day-of-week) or a macro such as @daily.
	// +kubebuilder:default="0 3 * * *"
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|[0-9*/,?LW#A-Za-z-]+( +[0-9*/,?LW#A-Za-z-]+){4})$')",message="schedule must be a cron expression of five fields (minute hour day-of-month month day-of-week), such as \"0 3 * * *\", or a macro such as @daily"
	// +kubebuilder:validation:XValidation:rule="self.startsWith('@') || size(self.split(' ').filter(f, f != '')) != 5 || self.split(' ').filter(f, f != '')[0].matches('^([*]|[?]|[0-5]?[0-9](-[0-5]?[0-9])?)(/0*[1-9][0-9]*)?(,([*]|[?]|[0-5]?[0-9](-[0-5]?[0-9])?)(/0*[1-9][0-9]*)?)*$')",message="the minute field (number 1) of spec.backup.schedule must be 0-59, *, or a list, range or step of those (such as 1,15 or 9-17/2)"
	// +kubebuilder:validation:XValidation:rule="self.startsWith('@') || size(self.split(' ').filter(f, f != '')) != 5 || self.split(' ').filter(f, f != '')[1].matches('^([*]|[?]|([01]?[0-9]|2[0-3])(-([01]?[0-9]|2[0-3]))?)(/0*[1-9][0-9]*)?(,([*]|[?]|([01]?[0-9]|2[0-3])(-([01]?[0-9]|2[0-3]))?)(/0*[1-9][0-9]*)?)*$')",message="the hour field (number 2) of spec.backup.schedule must be 0-23, *, or a list, range or step of those (such as 1,15 or 9-17/2)"
	// +kubebuilder:validation:XValidation:rule="self.startsWith('@') || size(self.split(' ').filter(f, f != '')) != 5 || self.split(' ').filter(f, f != '')[2].matches('^([*]|[?]|(0?[1-9]|[12][0-9]|3[01])(-(0?[1-9]|[12][0-9]|3[01]))?)(/0*[1-9][0-9]*)?(,([*]|[?]|(0?[1-9]|[12][0-9]|3[01])(-(0?[1-9]|[12][0-9]|3[01]))?)(/0*[1-9][0-9]*)?)*$')",message="the day-of-month field (number 3) of spec.backup.schedule must be 1-31, *, or a list, range or step of those (such as 1,15 or 9-17/2)"
	// +kubebuilder:validation:XValidation:rule="self.startsWith('@') || size(self.split(' ').filter(f, f != '')) != 5 || self.split(' ').filter(f, f != '')[3].matches('^([*]|[?]|(0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec))(-(0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)))?)(/0*[1-9][0-9]*)?(,([*]|[?]|(0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec))(-(0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)))?)(/0*[1-9][0-9]*)?)*$')",message="the month field (number 4) of spec.backup.schedule must be 1-12 or JAN-DEC, *, or a list, range or step of those (such as 1,15 or 9-17/2)"
	// +kubebuilder:validation:XValidation:rule="self.startsWith('@') || size(self.split(' ').filter(f, f != '')) != 5 || self.split(' ').filter(f, f != '')[4].matches('^([*]|[?]|([0-6]|(?i:sun|mon|tue|wed|thu|fri|sat))(-([0-6]|(?i:sun|mon|tue|wed|thu|fri|sat)))?)(/0*[1-9][0-9]*)?(,([*]|[?]|([0-6]|(?i:sun|mon|tue|wed|thu|fri|sat))(-([0-6]|(?i:sun|mon|tue|wed|thu|fri|sat)))?)(/0*[1-9][0-9]*)?)*$')",message="the day-of-week field (number 5) of spec.backup.schedule must be 0-6 or SUN-SAT, *, or a list, range or step of those (such as 1,15 or 9-17/2)"
	Schedule string `json:"schedule,omitempty"`

	// Suspend stops new scheduled backups; existing backups are kept.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// BeforeDelete runs a final backup Job when the Database is deleted
	// (under the Delete and Retain policies) and deletes nothing until it
	// succeeds. A failed final backup keeps the Database terminating with
	// Deleting=False/FinalBackupFailed: delete the failed Job to retry, or
	// set this to false to delete without it.
	// +optional
	BeforeDelete bool `json:"beforeDelete,omitempty"`

	// Retention is the number of newest dumps kept in the backup volume.
	// +kubebuilder:default=7
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Retention int32 `json:"retention,omitempty"`

	// MaxAge is how old the last successful backup may be before BackupReady
	// turns False with reason BackupStale.
	// +kubebuilder:default="26h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="maxAge must be a positive duration such as 26h"
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`

	// Storage is the backup volume, shared by all dumps of the Database.
	// +kubebuilder:default={size: "20Gi"}
	Storage StorageSpec `json:"storage,omitempty"`

	// ObjectStore, when set, makes the backups physical and continuous:
	// every WAL segment is archived as soon as it is complete (or after
	// archiveTimeout), base backups run on schedule and on demand, and a
	// new Database can recover to any point within recoveryWindow. They
	// survive the loss of the cluster. Without it, backups are the logical
	// dumps in the backup volume. pgBackRest does the work
	// (docs/design/backup.md).
	// +optional
	ObjectStore *ObjectStoreSpec `json:"objectStore,omitempty"`

	// VolumeRepository says whether a Database without an object store
	// keeps the same continuous archive and base backups in a repository
	// on its backup volume (beside the dumps, which stop being scheduled):
	// point-in-time recovery within the cluster. An S3 server of the
	// Database's own (<name>-repository, the manager's image running
	// versitygw) serves it with the Database's certificate, so it needs
	// TLS. This copy lives on the backup volume: it does not survive
	// losing the cluster or the volume's storage (spec.backup.objectStore
	// does).
	//
	// Unset means Enabled, except on a Database made before this default,
	// which keeps its dumps until this is set (an upgrade does not move
	// it). It takes effect with TLS on and without an object store;
	// otherwise the dumps go on. Disabled keeps the dumps alone.
	// +kubebuilder:validation:Enum=Enabled;Disabled
	// +optional
	VolumeRepository string `json:"volumeRepository,omitempty"`

	// RecoveryWindow is how far back a point-in-time recovery must remain
	// possible, in days or hours (such as 14d or 36h): expiry keeps the
	// newest base backup that ended before the window and every WAL
	// segment after it, and removes what is older.
	// +kubebuilder:default="7d"
	// +kubebuilder:validation:Pattern=`^[1-9][0-9]{0,3}[dh]$`
	// +optional
	RecoveryWindow string `json:"recoveryWindow,omitempty"`

	// ArchiveTimeout bounds how long a quiet primary's last commits wait
	// to be archived (PostgreSQL's archive_timeout): at most this much of
	// the latest writes is lost with the cluster. The archive counts as
	// stale when it has not advanced for archiveTimeout plus a margin
	// while the primary wrote.
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s') && duration(self) <= duration('24h')",message="archiveTimeout must be between 10s and 24h"
	// +optional
	ArchiveTimeout *metav1.Duration `json:"archiveTimeout,omitempty"`

	// Verification restores the newest base backup and the WAL archived
	// since into a throwaway pod on a schedule (weekly by default), starts
	// PostgreSQL on it, checks it with pg_amcheck and counts the rows of
	// the application database; status.backup.lastVerification and
	// BackupReady (reason VerificationFailed) say what it found. It never
	// touches the live instances nor writes into the repository. It needs
	// a repository (objectStore, or volumeRepository Enabled); the
	// backup-verify-now annotation runs one on demand.
	// +optional
	Verification *BackupVerificationSpec `json:"verification,omitempty"`
}

// The values of spec.backup.volumeRepository.
const (
	VolumeRepositoryEnabled  = "Enabled"
	VolumeRepositoryDisabled = "Disabled"
)

// BackupVerificationSpec is when verification restores run and what they
// may use.
type BackupVerificationSpec struct {
	// Schedule is the cron schedule of the verifications (five fields or
	// a macro such as @weekly); the default is Sundays at 05:00.
	// +kubebuilder:default="0 5 * * 0"
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|[0-9*/,?LW#A-Za-z-]+( +[0-9*/,?LW#A-Za-z-]+){4})$')",message="verification.schedule must be a cron expression of five fields (minute hour day-of-month month day-of-week), such as \"0 5 * * 0\", or a macro such as @weekly"
	// +optional
	Schedule string `json:"schedule,omitempty"`

	// Suspend stops scheduled verifications; the annotation still runs
	// one.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// Resources of the verification pod's PostgreSQL. The default requests
	// 100m CPU and 256Mi of memory and limits memory to 1Gi.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// ScratchSize bounds the volume (an emptyDir) the backup is restored
	// into; the default is spec.storage.size. A backup larger than it
	// fails the verification.
	// +optional
	ScratchSize *resource.Quantity `json:"scratchSize,omitempty"`

	// Timeout bounds one verification, restore and replay included.
	// +kubebuilder:default="2h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="verification.timeout must be at least 1m"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// Phase is a one-word summary of a Database for humans, derived from the
// Ready condition. Programs should read the conditions instead.
// +kubebuilder:validation:Enum=Pending;Progressing;Ready;Degraded;Paused;Deleting
type Phase string

// The phases of a Database.
const (
	PhasePending     Phase = "Pending"
	PhaseProgressing Phase = "Progressing"
	PhaseReady       Phase = "Ready"
	PhaseDegraded    Phase = "Degraded"
	PhasePaused      Phase = "Paused"
	PhaseDeleting    Phase = "Deleting"
)

// DatabaseStatus is the observed state of a Database. Each field is written
// by exactly one of dbkeeper's controllers.
type DatabaseStatus struct {
	// ObservedGeneration is the generation that every enabled controller has
	// reconciled; written by the readiness controller.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase summarises the Ready condition for humans.
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// Conditions holds one condition per facet (StatefulSetReady,
	// ServiceReady, CredentialsReady, BackupReady, TLSReady,
	// ReplicationReady, ConfigurationReady, RolesReady, ExtensionsReady,
	// Deleting) and the derived Ready condition.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// Endpoint is the host:port clients connect to.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// CredentialsSecret names the Secret with the credentials in use.
	//
	// Deprecated: read credentials.secret; this field is kept for one
	// release and then removed.
	// +optional
	CredentialsSecret string `json:"credentialsSecret,omitempty"`

	// Credentials says which Secrets hold the Database's credentials and
	// which version of the application's Secret the server has applied;
	// written by the secret controller.
	// +optional
	Credentials *CredentialsStatus `json:"credentials,omitempty"`

	// Replicas is the number of engine pods that exist.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// ReadyReplicas is the number of engine pods that are ready.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`

	// Selector is the label selector of the engine pods, for the scale
	// subresource.
	// +optional
	Selector string `json:"selector,omitempty"`

	// Backup is what dbkeeper knows of the last backups.
	// +optional
	Backup *BackupStatus `json:"backup,omitempty"`

	// Configuration is what the instances did with
	// spec.postgresql.parameters.
	// +optional
	Configuration *ConfigurationStatus `json:"configuration,omitempty"`

	// Roles lists the roles and databases of spec.roles and
	// spec.databases on the server, and those that left the spec and
	// were left as they are; written by the roles controller.
	// +optional
	Roles *RolesStatus `json:"roles,omitempty"`

	// Deletion says what deleting the Database would remove and keep under
	// the current deletion policy.
	// +optional
	Deletion *DeletionStatus `json:"deletion,omitempty"`

	// TLS is the server certificate in use; written by the tls controller.
	// +optional
	TLS *TLSStatus `json:"tls,omitempty"`

	// Replication is the replication topology: which instance is the
	// primary, which one should be, and what each instance reports;
	// written by the replication controller.
	// +optional
	Replication *ReplicationStatus `json:"replication,omitempty"`
}

// ReplicationStatus is the topology of a Database's instances, as the
// replication controller learnt it from their agents.
type ReplicationStatus struct {
	// CurrentPrimary is the instance (pod) that is the primary: the only
	// one the read-write Service selects.
	// +optional
	CurrentPrimary string `json:"currentPrimary,omitempty"`

	// TargetPrimary is the instance that should be the primary. It differs
	// from CurrentPrimary while a switchover runs.
	// +optional
	TargetPrimary string `json:"targetPrimary,omitempty"`

	// SwitchoverLSN is the old primary's shutdown checkpoint during a
	// switchover: the target is promoted only once it replayed up to it.
	// +optional
	SwitchoverLSN string `json:"switchoverLSN,omitempty"`

	// SystemID is the PostgreSQL system identifier every instance shares.
	// +optional
	SystemID string `json:"systemID,omitempty"`

	// PrimaryLostSince is when the replication controller first found the
	// current primary unavailable; a failover starts once
	// spec.highAvailability.failoverDelay has passed. Empty while the
	// primary is available.
	// +optional
	PrimaryLostSince *metav1.Time `json:"primaryLostSince,omitempty"`

	// LastFailover is the running or the last failover.
	// +optional
	LastFailover *FailoverStatus `json:"lastFailover,omitempty"`

	// Synchronous is the synchronous replication the primary runs with.
	// +optional
	Synchronous *SynchronousStatus `json:"synchronous,omitempty"`

	// Instances lists each instance with its role and positions, in
	// ordinal order.
	// +optional
	// +listType=map
	// +listMapKey=name
	Instances []InstanceStatus `json:"instances,omitempty"`

	// MajorUpgrade is the running or the last in-place major upgrade
	// (spec.version raised).
	// +optional
	MajorUpgrade *MajorUpgradeStatus `json:"majorUpgrade,omitempty"`
}

// MajorUpgradePhase is how far an in-place major upgrade got.
// +kubebuilder:validation:Enum=Running;Succeeded;Failed;RolledBack
type MajorUpgradePhase string

// The phases of an in-place major upgrade.
const (
	// MajorUpgradeRunning: the instances restart on the new major's image
	// and the primary runs pg_upgrade; no failover meanwhile.
	MajorUpgradeRunning MajorUpgradePhase = "Running"
	// MajorUpgradeSucceeded: the primary runs the new major; the standbys
	// are cloned from it again.
	MajorUpgradeSucceeded MajorUpgradePhase = "Succeeded"
	// MajorUpgradeFailed: a check or pg_upgrade failed; every instance
	// serves the old major with its data as it was. Message says why.
	// spec.version may go back to From.
	MajorUpgradeFailed MajorUpgradePhase = "Failed"
	// MajorUpgradeRolledBack: spec.version went back to From after a
	// failure.
	MajorUpgradeRolledBack MajorUpgradePhase = "RolledBack"
)

// MajorUpgradeStatus is an in-place major upgrade: pg_upgrade on the
// primary's volume, the standbys cloned again from it.
type MajorUpgradeStatus struct {
	// From and To are the majors.
	From string `json:"from"`
	To   string `json:"to"`
	// Phase is how far it got.
	Phase MajorUpgradePhase `json:"phase"`
	// Primary is the instance whose data directory is upgraded.
	Primary string `json:"primary"`
	// Message says the step running, what failed, or what was done.
	// +optional
	Message string `json:"message,omitempty"`
	// StartedAt is when the first instance restarted for it; FinishedAt
	// when it succeeded or failed.
	StartedAt metav1.Time `json:"startedAt"`
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
}

// FailoverStatus is a failover: the promotion of a standby because the
// primary was lost.
type FailoverStatus struct {
	// From is the lost primary, To the promoted standby.
	From string `json:"from"`
	To   string `json:"to"`

	// Reason says how the primary was lost.
	Reason string `json:"reason"`

	// StartedAt is when the standby was chosen; FinishedAt when it
	// accepted writes.
	StartedAt metav1.Time `json:"startedAt"`
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// AbortedAt is when the failover was abandoned before its target was
	// promoted: the lost primary came back holding the primary lease and
	// stayed the primary, so nothing was discarded (Reason says why).
	// +optional
	AbortedAt *metav1.Time `json:"abortedAt,omitempty"`

	// FromLSN is the lost primary's last WAL position dbkeeper saw;
	// PromotedLSN what the promoted standby had received.
	// +optional
	FromLSN string `json:"fromLSN,omitempty"`
	// +optional
	PromotedLSN string `json:"promotedLSN,omitempty"`

	// LostBytes is FromLSN minus PromotedLSN when positive: WAL the lost
	// primary had (at least) and the promoted standby lacked. With
	// Required synchronous replication it is WAL of no acknowledged
	// commit.
	// +optional
	LostBytes int64 `json:"lostBytes,omitempty"`

	// DiscardedTransactions is how many committed transactions of the old
	// primary's timeline the promoted standby never had, counted in the
	// old primary's own WAL when it rejoined (pg_rewind); unset until it
	// rejoins.
	// +optional
	DiscardedTransactions *int64 `json:"discardedTransactions,omitempty"`
}

// SynchronousStatus is the primary's synchronous_standby_names and what
// it means.
type SynchronousStatus struct {
	// StandbyNames is synchronous_standby_names as set on the primary,
	// empty when commits wait for no standby.
	// +optional
	StandbyNames string `json:"standbyNames,omitempty"`

	// Standbys are the instances named, Number how many of them confirm
	// each commit.
	// +optional
	Standbys []string `json:"standbys,omitempty"`
	// +optional
	Number int32 `json:"number,omitempty"`

	// Degraded says fewer standbys than spec.highAvailability.synchronous
	// asks for are available: with Preferred, commits wait for fewer (or
	// none); with Required, writes wait.
	// +optional
	Degraded bool `json:"degraded,omitempty"`
}

// InstanceStatus is one instance as its agent reported it.
type InstanceStatus struct {
	// Name is the instance's pod.
	Name string `json:"name"`

	// Role is primary or replica, empty before the instance has data.
	// +optional
	Role string `json:"role,omitempty"`

	// State is what the instance's agent is doing (Waiting,
	// Bootstrapping, Starting, Running, Demoting, Promoting, Failed), or
	// Unreachable when the agent did not answer.
	// +optional
	State string `json:"state,omitempty"`

	// Ready says the instance's server accepts connections.
	// +optional
	Ready bool `json:"ready,omitempty"`

	// Timeline is the timeline the instance is on.
	// +optional
	Timeline int64 `json:"timeline,omitempty"`

	// CurrentLSN is the primary's current WAL position.
	// +optional
	CurrentLSN string `json:"currentLSN,omitempty"`

	// ReceivedLSN is the last WAL position a standby received.
	// +optional
	ReceivedLSN string `json:"receivedLSN,omitempty"`

	// ReplayedLSN is the last WAL position a standby replayed.
	// +optional
	ReplayedLSN string `json:"replayedLSN,omitempty"`

	// LagBytes is how far a standby's replayed position is behind the
	// primary's current one.
	// +optional
	LagBytes *int64 `json:"lagBytes,omitempty"`

	// WALReceiver is a standby's WAL receiver status ("streaming" when
	// healthy).
	// +optional
	WALReceiver string `json:"walReceiver,omitempty"`

	// Message says what is wrong with the instance, empty when nothing is.
	// +optional
	Message string `json:"message,omitempty"`
}

// TLSStatus describes the server certificate: the one in its Secret and
// the one the server serves. Nothing in it is secret.
type TLSStatus struct {
	// SecretName names the kubernetes.io/tls Secret with the server
	// certificate, its key and the CA certificate (ca.crt).
	// +optional
	SecretName string `json:"secretName,omitempty"`

	// NotAfter is when the Secret's certificate expires.
	// +optional
	NotAfter *metav1.Time `json:"notAfter,omitempty"`

	// RenewalTime is when the certificate is renewed (two thirds of its
	// lifetime for the certificates dbkeeper issues).
	// +optional
	RenewalTime *metav1.Time `json:"renewalTime,omitempty"`

	// SerialNumber is the Secret's certificate's serial number, in hex.
	// +optional
	SerialNumber string `json:"serialNumber,omitempty"`

	// ServedSerialNumber is the serial number of the certificate the
	// server presented when dbkeeper last looked, in hex; it differs from
	// SerialNumber while a renewed certificate waits to be loaded.
	// +optional
	ServedSerialNumber string `json:"servedSerialNumber,omitempty"`

	// CARotation is the last rotation of the Database's CA
	// (annotation database.dbkeeper.io/rotate-ca).
	// +optional
	CARotation *CARotationStatus `json:"caRotation,omitempty"`
}

// CARotationPhase is where a rotation of the Database's CA is.
// +kubebuilder:validation:Enum=Trusting;Serving;Done
type CARotationPhase string

// The CA rotation phases.
const (
	// CARotationTrusting: ca.crt holds the old and the new CA; the server
	// and the client certificates still come from the old one.
	CARotationTrusting CARotationPhase = "Trusting"
	// CARotationServing: the server and the client certificates come from
	// the new CA; ca.crt still holds the old one too.
	CARotationServing CARotationPhase = "Serving"
	// CARotationDone: ca.crt holds the new CA only.
	CARotationDone CARotationPhase = "Done"
)

// CARotationStatus is a rotation of the Database's CA.
type CARotationStatus struct {
	// Token is the value of the rotate-ca annotation this rotation ran for.
	Token string `json:"token"`
	// Phase is where the rotation is.
	Phase CARotationPhase `json:"phase"`
	// Since is when the phase began.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// NextPhaseAt is when the next phase begins (none once Done).
	// +optional
	NextPhaseAt *metav1.Time `json:"nextPhaseAt,omitempty"`
}

// BackupStatus is the truth about the last backups, read from the backup
// CronJob and its Jobs.
type BackupStatus struct {
	// LastScheduleTime is when the CronJob last started a backup Job.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`

	// LastSuccessfulTime is when the last successful backup Job completed.
	// +optional
	LastSuccessfulTime *metav1.Time `json:"lastSuccessfulTime,omitempty"`

	// LastFailedTime is when the last backup Job failed.
	// +optional
	LastFailedTime *metav1.Time `json:"lastFailedTime,omitempty"`

	// LastJob names the most recent backup Job.
	// +optional
	LastJob string `json:"lastJob,omitempty"`

	// LastFailedJob names the most recent failed backup Job.
	// +optional
	LastFailedJob string `json:"lastFailedJob,omitempty"`

	// LastFailureMessage says why the last failed backup Job failed.
	// +optional
	LastFailureMessage string `json:"lastFailureMessage,omitempty"`

	// RestoredFrom is the dump spec.bootstrap restored, as
	// "<database>/<file>"; set once the restore Job succeeded, after which
	// it never runs again.
	// +optional
	RestoredFrom string `json:"restoredFrom,omitempty"`

	// LastOnDemandToken is the value of the backup-now annotation that
	// dbkeeper last started a backup Job for; each token runs once.
	// +optional
	LastOnDemandToken string `json:"lastOnDemandToken,omitempty"`

	// RepositoryPath is where, in spec.backup.objectStore's bucket, this
	// Database archives: <path>/<namespace>/<name>/<uid>. Write it down:
	// it is what a recovery names once the Database is gone.
	// +optional
	RepositoryPath string `json:"repositoryPath,omitempty"`

	// Archive is the WAL archive's state, as the primary reports it.
	// +optional
	Archive *ArchiveStatus `json:"archive,omitempty"`

	// LastBaseBackup is the newest base backup in the repository.
	// +optional
	LastBaseBackup *BaseBackupStatus `json:"lastBaseBackup,omitempty"`

	// BaseBackups counts the base backups in the repository.
	// +optional
	BaseBackups int32 `json:"baseBackups,omitempty"`

	// FirstRecoverabilityPoint is the earliest time a point-in-time
	// recovery can reach: the end of the oldest base backup.
	// +optional
	FirstRecoverabilityPoint *metav1.Time `json:"firstRecoverabilityPoint,omitempty"`

	// LastScheduledBaseBackup is when dbkeeper last asked for a scheduled
	// base backup.
	// +optional
	LastScheduledBaseBackup *metav1.Time `json:"lastScheduledBaseBackup,omitempty"`

	// Recovery is how far spec.bootstrap.recovery went.
	// +optional
	Recovery *RecoveryStatus `json:"recovery,omitempty"`

	// LastVerification is the newest verification restore
	// (spec.backup.verification): running while it has no finished time.
	// +optional
	LastVerification *VerificationStatus `json:"lastVerification,omitempty"`

	// LastScheduledVerification is when dbkeeper last started a scheduled
	// verification.
	// +optional
	LastScheduledVerification *metav1.Time `json:"lastScheduledVerification,omitempty"`

	// LastVerifyToken is the value of the backup-verify-now annotation
	// dbkeeper last started a verification for; each token runs once.
	// +optional
	LastVerifyToken string `json:"lastVerifyToken,omitempty"`
}

// VerificationStatus is what a verification restore found.
type VerificationStatus struct {
	// ID names the verification: why it ran and when.
	ID string `json:"id"`
	// Job is the verification Job.
	// +optional
	Job string `json:"job,omitempty"`
	// Started is when its Job was created.
	// +optional
	Started *metav1.Time `json:"started,omitempty"`
	// Finished is when it ended; unset while it runs.
	// +optional
	Finished *metav1.Time `json:"finished,omitempty"`
	// Succeeded says the backup restored, replayed the archive to its end
	// and checked clean.
	// +optional
	Succeeded bool `json:"succeeded,omitempty"`
	// Backup is the label of the base backup restored.
	// +optional
	Backup string `json:"backup,omitempty"`
	// ReplayedLSN is how far the archive replayed.
	// +optional
	ReplayedLSN string `json:"replayedLSN,omitempty"`
	// LatestCommitTime is the commit time of the last transaction
	// replayed: what a disaster recovery would have restored.
	// +optional
	LatestCommitTime *metav1.Time `json:"latestCommitTime,omitempty"`
	// Database, Tables and Rows: the ordinary tables of the application
	// database and their rows, counted exactly in the restored copy.
	// +optional
	Database string `json:"database,omitempty"`
	// +optional
	Tables int32 `json:"tables,omitempty"`
	// +optional
	Rows int64 `json:"rows,omitempty"`
	// Message says what failed: the restore (a corrupted file in the
	// store), the replay, or pg_amcheck's findings.
	// +optional
	Message string `json:"message,omitempty"`
}

// ArchiveStatus is the WAL archive as the primary's agent sees it
// (pg_stat_archiver, pgBackRest's own errors, the volume).
type ArchiveStatus struct {
	// LastArchivedWAL is the last segment archived.
	// +optional
	LastArchivedWAL string `json:"lastArchivedWAL,omitempty"`
	// LastArchivedTime is when it was archived.
	// +optional
	LastArchivedTime *metav1.Time `json:"lastArchivedTime,omitempty"`
	// LastFailedWAL is the last segment whose archiving failed.
	// +optional
	LastFailedWAL string `json:"lastFailedWAL,omitempty"`
	// LastFailedTime is when it failed.
	// +optional
	LastFailedTime *metav1.Time `json:"lastFailedTime,omitempty"`
	// LastFailure is pgBackRest's message for that failure (the store's
	// own error: credentials, bucket, TLS, unreachable).
	// +optional
	LastFailure string `json:"lastFailure,omitempty"`
	// PendingWALBytes is the size of pg_wal on the primary: it grows while
	// archiving fails.
	// +optional
	PendingWALBytes int64 `json:"pendingWALBytes,omitempty"`
	// VolumeAvailableBytes is the free space left on the primary's data
	// volume.
	// +optional
	VolumeAvailableBytes int64 `json:"volumeAvailableBytes,omitempty"`
	// LastExpiryTime is when the primary last removed what
	// spec.backup.recoveryWindow no longer needs (or found nothing to).
	// +optional
	LastExpiryTime *metav1.Time `json:"lastExpiryTime,omitempty"`
	// ExpiryFailure is pgBackRest's message when the last expiry failed:
	// the repository then keeps growing.
	// +optional
	ExpiryFailure string `json:"expiryFailure,omitempty"`
}

// BaseBackupStatus is one base backup.
type BaseBackupStatus struct {
	// Label is pgBackRest's name of the backup.
	Label string `json:"label"`
	// Type is full, diff or incr.
	// +optional
	Type string `json:"type,omitempty"`
	// Started and Finished are when it ran.
	// +optional
	Started *metav1.Time `json:"started,omitempty"`
	// +optional
	Finished *metav1.Time `json:"finished,omitempty"`
	// Size is the database's size the backup holds, in bytes.
	// +optional
	Size int64 `json:"size,omitempty"`
	// RepositorySize is what it takes in the repository (compressed,
	// incremental), in bytes.
	// +optional
	RepositorySize int64 `json:"repositorySize,omitempty"`
	// Instance is the pod whose files it copied: a streaming standby's
	// when there is one, else the primary's.
	// +optional
	Instance string `json:"instance,omitempty"`
	// Note says where the files came from and, when from the primary,
	// why not from a standby (none streams, TLS off, the standby's
	// pgBackRest server refused, ...).
	// +optional
	Note string `json:"note,omitempty"`
	// StartLSN and StopLSN bound the WAL the backup needs to be
	// consistent.
	// +optional
	StartLSN string `json:"startLSN,omitempty"`
	// +optional
	StopLSN string `json:"stopLSN,omitempty"`
}

// RecoveryStatus is how far a point-in-time recovery went.
type RecoveryStatus struct {
	// Source is the repository restored from, as bucket/path.
	// +optional
	Source string `json:"source,omitempty"`
	// Target says where recovery was asked to stop.
	// +optional
	Target string `json:"target,omitempty"`
	// Finished is when the server was promoted after reaching the target.
	// +optional
	Finished *metav1.Time `json:"finished,omitempty"`
	// ReplayedLSN is how far replay went.
	// +optional
	ReplayedLSN string `json:"replayedLSN,omitempty"`
}

// CredentialsStatus names the Secrets with a Database's credentials and the
// version of the application's Secret whose password the server has.
type CredentialsStatus struct {
	// Secret names the Secret with the application's credentials (the
	// generated <name>-credentials or spec.credentials.secretName).
	// +optional
	Secret string `json:"secret,omitempty"`

	// SuperuserSecret names the Secret with the superuser's credentials
	// (<name>-superuser), used only by dbkeeper and restore Jobs; never
	// give it to an application.
	// +optional
	SuperuserSecret string `json:"superuserSecret,omitempty"`

	// AppliedResourceVersion is the resourceVersion of the Secret named in
	// secret whose password the server has: when it equals the Secret's
	// metadata.resourceVersion, a rotation has reached the server.
	// +optional
	AppliedResourceVersion string `json:"appliedResourceVersion,omitempty"`
}

// DeletionStatus says what deleting the Database would do under the current
// spec.deletionPolicy, before anyone deletes it.
type DeletionStatus struct {
	// Policy is the deletion policy the lists below are for.
	Policy DeletionPolicy `json:"policy,omitempty"`

	// Deletes lists what deletion removes, as "Kind/name".
	// +optional
	// +listType=atomic
	Deletes []string `json:"deletes,omitempty"`

	// Keeps lists what deletion leaves in place (with its owner reference
	// removed), as "Kind/name".
	// +optional
	// +listType=atomic
	Keeps []string `json:"keeps,omitempty"`

	// Blocked is true when the policy refuses deletion (DoNotDelete).
	// +optional
	Blocked bool `json:"blocked,omitempty"`
}

// DatabaseList is a list of Databases.
//
// +kubebuilder:object:root=true
type DatabaseList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the Databases.
	Items []Database `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Database{}, &DatabaseList{})
}
