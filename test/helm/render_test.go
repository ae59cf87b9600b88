// Package helm tests the chart at config/charts/dbkeeper with the real helm
// client: lint, the rendered objects for several values files, the schema,
// drift against config/, and (install_test.go) an install into the local
// cluster with the operator running as the chart's ServiceAccount.
package helm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/dbkeeper/dbkeeper/internal/controller"
	"github.com/dbkeeper/dbkeeper/test/framework/envtest"
)

// paths returns the repository root, the chart and the helm binary.
func paths(t *testing.T) (root, chart, helmBin string) {
	t.Helper()
	root, err := envtest.RepoRoot()
	require.NoError(t, err)
	bin, err := envtest.AssetsDir()
	require.NoError(t, err)
	return root, filepath.Join(root, "config", "charts", "dbkeeper"), filepath.Join(bin, "helm")
}

func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	_, _, bin := paths(t)
	cmd := exec.Command(bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

// render runs helm template and returns the objects by "Kind namespace/name".
func render(t *testing.T, args ...string) map[string]*unstructured.Unstructured {
	t.Helper()
	_, chart, _ := paths(t)
	out, err := helm(t, append([]string{"template", "rel", chart, "--namespace=ops"}, args...)...)
	require.NoError(t, err, out)
	objs := map[string]*unstructured.Unstructured{}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			break
		}
		if len(u.Object) == 0 {
			continue
		}
		objs[u.GetKind()+" "+u.GetNamespace()+"/"+u.GetName()] = u
	}
	require.NotEmpty(t, objs)
	return objs
}

func managerArgs(t *testing.T, objs map[string]*unstructured.Unstructured) []string {
	t.Helper()
	d := objs["Deployment ops/rel-dbkeeper"]
	require.NotNil(t, d, "no Deployment rel-dbkeeper in %v", keys(objs))
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	require.Len(t, containers, 1)
	args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	return args
}

func keys(m map[string]*unstructured.Unstructured) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// generatedRules are the rules controller-gen wrote into config/rbac for
// the kind (ClusterRole: the controllers, Role: leader election).
func generatedRules(t *testing.T, kind string) []any {
	t.Helper()
	root, _, _ := paths(t)
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "role.yaml"))
	require.NoError(t, err)
	for _, doc := range strings.Split(string(data), "\n---\n") {
		u := map[string]any{}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &u))
		if u["kind"] == kind {
			return u["rules"].([]any)
		}
	}
	t.Fatalf("no %s in config/rbac/role.yaml", kind)
	return nil
}

func rulesOf(t *testing.T, obj *unstructured.Unstructured) []any {
	t.Helper()
	require.NotNil(t, obj)
	rules, ok := obj.Object["rules"].([]any)
	require.True(t, ok, "%s has no rules", obj.GetName())
	for _, r := range rules {
		for _, field := range []string{"verbs", "resources", "apiGroups"} {
			vals, _, _ := unstructured.NestedStringSlice(r.(map[string]any), field)
			assert.NotContains(t, vals, "*", "%s grants * in %s", obj.GetName(), field)
		}
	}
	return rules
}

func TestLint(t *testing.T) {
	if testing.Short() {
		t.Skip("runs helm; skipped under -short")
	}
	root, chart, _ := paths(t)
	files, err := filepath.Glob(filepath.Join(root, "test", "helm", "testdata", "*.values.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		out, err := helm(t, "lint", "--strict", chart, "-f", f)
		assert.NoError(t, err, "helm lint -f %s:\n%s", filepath.Base(f), out)
	}
}

func TestTemplateDefaults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs helm; skipped under -short")
	}
	objs := render(t)
	args := managerArgs(t, objs)
	assert.Contains(t, args, "--controllers=*")
	assert.Contains(t, args, "--zap-log-level=info")
	for _, a := range args {
		assert.False(t, strings.HasPrefix(a, "--watch-namespaces"), "cluster-wide install passes %s", a)
	}
	// Two replicas with leader election by default: a failover needs the
	// operator (issue 28), so losing the manager's node must not leave the
	// databases without one until a new pod starts.
	assert.Contains(t, args, "--leader-elect")
	assert.Contains(t, args, "--leader-election-namespace=ops")

	// Cluster-scoped names carry the release namespace, so that two
	// installs coexist.
	role := objs["ClusterRole /rel-dbkeeper-ops"]
	assert.Equal(t, generatedRules(t, "ClusterRole"), rulesOf(t, role), "chart ClusterRole rules differ from config/rbac")
	assert.NotNil(t, objs["ClusterRoleBinding /rel-dbkeeper-ops"])
	assert.Equal(t, generatedRules(t, "Role"), rulesOf(t, objs["Role ops/rel-dbkeeper-leader-election"]))
	assert.NotNil(t, objs["ServiceAccount ops/rel-dbkeeper"])
	assert.NotNil(t, objs["Service ops/rel-dbkeeper-metrics"])
	assert.NotNil(t, objs["ValidatingAdmissionPolicy /rel-dbkeeper-ops-deletion-protection"])
	assert.NotNil(t, objs["ValidatingAdmissionPolicyBinding /rel-dbkeeper-ops-deletion-protection"])
	assert.NotNil(t, objs["PodDisruptionBudget ops/rel-dbkeeper"], "two replicas get a PDB")
	assert.Nil(t, objs["ServiceMonitor ops/rel-dbkeeper"])
	assert.Nil(t, objs["NetworkPolicy ops/rel-dbkeeper"])

	crd := objs["CustomResourceDefinition /databases.database.dbkeeper.io"]
	require.NotNil(t, crd)
	assert.Equal(t, "keep", crd.GetAnnotations()["helm.sh/resource-policy"])

	d := objs["Deployment ops/rel-dbkeeper"]
	pod, _, _ := unstructured.NestedMap(d.Object, "spec", "template", "spec")
	assert.Equal(t, true, pod["securityContext"].(map[string]any)["runAsNonRoot"])
	sc := pod["containers"].([]any)[0].(map[string]any)["securityContext"].(map[string]any)
	assert.Equal(t, true, sc["readOnlyRootFilesystem"])
	assert.Equal(t, false, sc["allowPrivilegeEscalation"])
	assert.Equal(t, []any{"ALL"}, sc["capabilities"].(map[string]any)["drop"])
	image := pod["containers"].([]any)[0].(map[string]any)["image"]
	assert.Equal(t, "ghcr.io/dbkeeper/dbkeeper:0.1.0", image, "the tag defaults to the appVersion")
	assert.EqualValues(t, 2, d.Object["spec"].(map[string]any)["replicas"])
	spread, _, _ := unstructured.NestedSlice(pod, "affinity", "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution")
	require.Len(t, spread, 1, "the manager replicas prefer distinct nodes")
	term := spread[0].(map[string]any)["podAffinityTerm"].(map[string]any)
	assert.Equal(t, "kubernetes.io/hostname", term["topologyKey"])
}

