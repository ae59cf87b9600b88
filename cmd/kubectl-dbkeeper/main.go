// Command kubectl-dbkeeper is the kubectl plugin of dbkeeper
// (`kubectl dbkeeper status orders`): put it on $PATH (make plugin builds
// bin/kubectl-dbkeeper). It reads and annotates Databases with the
// current kubeconfig; internal/plugin has the commands. Run as
// kubectl_complete-dbkeeper (a link to it, which make plugin makes
// beside it), it answers kubectl's shell completion of the plugin.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"

	"golang.org/x/term"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/plugin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	// kubectl's plugin completion runs kubectl_complete-dbkeeper ARGS...
	if strings.HasPrefix(filepath.Base(os.Args[0]), "kubectl_complete-") {
		fmt.Print(plugin.Complete(ctx, kubectlOutput, os.Args[1:]))
		stop()
		return
	}
	err := run(ctx, os.Args[1:])
	stop()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		// kubectl (psql) said why already; its status is the plugin's
		os.Exit(exit.ExitCode())
	case errors.Is(err, plugin.ErrUsage):
		fmt.Fprintln(os.Stderr, "error:", err)
		fmt.Fprint(os.Stderr, "\n"+plugin.Usage)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "__complete" {
		fmt.Print(plugin.Complete(ctx, kubectlOutput, args[1:]))
		return nil
	}
	g, args, err := plugin.ParseGlobals(args)
	if err != nil {
		return err
	}
	if g.Help || len(args) == 0 || args[0] == "help" {
		if len(args) == 0 && !g.Help {
			return fmt.Errorf("%w: no command", plugin.ErrUsage)
		}
		fmt.Print(plugin.Usage)
		return nil
	}
	if err := plugin.Check(args); err != nil {
		return err
	}
	var kubectlFlags []string
	if g.Kubeconfig != "" {
		kubectlFlags = append(kubectlFlags, "--kubeconfig="+g.Kubeconfig)
	}
	if g.Context != "" {
		kubectlFlags = append(kubectlFlags, "--context="+g.Context)
	}
	env := plugin.Env{Out: os.Stdout, Err: os.Stderr, Exec: attached, TTY: isTerminal(os.Stdin), KubectlFlags: kubectlFlags,
		Kubectl: kubectlOutput}
	if plugin.Offline(args) {
		return plugin.Run(ctx, env, args)
	}

	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = g.Kubeconfig
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: g.Context})
	cfg, err := loader.ClientConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig: %w", err)
	}
	env.Namespace = g.Namespace
	if env.Namespace == "" {
		if env.Namespace, _, err = loader.Namespace(); err != nil {
			return fmt.Errorf("the kubeconfig's namespace: %w", err)
		}
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := dbv1.AddToScheme(scheme); err != nil {
		return err
	}
	if env.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return fmt.Errorf("connecting to the API server: %w", err)
	}
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("connecting to the API server: %w", err)
	}
	env.Logs = func(ctx context.Context, namespace, pod string, opts *corev1.PodLogOptions) ([]byte, error) {
		return clientset.CoreV1().Pods(namespace).GetLogs(pod, opts).DoRaw(ctx)
	}
	return plugin.Run(ctx, env, args)
}

// attached runs argv on this terminal.
func attached(ctx context.Context, argv []string) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	return cmd.Run()
}

// kubectlOutput runs kubectl with args and returns its standard output.
func kubectlOutput(ctx context.Context, args []string) ([]byte, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "kubectl", args...)
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
	}
	return out.Bytes(), nil
}

// isTerminal says f is a terminal (a character device is not enough:
// /dev/null is one, and kubectl then refuses to attach).
func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }
