package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/dbkeeper/dbkeeper/internal/controller"
	"github.com/dbkeeper/dbkeeper/internal/manager"
)

// flags are the manager's command-line flags, bound by bindFlags; the
// reference docs/reference/manager-flags.md is generated from the same
// flag set (TestFlagReference).
type flags struct {
	options         manager.Options
	controllers     string
	watchNamespaces string
	engineRegistry  string
	engineImages    listFlag
	tlsServerProbe  *bool
	agentTakeover   *bool
	managerLabels   *string
	zap             zap.Options
}

// bindFlags defines every flag of the manager on fs.
func bindFlags(fs *flag.FlagSet) *flags {
	f := &flags{}
	fs.StringVar(&f.controllers, "controllers", "*", fmt.Sprintf(
		"Controllers to run: * for all, a comma-separated list to run only those, -name to switch one off (\"*,-backup\"). Known: %s.",
		strings.Join(controller.Names(), ", ")))
	fs.StringVar(&f.watchNamespaces, "watch-namespaces", "", "Comma-separated namespaces to watch; empty watches every namespace.")
	fs.StringVar(&f.engineRegistry, "engine-registry", "",
		"Registry and repository path that replace those of every built-in engine image, keeping the image's name and tag "+
			"(mirror.example.com/dockerhub runs mirror.example.com/dockerhub/postgres:17.6); empty keeps the built-in images.")
	fs.Var(&f.engineImages, "engine-images",
		"Comma-separated <engine>:<version>=<image> entries (postgres:17=registry.example.com/postgres:17.6) that replace the image of one "+
			"engine version, winning over --engine-registry; may be repeated. A Database's spec.image still wins over both.")
	fs.DurationVar(&f.options.TLSCertDuration, "tls-cert-duration", 90*24*time.Hour,
		"Lifetime of the server certificates dbkeeper issues from a Database's own CA; each is renewed at two thirds of it and the server reloads it without a restart.")
	fs.StringVar(&f.options.AgentImage, "agent-image", "",
		"The manager's own image: every engine pod's init container runs its /manager copy-self to bring the instance agent into the pod. Required.")
	f.agentTakeover = fs.Bool("agent-takeover", true,
		"Bring the agents of running engine pods to this build in place: each is sent the manager's executable and replaces itself with it, "+
			"PostgreSQL running on (standbys first, one at a time); false: a pod runs a new agent only once it restarts, and a new build "+
			"rolls every Database out (one switchover each, a restart for a single instance).")
	f.tlsServerProbe = fs.Bool("tls-server-probe", true,
		"Connect to each engine pod to learn which certificate it serves, and reload it after a renewal; false for nodes whose pods cannot be reached (a renewed certificate is then loaded only when the server restarts).")
	fs.BoolVar(&f.options.NetworkPolicies, "network-policies", true,
		"Keep a NetworkPolicy for every Database (unless its spec.networkPolicy.enabled is false): PostgreSQL's port from its namespace "+
			"(or spec.networkPolicy.allowFrom), its own pods and the manager, the agent's port from its own pods and the manager. "+
			"False for clusters without a NetworkPolicy engine.")
	fs.StringVar(&f.options.Manager.Namespace, "manager-namespace", os.Getenv("POD_NAMESPACE"),
		"The manager's namespace, which the Databases' NetworkPolicies admit (with --manager-pod-labels); defaults to $POD_NAMESPACE.")
	fs.BoolVar(&f.options.AllowPrivilegedRoles, "allow-privileged-roles", false,
		"Let the roles of a Database's spec.roles be SUPERUSER, REPLICATION or BYPASSRLS; without it the roles controller keeps them without "+
			"those attributes and RolesReady says RoleRefused, so that writing a Database is not enough to get a superuser.")
	f.managerLabels = fs.String("manager-pod-labels", "app.kubernetes.io/name=dbkeeper,app.kubernetes.io/component=manager",
		"Comma-separated key=value labels of the manager's pods, which the Databases' NetworkPolicies admit.")
	fs.IntVar(&f.options.MaxConcurrentReconciles, "max-concurrent-reconciles", 2, "Databases each controller reconciles at once.")
	fs.StringVar(&f.options.MetricsBindAddress, "metrics-bind-address", ":8080", "Address of the /metrics endpoint; 0 disables it.")
	fs.BoolVar(&f.options.MetricsSecure, "metrics-secure", false,
		"Serve /metrics over HTTPS, only to callers with a Kubernetes bearer token allowed to get the non-resource URL /metrics "+
			"(TokenReview and SubjectAccessReview; the manager needs create on both).")
	fs.StringVar(&f.options.MetricsCertDir, "metrics-cert-dir", "",
		"Directory with tls.crt and tls.key serving the secure /metrics (a mounted cert-manager Secret), reloaded when they change; "+
			"empty means a self-signed certificate made at start-up. Needs --metrics-secure.")
	fs.DurationVar(&f.options.InstanceMetricsInterval, "instance-metrics-interval", 15*time.Second,
		"How often the manager scrapes the PostgreSQL metrics of every instance from its agent (behind the agents' token, 4 at a time) "+
			"and serves the last values on its own /metrics as dbkeeper_postgres_*, labelled namespace, database and pod, "+
			"with dbkeeper_instance_scrape_up; only the leader scrapes. 0 turns it off, and so does --metrics-bind-address=0.")
	fs.StringVar(&f.options.HealthProbeBindAddress, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints; 0 disables them.")
	fs.BoolVar(&f.options.LeaderElection, "leader-elect", false, "Elect a leader, so that only one replica of the manager is active.")
	fs.StringVar(&f.options.LeaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader-election lease; empty means the manager's own.")
	fs.StringVar(&f.options.LeaderElectionID, "leader-election-id", "dbkeeper.database.dbkeeper.io", "Name of the leader-election lease.")
	fs.DurationVar(&f.options.LeaseDuration, "leader-election-lease-duration", 15*time.Second, "How long a follower waits for a leader that stopped renewing the lease before taking it.")
	fs.DurationVar(&f.options.RenewDeadline, "leader-election-renew-deadline", 10*time.Second, "How long the leader tries to renew the lease before it stops leading.")
	fs.DurationVar(&f.options.RetryPeriod, "leader-election-retry-period", 2*time.Second, "The pause between attempts to acquire or renew the lease.")
	fs.DurationVar(&f.options.SyncPeriod, "sync-period", 0, "How often every Database is reconciled without an event; 0 keeps controller-runtime's default of 10h.")
	f.zap = zap.Options{TimeEncoder: zapcore.ISO8601TimeEncoder}
	f.zap.BindFlags(fs)
	fs.String("kubeconfig", "", "Path to a kubeconfig; empty uses the in-cluster config or $KUBECONFIG.")
	return f
}
