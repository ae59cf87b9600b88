package cnpg

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/sqlconn"
)

const (
	// PostgresContainer is the instance pods' container: the instance
	// manager as PID 1 and PostgreSQL as its child (pkg/specs'
	// PostgresContainerName).
	PostgresContainer = "postgres"
	// PhaseHealthy is status.phase of a Cluster with nothing to do.
	PhaseHealthy = "Cluster in healthy state"
	// AppDatabase is the database the Cluster's initdb creates, owned by
	// the user of the same name.
	AppDatabase = "app"
	// postgresUID is the uid and gid of the project's PostgreSQL images
	// (images/build.sh, as the official image); CloudNativePG's default is
	// 26.
	postgresUID = 999
)

// ClusterGVK is CloudNativePG's Cluster kind.
var ClusterGVK = schema.GroupVersionKind{Group: "postgresql.cnpg.io", Version: "v1", Kind: "Cluster"}

// ClusterOptions describe a Cluster.
type ClusterOptions struct {
	Namespace, Name string
	// Instances is spec.instances: a primary and Instances-1 standbys.
	Instances int
	// ImageName is the PostgreSQL image, one of the project's
	// (images/build.sh): Debian's PostgreSQL, uid and gid 999, its tag
	// the major version.
	ImageName string
	// StorageClass and Size are each instance's volume's.
	StorageClass, Size string
	// Synchronous sets quorum synchronous replication as dbkeeper's
	// failover tests run theirs: method any, number 1, dataDurability
	// required (a commit waits for one standby, whatever happens).
	Synchronous bool
}

