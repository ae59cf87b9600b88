package resources

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
)

// LabelRestorePending is in the client Service's selector, and on no pod,
// while spec.bootstrap's restore has not finished: the Service then has no
// endpoints.
const LabelRestorePending = "database.dbkeeper.io/restore-pending"

// ClientService is the read-write Service clients connect to, of
// spec.service.type and with spec.service.annotations: it selects the
// engine pod the replication controller labelled the primary
// (dbv1.LabelRole), so it follows a switchover and never reaches a
// standby. Until spec.bootstrap's restore has finished (RestoreFinished)
// its selector matches no pod, so that no client reaches a database being
// filled, or one whose restore was refused; the selector is atomic, so
// applying the usual one later replaces it whole.
func ClientService(db *dbv1.Database, eng engine.Engine) *corev1ac.ServiceApplyConfiguration {
	svc := corev1ac.Service(ClientServiceName(db), db.Namespace).
		WithLabels(Labels(db, ComponentDatabase)).
		WithOwnerReferences(OwnerReference(db)).
		WithSpec(corev1ac.ServiceSpec().
			WithType(serviceType(db)).
			WithSelector(roleSelector(db, dbv1.RolePrimary)).
			WithPorts(servicePort(eng)))
	if len(db.Spec.Service.Annotations) > 0 {
		svc.WithAnnotations(db.Spec.Service.Annotations)
	}
	return svc
}

// ReadOnlyService is the read-only ClusterIP Service <name>-ro: it selects
// the engine pods labelled standbys (dbv1.LabelRole), and of those only
// the ready ones get endpoints, so reads spread over the hot standbys that
// accept connections; with no standby it has no endpoints. The
// replication controller keeps that label, during a switchover or a
// failover, on the standbys that still take read-only connections (only
// the instance being promoted or demoted leaves), so reads go on while
// the primary changes. It waits for
// spec.bootstrap's restore as ClientService does. spec.service shapes only
// the client Service: an external type or a load balancer's annotations
// are for the writers' entry point.
func ReadOnlyService(db *dbv1.Database, eng engine.Engine) *corev1ac.ServiceApplyConfiguration {
	return corev1ac.Service(ReadOnlyServiceName(db), db.Namespace).
		WithLabels(Labels(db, ComponentDatabase)).
		WithOwnerReferences(OwnerReference(db)).
		WithSpec(corev1ac.ServiceSpec().
			WithType(corev1.ServiceTypeClusterIP).
			WithSelector(roleSelector(db, dbv1.RoleReplica)).
			WithPorts(servicePort(eng)))
}

// roleSelector selects the engine pods of the role, or none while
// spec.bootstrap's restore has not finished.
func roleSelector(db *dbv1.Database, role string) map[string]string {
	selector := PodSelectorLabels(db)
	selector[dbv1.LabelRole] = role
	if !RestoreFinished(db) {
		selector[LabelRestorePending] = "true"
	}
	return selector
}

// HeadlessService is the StatefulSet's governing Service: it gives each pod a
// stable DNS name and publishes pods before they are ready, so peers can
// find each other during start-up and the restore Job reaches the server
// while the client Service is closed.
func HeadlessService(db *dbv1.Database, eng engine.Engine) *corev1ac.ServiceApplyConfiguration {
	return corev1ac.Service(HeadlessServiceName(db), db.Namespace).
		WithLabels(Labels(db, ComponentDatabase)).
		WithOwnerReferences(OwnerReference(db)).
		WithSpec(corev1ac.ServiceSpec().
			WithType(corev1.ServiceTypeClusterIP).
			WithClusterIP(corev1.ClusterIPNone).
			WithPublishNotReadyAddresses(true).
			WithSelector(PodSelectorLabels(db)).
			WithPorts(servicePort(eng)))
}

func serviceType(db *dbv1.Database) corev1.ServiceType {
	if db.Spec.Service.Type == "" {
		return corev1.ServiceTypeClusterIP
	}
	return db.Spec.Service.Type
}

func servicePort(eng engine.Engine) *corev1ac.ServicePortApplyConfiguration {
	return corev1ac.ServicePort().
		WithName(eng.PortName()).
		WithPort(eng.Port()).
		WithProtocol(corev1.ProtocolTCP).
		WithTargetPort(intstr.FromString(eng.PortName()))
}

// RestoreFinished reports whether the Database has no restore Job to wait
// for: it has no spec.bootstrap.fromBackup, or status.backup.restoredFrom
// says the restore Job succeeded. (A point-in-time recovery needs no
// gate: its server accepts no connection until it was promoted.)
func RestoreFinished(db *dbv1.Database) bool {
	return db.Spec.Bootstrap == nil || db.Spec.Bootstrap.FromBackup == nil ||
		(db.Status.Backup != nil && db.Status.Backup.RestoredFrom != "")
}
