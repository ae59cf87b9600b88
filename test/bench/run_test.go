package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
)

// designWrites is the fewest writes a Database can converge with: ten
// children (StatefulSet, two Services, the credentials and superuser
// Secrets, backup PVC, CronJob, and
// the tls controller's CA Secret, certificate Secret and pg_hba
// ConfigMap), the finalizer, one status apply per facet (statefulset,
// service, secret, backup, tls, and cleanup's status.deletion preview) and
// the Ready condition.
// A real convergence reports more: StatefulSetReady moves through the
// rollout's steps and Ready follows each of them.
const designWrites = 10 + 1 + 6 + 1

// facetConditions must all be current (observedGeneration = generation)
// for a Database to count as converged.
var facetConditions = []string{
	dbv1.ConditionStatefulSetReady, dbv1.ConditionServiceReady,
	dbv1.ConditionCredentialsReady, dbv1.ConditionBackupReady, dbv1.ConditionTLSReady, dbv1.ConditionReady,
}

// result is one size's figures.
type result struct {
	N     int
	Floor floorResult
	// Converged is from the first Database created to every child created
	// and every facet condition current; Ready to every Database Ready.
	Converged, Ready time.Duration
	// WritesPerDB is the operator's writes to Databases and their children
	// per Database, counted by the kube-apiserver, until it was quiet.
	WritesPerDB float64
	// WritesByVerb breaks WritesPerDB down by "VERB resource[/subresource]".
	WritesByVerb map[string]float64
	// ClientWritesPerDB is every writing request of the operator's clients,
	// Events included, per Database.
	ClientWritesPerDB float64
	// Gets is the GETs of single objects of dbkeeper's kinds the
	// kube-apiserver served while the operator converged (cache misses:
	// Secrets, whose data is not cached, are read on purpose).
	Gets map[string]float64
	// Reconciles and ReconcileErrors are counted until quiet.
	Reconciles, ReconcileErrors float64
	// ReconcileP50 and ReconcileP99 are seconds, over every controller.
	ReconcileP50, ReconcileP99 float64
	// PerController is p50 and p99 of each controller.
	PerController map[string][2]float64
	// Memory is the operator's after convergence.
	Memory memory
	// Idle is measured for the largest size only.
	Idle *idleResult
}

// idleResult is what the operator does when nothing changes.
type idleResult struct {
	For, Resync         time.Duration
	Writes, ClientGets  float64
	Reconciles          float64
	Gets                map[string]float64
	Secrets             int
	Before, WithSecrets memory
}

// dbkeeperResources are the resources whose writes and GETs are the
// operator's (the kube-controller-manager writes StatefulSet and CronJob
// status with PUT, and claims with POST and PUT, so only applies count).
var dbkeeperResources = map[string]bool{
	"databases": true, "statefulsets": true, "services": true, "secrets": true,
	"persistentvolumeclaims": true, "cronjobs": true, "jobs": true,
}

// operatorWrite tells the operator's writes in apiserver_request_total:
// everything on databases but creates (the benchmark's), applies of the
// children, and Secret creates and patches.
func operatorWrite(l map[string]string) bool {
	switch l["resource"] {
	case "databases":
		return l["verb"] != "POST" && l["verb"] != "GET" && l["verb"] != "LIST" && l["verb"] != "WATCH"
	case "secrets":
		return l["verb"] == "POST" || l["verb"] == "PATCH" || l["verb"] == "APPLY"
	default:
		return dbkeeperResources[l["resource"]] && l["verb"] == "APPLY"
	}
}

func isGet(l map[string]string) bool { return l["verb"] == "GET" && dbkeeperResources[l["resource"]] }

func resourceOf(l map[string]string) string { return l["resource"] }

func verbResource(l map[string]string) string {
	r := l["resource"]
	if l["subresource"] != "" {
		r += "/" + l["subresource"]
	}
	return l["verb"] + " " + r
}