func TestTemplateNamespaced(t *testing.T) {
	if testing.Short() {
		t.Skip("runs helm; skipped under -short")
	}
	root, _, _ := paths(t)
	objs := render(t, "-f", filepath.Join(root, "test", "helm", "testdata", "namespaced.values.yaml"))
	args := managerArgs(t, objs)
	assert.Contains(t, args, "--watch-namespaces=team-a,team-b")
	assert.Contains(t, args, "--leader-elect")
	assert.Contains(t, args, "--leader-election-namespace=ops")
	assert.Nil(t, objs["ClusterRole /rel-dbkeeper-ops"], "a namespaced install needs no ClusterRole for the controllers")
	for key := range objs {
		if strings.HasPrefix(key, "ClusterRole ") {
			assert.Contains(t, []string{"ClusterRole /rel-dbkeeper-ops-metrics-auth", "ClusterRole /rel-dbkeeper-ops-metrics-reader", "ClusterRole /rel-dbkeeper-ops-nodes"}, key,
				"the only ClusterRoles of a namespaced install are the secure metrics' (cluster-scoped reviews, a non-resource URL) and the Nodes' (cluster-scoped)")
		}
	}
	// The Nodes' ClusterRole grants what the generated rules grant on
	// nodes, and nothing else: a Role cannot grant a cluster-scoped
	// resource.
	var nodeRules []any
	for _, r := range generatedRules(t, "ClusterRole") {
		if res, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "resources"); slices.Contains(res, "nodes") {
			nodeRules = append(nodeRules, r)
		}
	}
	require.Len(t, nodeRules, 1, "the manager's generated rules on nodes")
	assert.Equal(t, nodeRules, rulesOf(t, objs["ClusterRole /rel-dbkeeper-ops-nodes"]), "the namespaced install's ClusterRole on nodes")
	assert.NotNil(t, objs["ClusterRoleBinding /rel-dbkeeper-ops-nodes"])
	for _, ns := range []string{"team-a", "team-b"} {
		assert.Equal(t, generatedRules(t, "ClusterRole"), rulesOf(t, objs["Role "+ns+"/rel-dbkeeper"]), "Role in %s", ns)
		assert.NotNil(t, objs["RoleBinding "+ns+"/rel-dbkeeper"], "RoleBinding in %s", ns)
	}
	pdb := objs["PodDisruptionBudget ops/rel-dbkeeper"]
	require.NotNil(t, pdb, "two replicas get a PDB")
	binding := objs["ValidatingAdmissionPolicyBinding /rel-dbkeeper-ops-deletion-protection"]
	require.NotNil(t, binding)
	values, _, _ := unstructured.NestedSlice(binding.Object, "spec", "matchResources", "namespaceSelector", "matchExpressions")
	assert.Len(t, values, 1, "deletion protection limited to the watched namespaces")
}

func TestTemplateWithoutBackup(t *testing.T) {
	if testing.Short() {
		t.Skip("runs helm; skipped under -short")
	}
	root, _, _ := paths(t)
	objs := render(t, "-f", filepath.Join(root, "test", "helm", "testdata", "no-backup.values.yaml"))
	args := managerArgs(t, objs)
	assert.Contains(t, args, "--controllers=*,-backup")
	assert.Contains(t, args, "--zap-log-level=debug")
	assert.Contains(t, args, "--zap-encoder=console")
	assert.NotNil(t, objs["ServiceMonitor ops/rel-dbkeeper"])
	assert.NotNil(t, objs["NetworkPolicy ops/rel-dbkeeper"])

	objs = render(t, "--set", "controllers.statefulset.enabled=false,controllers.cleanup.enabled=false",
		"--set", "crds.keep=false", "--set", "image.digest=sha256:"+strings.Repeat("a", 64))
	assert.Contains(t, managerArgs(t, objs), "--controllers=*,-statefulset,-cleanup")
	crd := objs["CustomResourceDefinition /databases.database.dbkeeper.io"]
	require.NotNil(t, crd)
	assert.NotContains(t, crd.GetAnnotations(), "helm.sh/resource-policy")

	objs = render(t, "--set", "crds.enabled=false,deletionProtection.enabled=false")
	assert.Nil(t, objs["CustomResourceDefinition /databases.database.dbkeeper.io"])
	assert.Nil(t, objs["ValidatingAdmissionPolicy /rel-dbkeeper-ops-deletion-protection"])
}

