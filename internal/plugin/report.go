package plugin

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"
)

// bundle is a support bundle being built: files in the order added, and
// what could not be collected.
type bundle struct {
	dir    string
	scheme *runtime.Scheme
	files  []bundleFile
	errs   []string
}

type bundleFile struct {
	name string
	data []byte
}

func (b *bundle) add(name string, data []byte) {
	b.files = append(b.files, bundleFile{name: b.dir + "/" + name, data: data})
}

func (b *bundle) fail(format string, args ...any) {
	b.errs = append(b.errs, fmt.Sprintf(format, args...))
}

// addObjects writes objs, redacted, as one YAML stream.
func (b *bundle) addObjects(name string, objs ...client.Object) {
	var buf bytes.Buffer
	for i, obj := range objs {
		if i > 0 {
			buf.WriteString("---\n")
		}
		buf.Write(b.yaml(obj))
	}
	b.add(name, buf.Bytes())
}

// yaml is obj as YAML, with its kind and redacted (RedactObject).
func (b *bundle) yaml(obj client.Object) []byte {
	obj = obj.DeepCopyObject().(client.Object)
	if gvk, err := b.gvk(obj); err == nil {
		obj.GetObjectKind().SetGroupVersionKind(gvk)
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return []byte("# " + err.Error() + "\n")
	}
	RedactObject(m)
	out, err := yaml.Marshal(m)
	if err != nil {
		return []byte("# " + err.Error() + "\n")
	}
	return out
}

func (b *bundle) gvk(obj runtime.Object) (schema.GroupVersionKind, error) {
	return apiutil.GVKForObject(obj, b.scheme)
}

// write writes the bundle as a gzipped tar, every file stamped with now,
// and errors.txt when something could not be collected.
func (b *bundle) write(w io.Writer, now time.Time) error {
	if len(b.errs) > 0 {
		b.add("errors.txt", []byte(strings.Join(b.errs, "\n")+"\n"))
	}
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	for _, f := range b.files {
		hdr := &tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: now, Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

// report writes the support bundle of the Database name (see collect).
func report(ctx context.Context, env Env, name string, o options) error {
	db, err := get(ctx, env, name)
	if err != nil {
		return err
	}
	now := env.now()
	stamp := now.UTC().Format("20060102T150405Z")
	b := &bundle{dir: fmt.Sprintf("%s-report-%s", db.Name, stamp), scheme: env.Client.Scheme()}
	collect(ctx, env, b, db, o)

	file := o.output
	if file == "" {
		file = b.dir + ".tar.gz"
	}
	if file == "-" {
		if err := b.write(env.Out, now); err != nil {
			return fmt.Errorf("writing the report of Database %s/%s: %w", db.Namespace, db.Name, err)
		}
		fmt.Fprintf(env.errOut(), "%s\n", summary(b))
		return nil
	}
	var buf bytes.Buffer
	if err := b.write(&buf, now); err != nil {
		return fmt.Errorf("writing the report of Database %s/%s: %w", db.Namespace, db.Name, err)
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o600); err != nil {
		return fmt.Errorf("writing the report of Database %s/%s: %w", db.Namespace, db.Name, err)
	}
	_, err = fmt.Fprintf(env.Out, "wrote %s: %s\n", file, summary(b))
	return err
}

func summary(b *bundle) string {
	s := fmt.Sprintf("%d files, no Secret data", len(b.files))
	if len(b.errs) > 0 {
		s += fmt.Sprintf("; %d things could not be collected (errors.txt)", len(b.errs))
	}
	return s
}

// operatorLabels select the operator's Deployment (config/manager and the
// Helm chart label it so).
var operatorLabels = client.MatchingLabels{"app.kubernetes.io/name": "dbkeeper", "app.kubernetes.io/component": "manager"}

// collectOperator adds the operator's Deployments and the last lines of
// their pods' logs: in namespace ns, or wherever the labels find them.
func collectOperator(ctx context.Context, env Env, b *bundle, ns string, tail int64) {
	var deps appsv1.DeploymentList
	if err := env.Client.List(ctx, &deps, client.InNamespace(ns), operatorLabels); err != nil {
		b.fail("listing the operator's Deployments (labels app.kubernetes.io/name=dbkeeper,app.kubernetes.io/component=manager): %v (--operator-namespace narrows the search to one namespace)", err)
		return
	}
	if len(deps.Items) == 0 {
		b.fail("no operator Deployment labelled app.kubernetes.io/name=dbkeeper,app.kubernetes.io/component=manager in %s (--operator-namespace names its namespace)", orAll(ns))
		return
	}
	for i := range deps.Items {
		d := &deps.Items[i]
		b.addObjects(fmt.Sprintf("operator/%s/deployment-%s.yaml", d.Namespace, d.Name), d)
		if d.Spec.Selector == nil {
			continue
		}
		var pods corev1.PodList
		if err := env.Client.List(ctx, &pods, client.InNamespace(d.Namespace), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
			b.fail("listing the pods of Deployment %s/%s: %v", d.Namespace, d.Name, err)
			continue
		}
		for j := range pods.Items {
			collectLogs(ctx, env, b, &pods.Items[j], fmt.Sprintf("operator/%s/logs", d.Namespace), tail)
		}
	}
}

func orAll(ns string) string {
	if ns == "" {
		return "any namespace"
	}
	return "namespace " + ns
}

// collectLogs adds the last tail lines of each container of pod, and of
// its previous run when it restarted, redacted (RedactText).
func collectLogs(ctx context.Context, env Env, b *bundle, pod *corev1.Pod, dir string, tail int64) {
	if env.Logs == nil {
		return
	}
	restarts := map[string]int32{}
	for _, s := range append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...) {
		restarts[s.Name] = s.RestartCount
	}
	for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
		for _, previous := range []bool{false, true} {
			if previous && restarts[c.Name] == 0 {
				continue
			}
			opts := &corev1.PodLogOptions{Container: c.Name, TailLines: &tail, LimitBytes: ptr.To[int64](8 << 20), Previous: previous, Timestamps: true}
			log, err := env.Logs(ctx, pod.Namespace, pod.Name, opts)
			if err != nil {
				b.fail("the log of %s/%s container %s (previous %t): %v", pod.Namespace, pod.Name, c.Name, previous, err)
				continue
			}
			name := fmt.Sprintf("%s/%s/%s.log", dir, pod.Name, c.Name)
			if previous {
				name = fmt.Sprintf("%s/%s/%s.previous.log", dir, pod.Name, c.Name)
			}
			b.add(name, []byte(redactLines(string(log))))
		}
	}
}

func redactLines(s string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		lines[i] = RedactText(l)
	}
	return strings.Join(lines, "")
}

// sortedItems are the items of list, by name.
func sortedItems(list client.ObjectList) []client.Object {
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil
	}
	objs := make([]client.Object, 0, len(items))
	for _, it := range items {
		if o, ok := it.(client.Object); ok {
			objs = append(objs, o)
		}
	}
	sort.Slice(objs, func(i, j int) bool { return objs[i].GetName() < objs[j].GetName() })
	return objs
}
