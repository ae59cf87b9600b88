// Command demo is `make demo`: it starts the local cluster of
// test/framework/cluster (on a real node of test/framework/realnode when
// it can: root and the packages of REAL-NODE.md; else on the fake node),
// runs the dbkeeper manager binary against it, applies config/samples,
// waits until the sample Database is Ready, shows it, on a real node runs
// a client query through the Database's Service and Secret and a
// point-in-time recovery from an S3 object store (pitr.go), and keeps
// everything running until Ctrl-C (or `make demo-down`), which tears it
// all down.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/dbkeeper/dbkeeper/test/framework"
	"github.com/dbkeeper/dbkeeper/test/framework/cluster"
	"github.com/dbkeeper/dbkeeper/test/framework/envtest"
	"github.com/dbkeeper/dbkeeper/test/framework/realnode"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	managerBin := flag.String("manager", "bin/manager", "the dbkeeper manager binary")
	stateDir := flag.String("dir", "bin/demo", "where the kubeconfig, the manager's log and the pid file go")
	timeout := flag.Duration("timeout", 3*time.Minute, "how long to wait for the sample to be Ready")
	nodeFlag := flag.String("node", "auto", "the node kind: real (kubelet and containers; needs root), fake (kwok), or auto (real when it can run here)")
	flag.Parse()
	started := time.Now()
	kind, err := nodeKind(*nodeFlag)
	if err != nil {
		return err
	}
	// The cluster's own controllers (the volume provisioner) have nothing
	// to say to a demo user.
	ctrl.SetLogger(logr.Discard())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root, err := envtest.RepoRoot()
	if err != nil {
		return err
	}
	state, err := filepath.Abs(*stateDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(state, 0o755); err != nil {
		return err
	}
	pidFile := filepath.Join(state, "demo.pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	defer os.Remove(pidFile)

	opts := cluster.Options{Progress: os.Stdout}
	if kind == cluster.RealNode {
		// The manager runs on the host, but the engine pods copy the
		// instance agent from its image (--agent-image).
		opts.Node = realnode.New(realnode.Options{Images: []string{cluster.ImagePause, "postgres:15", "postgres:17", cluster.ImageManager}})
	}
	c, err := cluster.Start(ctx, opts)
	if err != nil {
		return err
	}
	// The object store of the point-in-time recovery stops once the
	// cluster is down: no pod archives into it any more.
	stopStore := func() error { return nil }
	defer func() {
		fmt.Println("demo: tearing down")
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "demo: stopping the cluster:", err)
		}
		if err := stopStore(); err != nil {
			fmt.Fprintln(os.Stderr, "demo: stopping the object store:", err)
		}
	}()
	kubeconfig := filepath.Join(state, "kubeconfig")
	data, err := os.ReadFile(c.Kubeconfig)
	if err != nil {
		return err
	}
	if err := os.WriteFile(kubeconfig, data, 0o600); err != nil {
		return err
	}
	defer os.Remove(kubeconfig)

	mgr, managerLog, err := startManager(*managerBin, kubeconfig, state, c.EngineImages(), agentImage(c))
	if err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = mgr.Wait()
		close(exited)
	}()
	defer func() {
		_ = mgr.Process.Signal(syscall.SIGTERM)
		<-exited
	}()

	kubectl := func(args ...string) error {
		cmd := exec.CommandContext(ctx, filepath.Join(c.Bin, "kubectl"), append([]string{"--kubeconfig=" + kubeconfig}, args...)...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.Dir = root
		return cmd.Run()
	}
	fmt.Println("demo: applying config/samples")
	if err := kubectl("apply", "--namespace=default", "-k", "config/samples"); err != nil {
		return fmt.Errorf("applying the samples: %w", err)
	}
	fmt.Printf("demo: waiting up to %s for the sample to be Ready\n", *timeout)
	start := time.Now()
	if err := kubectl("wait", "--namespace=default", "--for=condition=Ready", "databases", "--all", "--timeout="+timeout.String()); err != nil {
		_ = kubectl("get", "databases", "-A", "-o", "wide")
		return fmt.Errorf("the sample did not become Ready (manager log: %s): %w", managerLog, err)
	}
	fmt.Printf("demo: Ready after %s\n\n$ kubectl get databases -o wide\n", time.Since(start).Round(100*time.Millisecond))
	_ = kubectl("get", "databases", "--namespace=default", "-o", "wide")
	// the plugin (make plugin), else what kubectl alone says
	if plugin := filepath.Join(root, "bin", "kubectl-dbkeeper"); fileExists(plugin) {
		fmt.Println("\n$ kubectl dbkeeper status orders")
		cmd := exec.CommandContext(ctx, plugin, "--kubeconfig="+kubeconfig, "--namespace=default", "status", "orders")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		_ = cmd.Run()
	} else {
		fmt.Println("\n$ kubectl describe database orders")
		_ = kubectl("describe", "database", "--namespace=default", "orders")
	}
	if c.Node == cluster.RealNode {
		if err := clientQuery(ctx, c, kubectl); err != nil {
			return err
		}
		store, endpoint, err := startObjectStore(ctx, c)
		if err != nil {
			return err
		}
		stopStore = store.Stop
		if err := pointInTimeRecovery(ctx, c, kubectl, store, endpoint); err != nil {
			return err
		}
	}
	fmt.Printf("\ndemo: %s node, everything up in %s\n", c.Node, time.Since(started).Round(100*time.Millisecond))

	fmt.Printf(`
The local cluster keeps running. In another shell:

  export KUBECONFIG=%s
  %s/kubectl get databases -o wide
  %s/kubectl get statefulsets,pods,services,pvc,secrets,cronjobs -l app.kubernetes.io/managed-by=dbkeeper
  PATH=%s:%s:$PATH kubectl dbkeeper status orders    # the plugin: status, switchover, backup, psql, ...

The manager logs to %s.
Ctrl-C here (or make demo-down) tears everything down.
`, kubeconfig, c.Bin, c.Bin, filepath.Join(root, "bin"), c.Bin, managerLog)
	select {
	case <-ctx.Done():
	case <-exited:
		return errors.New("the manager exited; see " + managerLog)
	}
	return nil
}

// startManager runs the manager binary against the cluster, with its
// endpoints on free loopback ports and its log in state/manager.log, and the
// engine images of a real node (--engine-images, when not empty) and the
// image the engine pods copy the agent from (--agent-image).
func startManager(bin, kubeconfig, state, engineImages, agentImage string) (*exec.Cmd, string, error) {
	metrics, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	health, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	logPath := filepath.Join(state, "manager.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, "", err
	}
	args := []string{"--kubeconfig=" + kubeconfig, "--metrics-bind-address=" + metrics,
		"--health-probe-bind-address=" + health, "--zap-log-level=debug", "--agent-image=" + agentImage}
	if engineImages != "" {
		args = append(args, "--engine-images="+engineImages)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = framework.SysProcAttr()
	fmt.Printf("demo: starting %s (metrics on http://%s/metrics)\n", bin, metrics)
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, "", fmt.Errorf("starting the manager: %w", err)
	}
	return cmd, logPath, nil
}

// agentImage is the manager image imported into a real node; a fake
// node's pods run nothing, so any reference does.
func agentImage(c *cluster.Cluster) string {
	if img := c.ManagerImage(); img != "" {
		return img
	}
	return "localhost/dbkeeper/manager:fake"
}

// freeAddr is a loopback address nobody listens on now.
func freeAddr() (string, error) {
	port, err := framework.FreePort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