// run measures one size: the floor, then the operator converging n
// Databases, and for the largest size the idle operator and its memory
// with many unrelated Secrets.
func run(b *testing.B, binary string, n int, largest bool) result {
	ctx := context.Background()
	r := result{N: n}

	b.Logf("N=%d: floor: a plain client creates the children of %d Databases", n, n)
	floor, err := measureFloor(ctx, local.Config, fmt.Sprintf("floor-%d", n), n, *workers)
	if err != nil {
		b.Fatal(err)
	}
	r.Floor = floor
	b.Logf("N=%d: floor created %d objects in %s, pods Ready in %s", n, floor.Writes, floor.Created.Round(time.Millisecond), floor.Ready.Round(time.Millisecond))

	ns := fmt.Sprintf("bench-%d", n)
	c, err := unthrottled(local.Config)
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	op, err := startOperator(ctx, b, binary, ns)
	if err != nil {
		b.Fatal(err)
	}
	api, err := newAPIServerScraper(local.Config)
	if err != nil {
		b.Fatal(err)
	}
	apiBefore, opBefore := mustScrape(b, api.scrape), mustScrape(b, op.scrape)

	started := time.Now()
	if err := parallel(ctx, *workers, n, func(ctx context.Context, i int) error {
		return c.Create(ctx, dbtest.New(ns, fmt.Sprintf("db-%04d", i)))
	}); err != nil {
		b.Fatalf("creating Databases: %v", err)
	}
	b.Logf("N=%d: created %d Databases in %s", n, n, time.Since(started).Round(time.Millisecond))
	r.Converged = waitDatabases(b, ns, n, started, current)
	b.Logf("N=%d: every facet condition current after %s", n, r.Converged.Round(time.Millisecond))
	r.Ready = waitDatabases(b, ns, n, started, ready)
	b.Logf("N=%d: every Database Ready after %s", n, r.Ready.Round(time.Millisecond))
	opAfter := waitQuiet(b, op)
	apiAfter := mustScrape(b, api.scrape)
	assertOneOfEach(b, ns, n)

	r.WritesByVerb = map[string]float64{}
	for k, v := range countBy(apiAfter, apiBefore, "apiserver_request_total", verbResource, operatorWrite) {
		r.WritesByVerb[k] = v / float64(n)
		r.WritesPerDB += v / float64(n)
	}
	r.Gets = countBy(apiAfter, apiBefore, "apiserver_request_total", resourceOf, isGet)
	r.ClientWritesPerDB = (opAfter.clientWrites() - opBefore.clientWrites()) / float64(n)
	r.Reconciles = opAfter.reconciles() - opBefore.reconciles()
	r.ReconcileErrors = opAfter.reconcileErrors() - opBefore.reconcileErrors()
	latency := opAfter.histogramOf("controller_runtime_reconcile_time_seconds", nil).
		minus(opBefore.histogramOf("controller_runtime_reconcile_time_seconds", nil))
	r.ReconcileP50, r.ReconcileP99 = latency.quantile(0.5), latency.quantile(0.99)
	r.PerController = map[string][2]float64{}
	for name := range opAfter.by("controller_runtime_reconcile_total", "controller", nil) {
		only := func(l map[string]string) bool { return l["controller"] == name }
		h := opAfter.histogramOf("controller_runtime_reconcile_time_seconds", only).
			minus(opBefore.histogramOf("controller_runtime_reconcile_time_seconds", only))
		r.PerController[name] = [2]float64{h.quantile(0.5), h.quantile(0.99)}
	}
	if r.Memory, err = sampleMemory(ctx, op, 5, time.Second); err != nil {
		b.Fatal(err)
	}
	b.Logf("N=%d: %.2f writes per Database (design floor %d), %.2f client writes, %.0f reconciles (%.0f errors), p50 %.1f ms p99 %.1f ms, RSS %.1f MiB heap %.1f MiB",
		n, r.WritesPerDB, designWrites, r.ClientWritesPerDB, r.Reconciles, r.ReconcileErrors, r.ReconcileP50*1000, r.ReconcileP99*1000, r.Memory.RSS/(1<<20), r.Memory.Heap/(1<<20))
	if largest {
		r.Idle = measureIdle(ctx, b, c, op, api, ns)
	}
	op.proc.Kill()
	return r
}

// measureIdle watches the converged operator for *idleFor, then adds
// *unrelated Secrets of 100 KiB to its namespace and reads its memory
// again.
func measureIdle(ctx context.Context, b *testing.B, c client.Client, op *operatorProcess, api *apiServerScraper, ns string) *idleResult {
	idle := &idleResult{For: *idleFor, Resync: *resync, Secrets: *unrelated}
	var err error
	if idle.Before, err = sampleMemory(ctx, op, 5, time.Second); err != nil {
		b.Fatal(err)
	}
	b.Logf("idle: watching the operator for %s (resync %s)", *idleFor, *resync)
	apiBefore, opBefore := mustScrape(b, api.scrape), mustScrape(b, op.scrape)
	time.Sleep(*idleFor)
	apiAfter, opAfter := mustScrape(b, api.scrape), mustScrape(b, op.scrape)
	idle.Writes = opAfter.clientWrites() - opBefore.clientWrites()
	idle.ClientGets = opAfter.clientGets() - opBefore.clientGets()
	idle.Reconciles = opAfter.reconciles() - opBefore.reconciles()
	idle.Gets = countBy(apiAfter, apiBefore, "apiserver_request_total", resourceOf, isGet)
	b.Logf("idle: %.0f writes, %.0f reconciles, %.0f client GETs (lists and watches included)", idle.Writes, idle.Reconciles, idle.ClientGets)

	b.Logf("idle: creating %d unrelated Secrets of 100 KiB in %s", *unrelated, ns)
	payload := make([]byte, 100<<10)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	if err := parallel(ctx, *workers, *unrelated, func(ctx context.Context, i int) error {
		return c.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("unrelated-%05d", i), Labels: map[string]string{"app": "unrelated"}},
			Data:       map[string][]byte{"blob": payload},
		})
	}); err != nil {
		b.Fatalf("creating unrelated Secrets: %v", err)
	}
	time.Sleep(10 * time.Second)
	if idle.WithSecrets, err = sampleMemory(ctx, op, 5, time.Second); err != nil {
		b.Fatal(err)
	}
	b.Logf("idle: RSS %.1f -> %.1f MiB, heap %.1f -> %.1f MiB with %d unrelated Secrets",
		idle.Before.RSS/(1<<20), idle.WithSecrets.RSS/(1<<20), idle.Before.Heap/(1<<20), idle.WithSecrets.Heap/(1<<20), *unrelated)
	return idle
}