func TestTemplateEngineImages(t *testing.T) {
	if testing.Short() {
		t.Skip("runs helm; skipped under -short")
	}
	root, _, _ := paths(t)
	args := managerArgs(t, render(t, "-f", filepath.Join(root, "test", "helm", "testdata", "engine-images.values.yaml")))
	assert.Contains(t, args, "--engine-registry=mirror.example.com/dockerhub")
	assert.Contains(t, args, "--engine-images=postgres:15=localhost/dbkeeper/postgres:15,"+
		"postgres:17=registry.example.com/pg:17.6@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		"one flag, entries sorted")

	args = managerArgs(t, render(t, "--set", "engineImages.registry=localhost:5000"))
	assert.Contains(t, args, "--engine-registry=localhost:5000")
	for _, a := range args {
		assert.False(t, strings.HasPrefix(a, "--engine-images"), "no overrides, yet %s", a)
	}

	// The defaults pass neither flag: the manager's built-in images.
	for _, a := range managerArgs(t, render(t)) {
		assert.False(t, strings.HasPrefix(a, "--engine-"), "the defaults pass %s", a)
	}
}

func TestSchemaRefusesTypos(t *testing.T) {
	if testing.Short() {
		t.Skip("runs helm; skipped under -short")
	}
	root, chart, _ := paths(t)
	out, err := helm(t, "template", "rel", chart, "-f", filepath.Join(root, "test", "helm", "testdata", "typo.values.yml"))
	require.Error(t, err, "a values file with a typo was accepted")
	assert.Contains(t, out, "controlers")
	assert.Contains(t, out, "additional properties")

	for _, set := range []string{"replicas=-1", "log.format=xml", "image.pullPolicy=Sometimes", "watchNamespaces={Team_A}",
		"engineImages.registri=mirror.example.com", "engineImages.registry=mirror.example.com/a b",
		"engineImages.overrides.postgres=registry.example.com/postgres:17.6", "engineImages.overrides.postgres:17=registry.example.com/postgres:17.6\\,latest",
		"metrics.secure=yes", "metrics.port=0", "metrics.certSecret=Not_A_Name"} {
		out, err := helm(t, "template", "rel", chart, "--set", set)
		assert.Error(t, err, "--set %s accepted", set)
		assert.Contains(t, out, "values don't meet the specifications of the schema", "--set %s", set)
	}
}

// TestChartListsEachControllerOnce: the chart's values and schema name
// every controller of the manager once (values.yaml and its schema named
// replication twice, which YAML and JSON parsers take silently).
func TestChartListsEachControllerOnce(t *testing.T) {
	_, chart, _ := paths(t)
	raw, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	require.NoError(t, err)
	asJSON, err := yaml.YAMLToJSONStrict(raw)
	require.NoError(t, err, "values.yaml holds a key twice")
	values := struct {
		Controllers map[string]any `json:"controllers"`
	}{}
	require.NoError(t, json.Unmarshal(asJSON, &values))
	assert.ElementsMatch(t, controller.Names(), slices.Collect(maps.Keys(values.Controllers)), "values.yaml's controllers")

	raw, err = os.ReadFile(filepath.Join(chart, "values.schema.json"))
	require.NoError(t, err)
	schema := struct {
		Properties struct {
			Controllers struct {
				Properties objectKeys `json:"properties"`
			} `json:"controllers"`
		} `json:"properties"`
	}{}
	require.NoError(t, json.Unmarshal(raw, &schema))
	assert.ElementsMatch(t, controller.Names(), schema.Properties.Controllers.Properties, "values.schema.json's controllers")
}

// objectKeys are a JSON object's keys in order, repeated ones too.
type objectKeys []string

func (k *objectKeys) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil { // {
		return err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		*k = append(*k, tok.(string))
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return err
		}
	}
	return nil
}

// TestChartMatchesConfig: the chart's CRD and RBAC come from the same
// generated sources as config/.
func TestChartMatchesConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("runs helm; skipped under -short")
	}
	root, chart, _ := paths(t)
	generated, err := os.ReadFile(filepath.Join(root, "config", "rbac", "role.yaml"))
	require.NoError(t, err)
	copied, err := os.ReadFile(filepath.Join(chart, "files", "role.yaml"))
	require.NoError(t, err)
	assert.Equal(t, string(generated), string(copied), "config/charts/dbkeeper/files/role.yaml is stale: run make manifests")

	data, err := os.ReadFile(filepath.Join(root, "config", "crd", "bases", "database.dbkeeper.io_databases.yaml"))
	require.NoError(t, err)
	want := map[string]any{}
	require.NoError(t, yaml.Unmarshal(data, &want))
	crd := render(t, "--set", "crds.keep=false")["CustomResourceDefinition /databases.database.dbkeeper.io"]
	require.NotNil(t, crd)
	assert.Equal(t, want, crd.Object, "the chart's CRD differs from config/crd: run make manifests")
}

