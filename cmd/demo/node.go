package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/dbkeeper/dbkeeper/test/framework/cluster"
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
		if err := cluster.RealNodeSupported(); err != nil {
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
	image := c.Images["postgres:17"]
	pod := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: orders-client
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
    image: %s
    imagePullPolicy: IfNotPresent
    env:
    - name: PGURI
      valueFrom: {secretKeyRef: {name: orders-credentials, key: uri}}
    - {name: PGCONNECT_TIMEOUT, value: "10"}
    # the uri says sslmode=verify-full: libpq verifies the server with the
    # Secret's ca.crt
    - {name: PGSSLROOTCERT, value: /etc/orders-ca/ca.crt}
    volumeMounts:
    - {name: ca, mountPath: /etc/orders-ca, readOnly: true}
    command:
    - psql
    - $(PGURI)
    - --no-psqlrc
    - --set=ON_ERROR_STOP=1
    - --command=select version(), (select ssl from pg_stat_ssl where pid = pg_backend_pid()) as tls
    - --command=create table if not exists visits (id serial primary key, at timestamptz not null default now())
    - --command=insert into visits default values
    - --command=select count(*) as visits, max(at) as last_visit from visits
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities: {drop: [ALL]}
  volumes:
  - name: ca
    secret: {secretName: orders-credentials, items: [{key: ca.crt, path: ca.crt}]}
`, image)
	fmt.Println("\ndemo: a client pod runs psql through the Service orders.default.svc with the Secret's uri")
	start := time.Now()
	_ = kubectl("delete", "pod", "--namespace=default", "orders-client", "--ignore-not-found", "--wait=true")
	if err := kubectlStdin(ctx, c, pod, "apply", "-f", "-"); err != nil {
		return fmt.Errorf("creating the client pod: %w", err)
	}
	waitErr := kubectl("wait", "--namespace=default", "pod/orders-client", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=90s")
	fmt.Println("\n$ kubectl logs orders-client")
	if err := kubectl("logs", "--namespace=default", "orders-client"); err != nil {
		return fmt.Errorf("reading the client's log: %w", err)
	}
	if waitErr != nil {
		_ = kubectl("describe", "pod", "--namespace=default", "orders-client")
		return fmt.Errorf("the client query did not succeed: %w", waitErr)
	}
	fmt.Printf("demo: client query done in %s\n", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// kubectlStdin runs kubectl with stdin as its input.
func kubectlStdin(ctx context.Context, c *cluster.Cluster, stdin string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.Bin, "kubectl"), append([]string{"--kubeconfig=" + c.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}
