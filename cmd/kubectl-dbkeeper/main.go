// Command kubectl-dbkeeper is the kubectl plugin of dbkeeper
// (`kubectl dbkeeper status orders`): put it on $PATH (make plugin builds
// bin/kubectl-dbkeeper). It reads and annotates Databases with the
// current kubeconfig; internal/plugin has the commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/plugin"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		if errors.Is(err, plugin.ErrUsage) {
			fmt.Fprint(os.Stderr, "\n"+plugin.Usage)
			os.Exit(2)
		}
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("kubectl-dbkeeper", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, plugin.Usage) }
	namespace := fs.String("namespace", "", "The Databases' namespace (default: the kubeconfig context's).")
	fs.StringVar(namespace, "n", "", "Short for --namespace.")
	kubeconfig := fs.String("kubeconfig", "", "The kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", plugin.ErrUsage, err)
	}
	if err := plugin.Check(fs.Args()); err != nil {
		return err
	}
	if fs.Arg(0) == "help" {
		fmt.Print(plugin.Usage)
		return nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	cfg, err := loader.ClientConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig: %w", err)
	}
	ns := *namespace
	if ns == "" {
		if ns, _, err = loader.Namespace(); err != nil {
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
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("connecting to the API server: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return plugin.Run(ctx, plugin.Env{Client: c, Namespace: ns, Out: os.Stdout, Exec: attached}, fs.Args())
}

// attached runs argv on this terminal.
func attached(ctx context.Context, argv []string) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	return cmd.Run()
}
