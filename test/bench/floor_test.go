package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/manager"
	"github.com/dbkeeper/dbkeeper/internal/resources"
	"github.com/dbkeeper/dbkeeper/test/framework/dbtest"
)

// floorResult is what a plain client takes to create the children of n
// Databases directly, with no operator in between.
type floorResult struct {
	// Created is from the first create to the last child stored.
	Created time.Duration
	// Ready is from the first create to every StatefulSet's pod Ready.
	Ready time.Duration
	// Writes is the number of creates the client made.
	Writes int64
}

// childrenOf is the objects the operator's builders make for db, as a
// plain client would create them: without the owner reference to a
// Database that does not exist here.
func childrenOf(db *dbv1.Database) ([]client.Object, error) {
	eng, err := engine.For(db.Spec.Engine)
	if err != nil {
		return nil, err
	}
	sts, err := resources.StatefulSet(db, eng, resources.TLSOff, "localhost/dbkeeper/manager:bench")
	if err != nil {
		return nil, err
	}
	cron, err := resources.BackupCronJob(db, eng, resources.TLSOff)
	if err != nil {
		return nil, err
	}
	var objs []client.Object
	for _, ac := range []any{sts, resources.ClientService(db, eng), resources.HeadlessService(db, eng), resources.BackupPVC(db), cron} {
		u, err := toUnstructured(ac)
		if err != nil {
			return nil, err
		}
		objs = append(objs, u)
	}
	secret := resources.CredentialsSecret(db, eng, randomPassword(), resources.ClientTLS{})
	secret.OwnerReferences = nil
	super := resources.SuperuserSecret(db, eng.Superuser(), randomPassword())
	return append(objs, secret, super), nil
}

// toUnstructured turns an apply configuration into the object it
// describes, with no owner references.
func toUnstructured(ac any) (*unstructured.Unstructured, error) {
	data, err := json.Marshal(ac)
	if err != nil {
		return nil, fmt.Errorf("encoding %T: %w", ac, err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		return nil, fmt.Errorf("decoding %T: %w", ac, err)
	}
	u.SetOwnerReferences(nil)
	return u, nil
}

func randomPassword() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// measureFloor creates the children of n Databases in namespace ns with
// `workers` parallel creates through a client with no client-side rate
// limit (as the operator's), and waits for every pod to be Ready.
func measureFloor(ctx context.Context, cfg *rest.Config, ns string, n, workers int) (floorResult, error) {
	c, err := unthrottled(cfg)
	if err != nil {
		return floorResult{}, err
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return floorResult{}, fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	// One server-side dry run gives the defaulted spec the builders read.
	template := dbtest.New(ns, "template")
	if err := c.Create(ctx, template, client.DryRunAll); err != nil {
		return floorResult{}, fmt.Errorf("defaulting a Database: %w", err)
	}
	var objs []client.Object
	for i := range n {
		db := template.DeepCopy()
		db.Name = fmt.Sprintf("db-%04d", i)
		children, err := childrenOf(db)
		if err != nil {
			return floorResult{}, err
		}
		objs = append(objs, children...)
	}

	started := time.Now()
	if err := parallel(ctx, workers, len(objs), func(ctx context.Context, i int) error {
		if err := c.Create(ctx, objs[i]); err != nil {
			return fmt.Errorf("creating %T %s: %w", objs[i], objs[i].GetName(), err)
		}
		return nil
	}); err != nil {
		return floorResult{}, err
	}
	r := floorResult{Created: time.Since(started), Writes: int64(len(objs))}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Minute, true, func(ctx context.Context) (bool, error) {
		list := &appsv1.StatefulSetList{}
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			return false, nil
		}
		ready := 0
		for _, s := range list.Items {
			if s.Spec.Replicas != nil && s.Status.ReadyReplicas == *s.Spec.Replicas {
				ready++
			}
		}
		return ready == n, nil
	})
	if err != nil {
		return r, fmt.Errorf("waiting for the floor's %d StatefulSets to be Ready: %w", n, err)
	}
	r.Ready = time.Since(started)
	return r, nil
}

// parallel calls do(i) for i in [0, n) from `workers` goroutines and
// returns the first error, after which no new calls start.
func parallel(ctx context.Context, workers, n int, do func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		firstErr error
		once     sync.Once
		wg       sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := do(ctx, i); err != nil {
					once.Do(func() { firstErr = err; cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

// unthrottled is a client with no client-side rate limit, as the
// operator's: the benchmark's writers must not be slower than it.
func unthrottled(cfg *rest.Config) (client.Client, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	return client.New(cfg, client.Options{Scheme: manager.Scheme()})
}