// countBy is the increase of metric between two scrapes, by key, over
// the series that match.
func countBy(after, before scrape, metric string, key func(map[string]string) string, match func(map[string]string) bool) map[string]float64 {
	out := map[string]float64{}
	add := func(s scrape, sign float64) {
		f, ok := s[metric]
		if !ok {
			return
		}
		for _, m := range f.GetMetric() {
			l := labelMap(m)
			if match(l) {
				out[key(l)] += sign * m.GetCounter().GetValue()
			}
		}
	}
	add(after, 1)
	add(before, -1)
	for k, v := range out {
		if v == 0 {
			delete(out, k)
		}
	}
	return out
}

func mustScrape(b *testing.B, read func(context.Context) (scrape, error)) scrape {
	b.Helper()
	s, err := read(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func current(db *dbv1.Database) bool {
	for _, t := range facetConditions {
		c := meta.FindStatusCondition(db.Status.Conditions, t)
		if c == nil || c.ObservedGeneration != db.Generation {
			return false
		}
	}
	return true
}

func ready(db *dbv1.Database) bool {
	return current(db) && meta.IsStatusConditionTrue(db.Status.Conditions, dbv1.ConditionReady)
}

// waitDatabases lists the namespace's Databases until n of them satisfy
// done, and returns the time from started to the list that showed it.
func waitDatabases(b *testing.B, ns string, n int, started time.Time, done func(*dbv1.Database) bool) time.Duration {
	b.Helper()
	var took time.Duration
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 30*time.Minute, true, func(ctx context.Context) (bool, error) {
		list := &dbv1.DatabaseList{}
		if err := local.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
			return false, nil
		}
		took = time.Since(started)
		count := 0
		for i := range list.Items {
			if done(&list.Items[i]) {
				count++
			}
		}
		return count == n, nil
	})
	if err != nil {
		b.Fatalf("waiting for %d Databases in %s: %v", n, ns, err)
	}
	return took
}

// waitQuiet waits until the operator has made no write for quietFor and
// returns its metrics then.
func waitQuiet(b *testing.B, op *operatorProcess) scrape {
	b.Helper()
	const quietFor = 5 * time.Second
	last := mustScrape(b, op.scrape)
	since := time.Now()
	for time.Since(since) < quietFor {
		time.Sleep(time.Second)
		now := mustScrape(b, op.scrape)
		if now.clientWrites() != last.clientWrites() {
			since = time.Now()
		}
		last = now
	}
	return last
}

// assertOneOfEach checks every Database in ns has exactly one of each
// child, controlled by it: one list per kind, grouped by controller UID.
func assertOneOfEach(b *testing.B, ns string, n int) {
	b.Helper()
	ctx := context.Background()
	dbs := &dbv1.DatabaseList{}
	if err := local.Client.List(ctx, dbs, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	for _, k := range dbtest.ChildKinds() {
		objs, err := k.List(ctx, local.Client, ns, client.MatchingLabels{resources.LabelManagedBy: resources.ManagedBy})
		if err != nil {
			b.Fatal(err)
		}
		byOwner := map[types.UID]int{}
		uidOf := map[string]types.UID{}
		for _, db := range dbs.Items {
			uidOf[db.Name] = db.UID
		}
		for _, obj := range objs {
			if k.Unowned {
				// By the instance label: these carry no owner reference.
				if uid, ok := uidOf[obj.GetLabels()[resources.LabelInstance]]; ok && len(obj.GetOwnerReferences()) == 0 {
					byOwner[uid]++
				}
			} else if ref := metav1.GetControllerOfNoCopy(obj); ref != nil {
				byOwner[ref.UID]++
			}
		}
		for _, db := range dbs.Items {
			if got := byOwner[db.UID]; got != k.PerDatabase {
				b.Fatalf("Database %s has %d %s children, want %d", db.Name, got, k.Kind, k.PerDatabase)
			}
		}
		if len(objs) != k.PerDatabase*n {
			b.Fatalf("%d %s objects in %s for %d Databases, want %d", len(objs), k.Kind, ns, n, k.PerDatabase*n)
		}
	}
}
