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
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/dbkeeper/dbkeeper/internal/controller"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/logging"
	"github.com/dbkeeper/dbkeeper/internal/manager"
)

func main() {
	if ok, err := subcommand(os.Args[1:]); ok {
		if err != nil {
			if !errors.As(err, new(loggedError)) {
				fmt.Fprintln(os.Stderr, "error:", err)
			}
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
	f := bindFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	o := f.options

	set, err := controller.ParseControllers(f.controllers, controller.Names())
	if err != nil {
		return err
	}
	o.Controllers = set
	if o.Engines, err = engine.NewCatalog(f.engineRegistry, f.engineImages.String()); err != nil {
		return err
	}
	o.SkipTLSServerProbe = !*f.tlsServerProbe
	if *f.agentTakeover {
		self, err := instance.SelfBinary()
		if err != nil {
			return fmt.Errorf("--agent-takeover: %w", err)
		}
		o.AgentBinary = &self
	}
	if o.Manager.PodLabels, err = labels.ConvertSelectorToLabelsMap(*f.managerLabels); err != nil {
		return fmt.Errorf("invalid --manager-pod-labels %q: %w", *f.managerLabels, err)
	}
	if o.AgentImage == "" {
		return errors.New("--agent-image is required: the manager's own image, which the engine pods copy the instance agent from")
	}
	if o.TLSCertDuration < time.Minute {
		return fmt.Errorf("invalid --tls-cert-duration %s: must be at least 1m", o.TLSCertDuration)
	}
	if o.InstanceMetricsInterval < 0 || o.InstanceMetricsInterval > 0 && o.InstanceMetricsInterval < time.Second {
		return fmt.Errorf("invalid --instance-metrics-interval %s: must be 0 (off) or at least 1s", o.InstanceMetricsInterval)
	}
	if err := checkMetricsCertDir(o.MetricsSecure, o.MetricsCertDir); err != nil {
		return err
	}
	for _, ns := range strings.Split(f.watchNamespaces, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			o.WatchNamespaces = append(o.WatchNamespaces, ns)
		}
	}

	logger := logging.Capped(zapr.NewLogger(zap.NewRaw(zap.UseFlagOptions(&f.zap))))
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