// ClusterObject is the Cluster o describes: an initdb bootstrap of
// AppDatabase owned by its user (whose Secret <name>-app the operator
// generates), the image taken as it is (postgresUID and postgresGID 999,
// imagePullPolicy IfNotPresent), failoverDelay 0 (the release's default,
// written out so that the comparison says it) and everything else at the
// release's defaults.
func ClusterObject(o ClusterOptions) *unstructured.Unstructured {
	spec := map[string]any{
		"instances":       int64(o.Instances),
		"imageName":       o.ImageName,
		"imagePullPolicy": string(corev1.PullIfNotPresent),
		"postgresUID":     int64(postgresUID),
		"postgresGID":     int64(postgresUID),
		"failoverDelay":   int64(0),
		"storage":         map[string]any{"storageClass": o.StorageClass, "size": o.Size},
		"bootstrap": map[string]any{
			"initdb": map[string]any{"database": AppDatabase, "owner": AppDatabase},
		},
	}
	if o.Synchronous {
		spec["postgresql"] = map[string]any{
			"synchronous": map[string]any{"method": "any", "number": int64(1), "dataDurability": "required"},
		}
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(ClusterGVK)
	u.SetNamespace(o.Namespace)
	u.SetName(o.Name)
	return u
}

// Cluster is a CloudNativePG Cluster, read through an API client.
type Cluster struct {
	Namespace, Name string
	// Instances is how many instances it runs.
	Instances int
	client    client.Client
}

// CreateCluster creates the Cluster o describes. The operator's webhooks
// may refuse calls for a moment after its Deployment became Available
// (its certificate is being published): such refusals are retried for a
// minute.
func CreateCluster(ctx context.Context, c client.Client, o ClusterOptions) (*Cluster, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		err := c.Create(ctx, ClusterObject(o))
		if err == nil {
			return &Cluster{Namespace: o.Namespace, Name: o.Name, Instances: o.Instances, client: c}, nil
		}
		if !strings.Contains(err.Error(), "failed calling webhook") || time.Now().After(deadline) {
			return nil, fmt.Errorf("creating CloudNativePG Cluster %s/%s: %w", o.Namespace, o.Name, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("creating CloudNativePG Cluster %s/%s: %w (last: %v)", o.Namespace, o.Name, ctx.Err(), err)
		case <-time.After(time.Second):
		}
	}
}

// WriteService is the Service that routes to the primary (<name>-rw).
func (cl *Cluster) WriteService() string { return cl.Name + "-rw" }

// AppSecret is the Secret the operator generates for the application's
// user (username, password, dbname, uri, ...).
func (cl *Cluster) AppSecret() string { return cl.Name + "-app" }

// CASecret is the Secret of the CA that signs the servers' certificates
// (ca.crt).
func (cl *Cluster) CASecret() string { return cl.Name + "-ca" }

// Status is the part of a Cluster's status the comparison reads.
type Status struct {
	Phase          string `json:"phase"`
	PhaseReason    string `json:"phaseReason"`
	Instances      int    `json:"instances"`
	ReadyInstances int    `json:"readyInstances"`
	// CurrentPrimary is the instance that is the primary; TargetPrimary
	// the one the operator wants to be (they differ during a failover
	// or switchover).
	CurrentPrimary string `json:"currentPrimary"`
	TargetPrimary  string `json:"targetPrimary"`
	// InstancesReportedState is what each instance's manager last
	// reported, by pod name.
	InstancesReportedState map[string]ReportedState `json:"instancesReportedState"`
	Conditions             []metav1.Condition       `json:"conditions"`
}

// ReportedState is one instance's last report.
type ReportedState struct {
	IsPrimary  bool `json:"isPrimary"`
	TimeLineID int  `json:"timeLineID"`
}

// Status reads the Cluster's status as it is now.
func (cl *Cluster) Status(ctx context.Context) (Status, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(ClusterGVK)
	if err := cl.client.Get(ctx, client.ObjectKey{Namespace: cl.Namespace, Name: cl.Name}, u); err != nil {
		return Status{}, fmt.Errorf("getting CloudNativePG Cluster %s/%s: %w", cl.Namespace, cl.Name, err)
	}
	return parseStatus(u)
}

// parseStatus reads the fields of Status from a Cluster.
func parseStatus(u *unstructured.Unstructured) (Status, error) {
	var s Status
	raw, _, _ := unstructured.NestedMap(u.Object, "status")
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &s); err != nil {
		return Status{}, fmt.Errorf("reading the status of CloudNativePG Cluster %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return s, nil
}

// Primary is the Cluster's current primary (status.currentPrimary), the
// name of its pod.
func (cl *Cluster) Primary(ctx context.Context) (string, error) {
	s, err := cl.Status(ctx)
	if err != nil {
		return "", err
	}
	if s.CurrentPrimary == "" {
		return "", fmt.Errorf("CloudNativePG Cluster %s/%s has no current primary yet (phase %q)", cl.Namespace, cl.Name, s.Phase)
	}
	return s.CurrentPrimary, nil
}

// Healthy says why a Cluster of instances is not settled, nil when it is:
// the operator calls it healthy and Ready, every instance is ready, the
// current primary is the target one, and the instances' own reports name
// that one primary.
func (s Status) Healthy(instances int) error {
	var why []string
	if s.Phase != PhaseHealthy {
		why = append(why, fmt.Sprintf("phase %q %s", s.Phase, s.PhaseReason))
	}
	if c := meta.FindStatusCondition(s.Conditions, "Ready"); c == nil || c.Status != metav1.ConditionTrue {
		why = append(why, fmt.Sprintf("condition Ready %v", c))
	}
	if s.ReadyInstances != instances {
		why = append(why, fmt.Sprintf("%d of %d instances ready", s.ReadyInstances, instances))
	}
	if s.CurrentPrimary == "" || s.CurrentPrimary != s.TargetPrimary {
		why = append(why, fmt.Sprintf("current primary %q, target %q", s.CurrentPrimary, s.TargetPrimary))
	}
	// (not their timelines: CloudNativePG reports a standby's from its
	// last checkpoint, which stays on the old timeline after a failover
	// until the standby's next restartpoint; the comparison checks
	// through the primary that every standby streams)
	var primaries []string
	for name, r := range s.InstancesReportedState {
		if r.IsPrimary {
			primaries = append(primaries, name)
		}
	}
	slices.Sort(primaries)
	if len(s.InstancesReportedState) != instances || len(primaries) != 1 || primaries[0] != s.CurrentPrimary {
		why = append(why, fmt.Sprintf("instances report primaries %v: %v", primaries, s.InstancesReportedState))
	}
	if len(why) > 0 {
		return errors.New(strings.Join(why, "; "))
	}
	return nil
}

// WaitHealthy waits up to timeout until the Cluster is healthy (see
// Status.Healthy) and returns its status; on timeout the error says what
// was last missing.
func (cl *Cluster) WaitHealthy(ctx context.Context, timeout time.Duration) (Status, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		s, err := cl.Status(ctx)
		if err == nil {
			if err = s.Healthy(cl.Instances); err == nil {
				return s, nil
			}
		}
		select {
		case <-ctx.Done():
			return s, fmt.Errorf("CloudNativePG Cluster %s/%s not healthy within %s: %w", cl.Namespace, cl.Name, timeout, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// AppTarget connects from the test process to the WriteService's
// ClusterIP as the application's user (AppSecret), to AppDatabase,
// verifying the server's certificate for <name>-rw.<namespace>.svc with
// the Cluster's CA: what dbtest.ServiceTarget is for a Database.
func (cl *Cluster) AppTarget(ctx context.Context) (sqlconn.Target, error) {
	svc := &corev1.Service{}
	if err := cl.client.Get(ctx, client.ObjectKey{Namespace: cl.Namespace, Name: cl.WriteService()}, svc); err != nil {
		return sqlconn.Target{}, fmt.Errorf("getting Service %s: %w", cl.WriteService(), err)
	}
	app, err := cl.secret(ctx, cl.AppSecret())
	if err != nil {
		return sqlconn.Target{}, err
	}
	ca, err := cl.secret(ctx, cl.CASecret())
	if err != nil {
		return sqlconn.Target{}, err
	}
	host := cl.WriteService() + "." + cl.Namespace + ".svc"
	cfg, err := pki.ClientConfig(ca["ca.crt"], host)
	if err != nil {
		return sqlconn.Target{}, fmt.Errorf("Secret %s, ca.crt: %w", cl.CASecret(), err)
	}
	if len(svc.Spec.Ports) == 0 {
		return sqlconn.Target{}, fmt.Errorf("Service %s has no port", cl.WriteService())
	}
	return sqlconn.Target{
		Host: svc.Spec.ClusterIP, Port: svc.Spec.Ports[0].Port,
		User: string(app["username"]), Password: string(app["password"]), Database: AppDatabase,
		TLS: cfg,
	}, nil
}

// secret reads a Secret of the Cluster's namespace.
func (cl *Cluster) secret(ctx context.Context, name string) (map[string][]byte, error) {
	s := &corev1.Secret{}
	if err := cl.client.Get(ctx, client.ObjectKey{Namespace: cl.Namespace, Name: name}, s); err != nil {
		return nil, fmt.Errorf("getting Secret %s: %w", name, err)
	}
	return s.Data, nil
}
