package cnpg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/test/framework/cluster"
)

const (
	// OperatorNamespace is where the release manifest installs the
	// operator.
	OperatorNamespace = "cnpg-system"
	// OperatorDeployment is the operator's Deployment.
	OperatorDeployment = "cnpg-controller-manager"
	// fieldOwner is the field manager of Install's server-side apply.
	fieldOwner = "dbkeeper-peer-cnpg"
)

// upstreamImage is the operator image the release manifest names.
var upstreamImage = "ghcr.io/cloudnative-pg/cloudnative-pg:" + release

// InstallOptions configure Install.
type InstallOptions struct {
	// KeepLimits keeps the release's resource limits of the operator
	// container (100m CPU, 200Mi). Without it they are removed: dbkeeper's
	// operator, run by the tests in their own process, has none, and a
	// comparison gives both the same.
	KeepLimits bool
	// Timeout bounds the wait for the operator's Deployment to be
	// Available; 3 minutes when zero.
	Timeout time.Duration
	// Say receives a line per step; nil discards them.
	Say func(string)
}

// Install imports img into the real node's containerd (unless it already
// holds img.Ref) and applies the release manifest with server-side apply,
// rewritten by Objects, then waits until the operator's Deployment is
// Available.
func Install(ctx context.Context, c *cluster.Cluster, img Image, o InstallOptions) error {
	say := o.Say
	if say == nil {
		say = func(string) {}
	}
	if c.Node != cluster.RealNode {
		return fmt.Errorf("CloudNativePG runs on a real node, not a %s one", c.Node)
	}
	start := time.Now()
	imported, err := c.ImportImage(img.Ref, img.Tarball)
	if err != nil {
		return fmt.Errorf("importing CloudNativePG's image: %w", err)
	}
	if imported {
		say(fmt.Sprintf("imported %s in %s", img.Ref, time.Since(start).Round(time.Millisecond)))
	}
	manifest, err := os.ReadFile(img.Manifest)
	if err != nil {
		return fmt.Errorf("reading CloudNativePG's release manifest: %w", err)
	}
	objs, err := Objects(manifest, img.Ref, o.KeepLimits)
	if err != nil {
		return err
	}
	applied := time.Now()
	for _, u := range objs {
		if err := c.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s of CloudNativePG's release manifest: %w", u.GetKind(), u.GetName(), err)
		}
	}
	timeout := o.Timeout
	if timeout == 0 {
		timeout = 3 * time.Minute
	}
	if err := waitAvailable(ctx, c.Client, timeout); err != nil {
		return err
	}
	say(fmt.Sprintf("CloudNativePG %s: operator Available %s after the manifest was applied", Version, time.Since(applied).Round(100*time.Millisecond)))
	return nil
}

// Objects are the release manifest's objects as Install applies them: the
// upstream operator image replaced by ref wherever the manifest names it
// (the operator's container, and OPERATOR_IMAGE_NAME, which becomes the
// image of the instance pods' bootstrap init container), every
// imagePullPolicy IfNotPresent (the node has no registry to pull from),
// and, unless keepLimits, the operator container's resource limits
// removed (its requests stay).
func Objects(manifest []byte, ref string, keepLimits bool) ([]*unstructured.Unstructured, error) {
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	var objs []*unstructured.Unstructured
	replaced := 0
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("reading CloudNativePG's release manifest (document %d): %w", len(objs)+1, err)
		}
		if len(doc) == 0 {
			continue
		}
		doc = rewrite(doc, ref, &replaced).(map[string]any)
		u := &unstructured.Unstructured{Object: doc}
		if u.GetKind() == "Deployment" && u.GetName() == OperatorDeployment && !keepLimits {
			containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
			for _, ct := range containers {
				if res, ok := ct.(map[string]any)["resources"].(map[string]any); ok {
					delete(res, "limits")
				}
			}
			if err := unstructured.SetNestedSlice(u.Object, containers, "spec", "template", "spec", "containers"); err != nil {
				return nil, fmt.Errorf("lifting the operator's limits: %w", err)
			}
		}
		objs = append(objs, u)
	}
	if replaced == 0 {
		return nil, fmt.Errorf("CloudNativePG's release manifest never names %s: not the manifest of %s", upstreamImage, Version)
	}
	return objs, nil
}

// rewrite returns v with every string equal to upstreamImage replaced by
// ref and every imagePullPolicy value (a string: not the schema property
// of that name in a CRD) set to IfNotPresent, counting the images replaced.
func rewrite(v any, ref string, replaced *int) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if _, isString := e.(string); k == "imagePullPolicy" && isString {
				// a container's field; a CRD's schema has a property of
				// that name too (a map), left alone
				v[k] = string(corev1.PullIfNotPresent)
				continue
			}
			v[k] = rewrite(e, ref, replaced)
		}
		return v
	case []any:
		for i, e := range v {
			v[i] = rewrite(e, ref, replaced)
		}
		return v
	case string:
		if v == upstreamImage {
			*replaced++
			return ref
		}
		return v
	default:
		return v
	}
}

// waitAvailable waits until the operator's Deployment is Available with
// its current template; on timeout it says what its pods said.
func waitAvailable(ctx context.Context, c client.Client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	key := client.ObjectKey{Namespace: OperatorNamespace, Name: OperatorDeployment}
	for {
		d := &appsv1.Deployment{}
		err := c.Get(ctx, key, d)
		if err == nil && available(d) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("CloudNativePG's operator not Available within %s (%v); its pods: %s", timeout, err, podsSaid(c))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// available reports whether the Deployment rolled out its current
// template and is Available.
func available(d *appsv1.Deployment) bool {
	if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas < 1 || d.Status.AvailableReplicas < 1 {
		return false
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podsSaid sums up the operator's pods' container states, for an error.
func podsSaid(c client.Client) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(OperatorNamespace)); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "\n  %s %s", p.Name, p.Status.Phase)
		for _, cs := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, " %s ready=%v restarts=%d", cs.Name, cs.Ready, cs.RestartCount)
			if w := cs.State.Waiting; w != nil {
				fmt.Fprintf(&b, " waiting %s: %s", w.Reason, w.Message)
			}
			if t := cs.LastTerminationState.Terminated; t != nil {
				fmt.Fprintf(&b, " last exit %d %s", t.ExitCode, t.Reason)
			}
		}
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}
