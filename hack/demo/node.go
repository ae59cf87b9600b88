package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/dbkeeper/dbkeeper/test/framework/cluster"
	"github.com/dbkeeper/dbkeeper/test/framework/realnode"
)

// nodeKind turns --node into a node kind: auto is real when a real node can
// run here, else fake, saying why.
func nodeKind(flag string) (cluster.NodeKind, error) {
	switch flag {
	case "real":
		return cluster.RealNode, nil
	case "fake":
		return cluster.FakeNode, nil
	case "auto":
		if err := realnode.Supported(); err != nil {
			fmt.Printf("demo: using the fake node (no containers): %v\n", err)
			return cluster.FakeNode, nil
		}
		return cluster.RealNode, nil
	}
	return "", fmt.Errorf("--node=%s: want real, fake or auto", flag)
}

// clientQuery runs psql in a pod as an application would: the PostgreSQL
// image, the connection URI from the Database's Secret, the client Service
// by its DNS name. It writes a row, reads the table back, and shows the
// pod's log with kubectl logs (the API server reads it from the kubelet).
func clientQuery(ctx context.Context, c *cluster.Cluster, kubectl func(...string) error) error {
	fmt.Println("\ndemo: a client pod runs psql through the Service orders.default.svc with the Secret's uri")
	start := time.Now()
	if _, err := runPsql(ctx, c, kubectl, "orders",
		"--command=select version(), (select ssl from pg_stat_ssl where pid = pg_backend_pid()) as tls",
		"--command=create table if not exists visits (id serial primary key, at timestamptz not null default now())",
		"--command=insert into visits default values",
		"--command=select count(*) as visits, max(at) as last_visit from visits"); err != nil {
		return err
	}
	fmt.Printf("demo: client query done in %s\n", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// runPsql runs psql with args in a pod <db>-client of namespace default (a
// new one each time), connected as the application of Database db: the
// uri and ca.crt of its Secret <db>-credentials, through its client
// Service. It waits for the pod to succeed, prints its log as kubectl logs
// shows it, and returns that log.
func runPsql(ctx context.Context, c *cluster.Cluster, kubectl func(...string) error, db string, args ...string) (string, error) {
	name := db + "-client"
	var command strings.Builder
	for _, a := range append([]string{"psql", "$(PGURI)", "--no-psqlrc", "--set=ON_ERROR_STOP=1"}, args...) {
		quoted, err := json.Marshal(a) // a JSON string is a YAML scalar
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&command, "    - %s\n", quoted)
	}
	pod := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %[1]s
  namespace: default
spec:
  restartPolicy: Never
  automountServiceAccountToken: false
  enableServiceLinks: false
  securityContext:
    runAsNonRoot: true
    runAsUser: 999
    runAsGroup: 999
    seccompProfile: {type: RuntimeDefault}
  containers:
  - name: psql
    image: %[2]s
    imagePullPolicy: IfNotPresent
    env:
    - name: PGURI
      valueFrom: {secretKeyRef: {name: %[3]s-credentials, key: uri}}
    - {name: PGCONNECT_TIMEOUT, value: "10"}
    # the uri says sslmode=verify-full: libpq verifies the server with the
    # Secret's ca.crt
    - {name: PGSSLROOTCERT, value: /etc/db-ca/ca.crt}
    volumeMounts:
    - {name: ca, mountPath: /etc/db-ca, readOnly: true}
    command:
%[4]s    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities: {drop: [ALL]}
  volumes:
  - name: ca
    secret: {secretName: %[3]s-credentials, items: [{key: ca.crt, path: ca.crt}]}
`, name, c.Images["postgres:17"], db, command.String())
	_ = kubectl("delete", "pod", "--namespace=default", name, "--ignore-not-found", "--wait=true")
	if err := kubectlStdin(ctx, c, pod, "apply", "-f", "-"); err != nil {
		return "", fmt.Errorf("creating the client pod %s: %w", name, err)
	}
	waitErr := kubectl("wait", "--namespace=default", "pod/"+name, "--for=jsonpath={.status.phase}=Succeeded", "--timeout=90s")
	fmt.Println("\n$ kubectl logs " + name)
	log, err := kubectlOutput(ctx, c, "logs", "--namespace=default", name)
	fmt.Print(log)
	if err != nil {
		return "", fmt.Errorf("reading the log of %s: %w", name, err)
	}
	if waitErr != nil {
		_ = kubectl("describe", "pod", "--namespace=default", name)
		return "", fmt.Errorf("the psql of %s did not succeed: %w", name, waitErr)
	}
	return log, nil
}

// kubectlStdin runs kubectl with stdin as its input.
func kubectlStdin(ctx context.Context, c *cluster.Cluster, stdin string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.Bin, "kubectl"), append([]string{"--kubeconfig=" + c.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

// kubectlOutput runs kubectl and returns what it writes to stdout; its
// stderr goes to the demo's.
func kubectlOutput(ctx context.Context, c *cluster.Cluster, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.Bin, "kubectl"), append([]string{"--kubeconfig=" + c.Kubeconfig}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	return string(out), err
}
