// Command manager runs dbkeeper: one manager process hosting the narrow
// controllers selected by --controllers. The same binary is the in-pod
// agent: `manager copy-self DIR` (the engine pod's init container) and
// `manager agent [flags] -- COMMAND...` (PID 1 of the engine container;
// internal/agent).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/zapr"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/dbkeeper/dbkeeper/internal/controller"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/logging"
	"github.com/dbkeeper/dbkeeper/internal/manager"
)

func main() {
	if ok, err := subcommand(os.Args[1:]); ok {
		if err != nil {
			fmt.Fprintln(os.Stderr, "error:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	var (
		o               manager.Options
		controllers     string
		watchNamespaces string
		engineRegistry  string
		engineImages    listFlag
	)
	fs.StringVar(&controllers, "controllers", "*", fmt.Sprintf(
		"Controllers to run: * for all, a comma-separated list to run only those, -name to switch one off (\"*,-backup\"). Known: %s.",
		strings.Join(controller.Names(), ", ")))
	fs.StringVar(&watchNamespaces, "watch-namespaces", "", "Comma-separated namespaces to watch; empty watches every namespace.")
	fs.StringVar(&engineRegistry, "engine-registry", "",
		"Registry and repository path that replace those of every built-in engine image, keeping the image's name and tag "+
			"(mirror.example.com/dockerhub runs mirror.example.com/dockerhub/postgres:17.6); empty keeps the built-in images.")
	fs.Var(&engineImages, "engine-images",
		"Comma-separated <engine>:<version>=<image> entries (postgres:17=registry.example.com/postgres:17.6) that replace the image of one "+
			"engine version, winning over --engine-registry; may be repeated. A Database's spec.image still wins over both.")
	fs.DurationVar(&o.TLSCertDuration, "tls-cert-duration", 90*24*time.Hour,
		"Lifetime of the server certificates dbkeeper issues from a Database's own CA; each is renewed at two thirds of it and the server reloads it without a restart.")
	fs.StringVar(&o.AgentImage, "agent-image", "",
		"The manager's own image: every engine pod's init container runs its /manager copy-self to bring the instance agent into the pod. Required.")
	tlsServerProbe := fs.Bool("tls-server-probe", true,
		"Connect to each engine pod to learn which certificate it serves, and reload it after a renewal; false for nodes whose pods cannot be reached (a renewed certificate is then loaded only when the server restarts).")
	fs.BoolVar(&o.NetworkPolicies, "network-policies", true,
		"Keep a NetworkPolicy for every Database (unless its spec.networkPolicy.enabled is false): PostgreSQL's port from its namespace "+
			"(or spec.networkPolicy.allowFrom), its own pods and the manager, the agent's port from its own pods and the manager. "+
			"False for clusters without a NetworkPolicy engine.")
	fs.StringVar(&o.Manager.Namespace, "manager-namespace", os.Getenv("POD_NAMESPACE"),
		"The manager's namespace, which the Databases' NetworkPolicies admit (with --manager-pod-labels); defaults to $POD_NAMESPACE.")
	managerLabels := fs.String("manager-pod-labels", "app.kubernetes.io/name=dbkeeper,app.kubernetes.io/component=manager",
		"Comma-separated key=value labels of the manager's pods, which the Databases' NetworkPolicies admit.")
	fs.IntVar(&o.MaxConcurrentReconciles, "max-concurrent-reconciles", 2, "Databases each controller reconciles at once.")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", ":8080", "Address of the /metrics endpoint; 0 disables it.")
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", false,
		"Serve /metrics over HTTPS, only to callers with a Kubernetes bearer token allowed to get the non-resource URL /metrics "+
			"(TokenReview and SubjectAccessReview; the manager needs create on both).")
	fs.StringVar(&o.MetricsCertDir, "metrics-cert-dir", "",
		"Directory with tls.crt and tls.key serving the secure /metrics (a mounted cert-manager Secret), reloaded when they change; "+
			"empty means a self-signed certificate made at start-up. Needs --metrics-secure.")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints; 0 disables them.")
	fs.BoolVar(&o.LeaderElection, "leader-elect", false, "Elect a leader, so that only one replica of the manager is active.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader-election lease; empty means the manager's own.")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", "dbkeeper.database.dbkeeper.io", "Name of the leader-election lease.")
	fs.DurationVar(&o.LeaseDuration, "leader-election-lease-duration", 15*time.Second, "How long a follower waits for a leader that stopped renewing the lease before taking it.")
	fs.DurationVar(&o.RenewDeadline, "leader-election-renew-deadline", 10*time.Second, "How long the leader tries to renew the lease before it stops leading.")
	fs.DurationVar(&o.RetryPeriod, "leader-election-retry-period", 2*time.Second, "The pause between attempts to acquire or renew the lease.")
	fs.DurationVar(&o.SyncPeriod, "sync-period", 0, "How often every Database is reconciled without an event; 0 keeps controller-runtime's default of 10h.")
	zapOpts := zap.Options{TimeEncoder: zapcore.ISO8601TimeEncoder}
	zapOpts.BindFlags(fs)
	fs.String("kubeconfig", "", "Path to a kubeconfig; empty uses the in-cluster config or $KUBECONFIG.")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}

	set, err := controller.ParseControllers(controllers, controller.Names())
	if err != nil {
		return err
	}
	o.Controllers = set
	if o.Engines, err = engine.NewCatalog(engineRegistry, engineImages.String()); err != nil {
		return err
	}
	o.SkipTLSServerProbe = !*tlsServerProbe
	if o.Manager.PodLabels, err = labels.ConvertSelectorToLabelsMap(*managerLabels); err != nil {
		return fmt.Errorf("invalid --manager-pod-labels %q: %w", *managerLabels, err)
	}
	if o.AgentImage == "" {
		return errors.New("--agent-image is required: the manager's own image, which the engine pods copy the instance agent from")
	}
	if o.TLSCertDuration < time.Minute {
		return fmt.Errorf("invalid --tls-cert-duration %s: must be at least 1m", o.TLSCertDuration)
	}
	if err := checkMetricsCertDir(o.MetricsSecure, o.MetricsCertDir); err != nil {
		return err
	}
	for _, ns := range strings.Split(watchNamespaces, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			o.WatchNamespaces = append(o.WatchNamespaces, ns)
		}
	}

	logger := logging.Capped(zapr.NewLogger(zap.NewRaw(zap.UseFlagOptions(&zapOpts))))
	ctrl.SetLogger(logger)
	logger.Info("Starting dbkeeper",
		"controllers", set.Names(controller.Names()),
		"watchNamespaces", o.WatchNamespaces,
		"leaderElection", o.LeaderElection,
		"metricsSecure", o.MetricsSecure,
		"engineImages", o.Engines.Images())

	if kc := fs.Lookup("kubeconfig").Value.String(); kc != "" {
		os.Setenv("KUBECONFIG", kc)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	mgr, err := manager.New(cfg, o)
	if err != nil {
		return err
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		return fmt.Errorf("running manager: %w", err)
	}
	return nil
}

// checkMetricsCertDir refuses a --metrics-cert-dir that would be ignored:
// without --metrics-secure, or without both files in it (controller-runtime
// would quietly serve a self-signed certificate instead).
func checkMetricsCertDir(secure bool, dir string) error {
	if dir == "" {
		return nil
	}
	if !secure {
		return errors.New("--metrics-cert-dir needs --metrics-secure")
	}
	for _, name := range []string{"tls.crt", "tls.key"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("invalid --metrics-cert-dir %q: %w", dir, err)
		}
	}
	return nil
}

// listFlag is a string flag that may be repeated: each value is appended,
// comma-separated, to the ones before.
type listFlag []string

// String implements flag.Value.
func (l *listFlag) String() string { return strings.Join(*l, ",") }

// Set implements flag.Value.
func (l *listFlag) Set(v string) error {
	if strings.TrimSpace(v) != "" {
		*l = append(*l, v)
	}
	return nil
}