// containerPorts returns the manager container's ports by name.
func containerPorts(t *testing.T, objs map[string]*unstructured.Unstructured) map[string]float64 {
	t.Helper()
	containers, _, _ := unstructured.NestedSlice(objs["Deployment ops/rel-dbkeeper"].Object, "spec", "template", "spec", "containers")
	ports := map[string]float64{}
	for _, p := range containers[0].(map[string]any)["ports"].([]any) {
		p := p.(map[string]any)
		ports[p["name"].(string)] = p["containerPort"].(float64)
	}
	return ports
}

// servicePorts returns the metrics Service's ports as name=port->target.
func servicePorts(t *testing.T, objs map[string]*unstructured.Unstructured) []string {
	t.Helper()
	svc := objs["Service ops/rel-dbkeeper-metrics"]
	require.NotNil(t, svc)
	list, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	var out []string
	for _, p := range list {
		p := p.(map[string]any)
		out = append(out, fmt.Sprintf("%v=%v->%v", p["name"], p["port"], p["targetPort"]))
	}
	return out
}

// TestTemplateSecureMetrics: by default /metrics is HTTPS on 8443 behind
// the authentication and authorization filter, with the two cluster-scoped
// reviews granted by a ClusterRole of their own (in a namespaced install
// too) and a metrics-reader ClusterRole for scrapers; the ServiceMonitor
// scrapes over HTTPS with a token. metrics.secure=false is plain HTTP on
// 8080 with none of it.
func TestTemplateSecureMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("runs helm; skipped under -short")
	}
	root, _, _ := paths(t)
	authRules := []any{
		map[string]any{"apiGroups": []any{"authentication.k8s.io"}, "resources": []any{"tokenreviews"}, "verbs": []any{"create"}},
		map[string]any{"apiGroups": []any{"authorization.k8s.io"}, "resources": []any{"subjectaccessreviews"}, "verbs": []any{"create"}},
	}
	readerRules := []any{map[string]any{"nonResourceURLs": []any{"/metrics"}, "verbs": []any{"get"}}}

	for name, values := range map[string][]string{
		"cluster-wide": {"--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.tlsConfig.insecureSkipVerify=true", "--set", "networkPolicy.enabled=true"},
		"namespaced": {"-f", filepath.Join(root, "test", "helm", "testdata", "namespaced.values.yaml"), "--set", "metrics.serviceMonitor.enabled=true",
			"--set", "metrics.serviceMonitor.tlsConfig.insecureSkipVerify=true", "--set", "networkPolicy.enabled=true"},
	} {
		t.Run("secure "+name, func(t *testing.T) {
			objs := render(t, values...)
			args := managerArgs(t, objs)
			assert.Contains(t, args, "--metrics-secure")
			assert.Contains(t, args, "--metrics-bind-address=:8443")
			for _, a := range args {
				assert.False(t, strings.HasPrefix(a, "--metrics-cert-dir"), "no certSecret, yet %s", a)
			}
			assert.Equal(t, map[string]float64{"https": 8443, "health": 8081}, containerPorts(t, objs))
			assert.Equal(t, []string{"https=8443->https"}, servicePorts(t, objs))

			assert.Equal(t, authRules, rulesOf(t, objs["ClusterRole /rel-dbkeeper-ops-metrics-auth"]))
			binding := objs["ClusterRoleBinding /rel-dbkeeper-ops-metrics-auth"]
			require.NotNil(t, binding)
			subjects, _, _ := unstructured.NestedSlice(binding.Object, "subjects")
			assert.Equal(t, []any{map[string]any{"kind": "ServiceAccount", "name": "rel-dbkeeper", "namespace": "ops"}}, subjects)
			ref, _, _ := unstructured.NestedString(binding.Object, "roleRef", "name")
			assert.Equal(t, "rel-dbkeeper-ops-metrics-auth", ref)
			reader := objs["ClusterRole /rel-dbkeeper-ops-metrics-reader"]
			require.NotNil(t, reader)
			assert.Equal(t, readerRules, reader.Object["rules"])

			sm := objs["ServiceMonitor ops/rel-dbkeeper"]
			require.NotNil(t, sm)
			endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
			require.Len(t, endpoints, 1)
			ep := endpoints[0].(map[string]any)
			assert.Equal(t, "https", ep["port"])
			assert.Equal(t, "https", ep["scheme"])
			assert.Equal(t, "/var/run/secrets/kubernetes.io/serviceaccount/token", ep["bearerTokenFile"])
			assert.Equal(t, map[string]any{"insecureSkipVerify": true}, ep["tlsConfig"])

			np := objs["NetworkPolicy ops/rel-dbkeeper"]
			require.NotNil(t, np)
			ingress, _, _ := unstructured.NestedSlice(np.Object, "spec", "ingress")
			assert.Equal(t, "https", ingress[0].(map[string]any)["ports"].([]any)[0].(map[string]any)["port"])
		})
	}

	t.Run("plain", func(t *testing.T) {
		objs := render(t, "--set", "metrics.secure=false", "--set", "metrics.serviceMonitor.enabled=true", "--set", "networkPolicy.enabled=true")
		args := managerArgs(t, objs)
		assert.Contains(t, args, "--metrics-bind-address=:8080")
		assert.NotContains(t, args, "--metrics-secure")
		assert.Equal(t, map[string]float64{"metrics": 8080, "health": 8081}, containerPorts(t, objs))
		assert.Equal(t, []string{"metrics=8080->metrics"}, servicePorts(t, objs))
		assert.Nil(t, objs["ClusterRole /rel-dbkeeper-ops-metrics-auth"])
		assert.Nil(t, objs["ClusterRoleBinding /rel-dbkeeper-ops-metrics-auth"])
		assert.Nil(t, objs["ClusterRole /rel-dbkeeper-ops-metrics-reader"])
		endpoints, _, _ := unstructured.NestedSlice(objs["ServiceMonitor ops/rel-dbkeeper"].Object, "spec", "endpoints")
		ep := endpoints[0].(map[string]any)
		assert.Equal(t, "metrics", ep["port"])
		assert.NotContains(t, ep, "scheme")
		assert.NotContains(t, ep, "bearerTokenFile")
	})

	t.Run("mounted certificate", func(t *testing.T) {
		objs := render(t, "--set", "metrics.certSecret=dbkeeper-metrics-tls", "--set", "metrics.port=9443",
			"--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.tlsConfig.serverName=rel-dbkeeper-metrics.ops.svc")
		args := managerArgs(t, objs)
		assert.Contains(t, args, "--metrics-cert-dir=/etc/dbkeeper/metrics-certs")
		assert.Contains(t, args, "--metrics-bind-address=:9443")
		assert.Equal(t, []string{"https=9443->https"}, servicePorts(t, objs))
		pod, _, _ := unstructured.NestedMap(objs["Deployment ops/rel-dbkeeper"].Object, "spec", "template", "spec")
		secret, _, _ := unstructured.NestedString(pod["volumes"].([]any)[0].(map[string]any), "secret", "secretName")
		assert.Equal(t, "dbkeeper-metrics-tls", secret)
		mount := pod["containers"].([]any)[0].(map[string]any)["volumeMounts"].([]any)[0].(map[string]any)
		assert.Equal(t, "/etc/dbkeeper/metrics-certs", mount["mountPath"])
		endpoints, _, _ := unstructured.NestedSlice(objs["ServiceMonitor ops/rel-dbkeeper"].Object, "spec", "endpoints")
		assert.Equal(t, map[string]any{"serverName": "rel-dbkeeper-metrics.ops.svc"}, endpoints[0].(map[string]any)["tlsConfig"])

		_, chart, _ := paths(t)
		out, err := helm(t, "template", "rel", chart, "--set", "metrics.secure=false", "--set", "metrics.certSecret=dbkeeper-metrics-tls")
		require.Error(t, err, "a certificate for plain metrics was accepted")
		assert.Contains(t, out, "metrics.certSecret needs metrics.secure: true")
	})
}

