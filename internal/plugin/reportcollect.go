package plugin

import (
	"bytes"
	"context"
	"fmt"
	"text/tabwriter"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
)

// children are the kinds of a Database's children a report holds, each
// in a file of its own. Secrets are among them with their keys only.
var children = []struct {
	file string
	list func() client.ObjectList
}{
	{"statefulsets.yaml", func() client.ObjectList { return &appsv1.StatefulSetList{} }},
	{"services.yaml", func() client.ObjectList { return &corev1.ServiceList{} }},
	{"persistentvolumeclaims.yaml", func() client.ObjectList { return &corev1.PersistentVolumeClaimList{} }},
	{"leases.yaml", func() client.ObjectList { return &coordinationv1.LeaseList{} }},
	{"jobs.yaml", func() client.ObjectList { return &batchv1.JobList{} }},
	{"cronjobs.yaml", func() client.ObjectList { return &batchv1.CronJobList{} }},
	{"configmaps.yaml", func() client.ObjectList { return &corev1.ConfigMapList{} }},
	{"poddisruptionbudgets.yaml", func() client.ObjectList { return &policyv1.PodDisruptionBudgetList{} }},
	{"networkpolicies.yaml", func() client.ObjectList { return &networkingv1.NetworkPolicyList{} }},
	{"serviceaccounts.yaml", func() client.ObjectList { return &corev1.ServiceAccountList{} }},
	{"secrets.yaml", func() client.ObjectList { return &corev1.SecretList{} }},
}

// collect fills b with what support asks for first: the Database (and
// its status as status shows it), its children (by the labels every child
// carries), its pods and the last o.tail lines of each of their
// containers, the events of the namespace about any of them, and the
// operator's Deployment and logs. Whatever cannot be read (RBAC, a kind
// the cluster lacks) is listed in errors.txt instead.
func collect(ctx context.Context, env Env, b *bundle, db *dbv1.Database, o options) {
	b.addObjects("database.yaml", db)
	var text bytes.Buffer
	if err := Status(&text, db, env.now()); err != nil {
		b.fail("status: %v", err)
	}
	b.add("status.txt", text.Bytes())
	var js bytes.Buffer
	if err := StatusJSON(&js, db); err != nil {
		b.fail("%v", err)
	}
	b.add("status.json", js.Bytes())

	involved := map[string]bool{"Database/" + db.Name: true}
	selector := client.MatchingLabels{"app.kubernetes.io/instance": db.Name}
	mine := func(obj client.Object) bool {
		return obj.GetLabels()["app.kubernetes.io/name"] == string(db.Spec.Engine)
	}
	for _, kind := range children {
		list := kind.list()
		if err := env.Client.List(ctx, list, client.InNamespace(db.Namespace), selector); err != nil {
			b.fail("listing %s: %v", kind.file, err)
			continue
		}
		var objs []client.Object
		for _, obj := range sortedItems(list) {
			if mine(obj) {
				objs = append(objs, obj)
				involved[kindOf(b, obj)+"/"+obj.GetName()] = true
			}
		}
		if len(objs) > 0 {
			b.addObjects(kind.file, objs...)
		}
	}

	var pods corev1.PodList
	if err := env.Client.List(ctx, &pods, client.InNamespace(db.Namespace), selector); err != nil {
		b.fail("listing pods: %v", err)
	}
	for _, obj := range sortedItems(&pods) {
		pod := obj.(*corev1.Pod)
		if !mine(pod) {
			continue
		}
		involved["Pod/"+pod.Name] = true
		b.addObjects("pods/"+pod.Name+".yaml", pod)
		collectLogs(ctx, env, b, pod, "logs", o.tail)
	}

	collectEvents(ctx, env, b, db.Namespace, involved)
	collectOperator(ctx, env, b, o.operatorNS, o.tail)
}

func kindOf(b *bundle, obj client.Object) string {
	gvk, err := b.gvk(obj)
	if err != nil {
		return ""
	}
	return gvk.Kind
}

// collectEvents adds the events of namespace about the objects involved
// ("Kind/name"), oldest first, as a table and as YAML.
func collectEvents(ctx context.Context, env Env, b *bundle, namespace string, involved map[string]bool) {
	mine, err := eventsAbout(ctx, env, namespace, involved)
	if err != nil {
		b.fail("%v", err)
		return
	}
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LAST SEEN\tTYPE\tREASON\tOBJECT\tCOUNT\tMESSAGE")
	objs := make([]client.Object, 0, len(mine))
	for _, e := range mine {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s/%s\t%d\t%s\n", lastSeen(e).UTC().Format("2006-01-02T15:04:05Z"), e.Type, e.Reason,
			e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Count, RedactText(conditions.Quote(e.Message, 300)))
		objs = append(objs, e)
	}
	_ = tw.Flush()
	b.add("events.txt", table.Bytes())
	if len(objs) > 0 {
		b.addObjects("events.yaml", objs...)
	}
}