// TestTemplateAgentImage: the engine pods copy the agent from the manager's
// own image unless agentImage names another (a mirror the nodes pull from).
func TestTemplateAgentImage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs helm; skipped under -short")
	}
	args := managerArgs(t, render(t, "--set", "image.repository=registry.example.com/dbkeeper,image.tag=1.2.3"))
	assert.Contains(t, args, "--agent-image=registry.example.com/dbkeeper:1.2.3", "the manager's own image by default")

	args = managerArgs(t, render(t, "--set", "image.digest=sha256:"+strings.Repeat("ab", 32)))
	assert.Contains(t, args, "--agent-image=ghcr.io/dbkeeper/dbkeeper@sha256:"+strings.Repeat("ab", 32), "the digest pins the agent too")

	args = managerArgs(t, render(t, "--set", "agentImage=mirror.example.com/dbkeeper:1.2.3"))
	assert.Contains(t, args, "--agent-image=mirror.example.com/dbkeeper:1.2.3")

	// The replication controller can be switched off like the others.
	assert.Contains(t, managerArgs(t, render(t, "--set", "controllers.replication.enabled=false")), "--controllers=*,-replication")
}

func TestTemplateOneReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("runs helm; skipped under -short")
	}
	objs := render(t, "--set=replicas=1", "--set=leaderElection.enabled=false")
	for _, a := range managerArgs(t, objs) {
		assert.False(t, strings.HasPrefix(a, "--leader-elect"), "one replica without leader election passes %s", a)
	}
	assert.Nil(t, objs["PodDisruptionBudget ops/rel-dbkeeper"], "a PDB for one replica blocks drains")
}

// TestTemplateDatabaseNetworkPolicies: the manager keeps a NetworkPolicy for
// every Database unless databaseNetworkPolicies is false, and names itself
// in them by its namespace and labels that its pods do carry (otherwise
// the policies would shut the manager out of its own Databases).
func TestTemplateDatabaseNetworkPolicies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs helm; skipped under -short")
	}
	objs := render(t)
	args := managerArgs(t, objs)
	assert.Contains(t, args, "--network-policies=true")
	assert.Contains(t, args, "--manager-namespace=ops")
	var selector string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--manager-pod-labels="); ok {
			selector = v
		}
	}
	require.NotEmpty(t, selector, "--manager-pod-labels in %v", args)
	podLabels, _, _ := unstructured.NestedStringMap(objs["Deployment ops/rel-dbkeeper"].Object, "spec", "template", "metadata", "labels")
	for _, pair := range strings.Split(selector, ",") {
		k, v, _ := strings.Cut(pair, "=")
		assert.Equal(t, v, podLabels[k], "the manager's pods carry %s", pair)
	}
	assert.Contains(t, managerArgs(t, render(t, "--set", "databaseNetworkPolicies=false")), "--network-policies=false")
}

// TestTemplateServiceMonitorVerifies (issue 29): a ServiceMonitor of the
// secure /metrics verifies the manager's certificate by default: with
// metrics.certSecret, against its ca.crt for the metrics Service's name;
// without one (a self-signed certificate nobody can verify) the chart
// refuses to render and says what to set; skipping verification must be
// asked for. Before, it defaulted to insecureSkipVerify.
func TestTemplateServiceMonitorVerifies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs helm; skipped under -short")
	}
	objs := render(t, "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.certSecret=dbkeeper-metrics-tls")
	endpoints, _, _ := unstructured.NestedSlice(objs["ServiceMonitor ops/rel-dbkeeper"].Object, "spec", "endpoints")
	require.Len(t, endpoints, 1)
	assert.Equal(t, map[string]any{
		"ca":         map[string]any{"secret": map[string]any{"name": "dbkeeper-metrics-tls", "key": "ca.crt"}},
		"serverName": "rel-dbkeeper-metrics.ops.svc",
	}, endpoints[0].(map[string]any)["tlsConfig"])

	_, chart, _ := paths(t)
	out, err := helm(t, "template", "rel", chart, "--namespace=ops", "--set", "metrics.serviceMonitor.enabled=true")
	require.Error(t, err, "a ServiceMonitor that cannot verify the certificate was rendered")
	assert.Contains(t, out, "metrics.serviceMonitor verifies the manager's certificate: set metrics.certSecret")
}
