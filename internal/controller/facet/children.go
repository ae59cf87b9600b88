package facet

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// DatabaseOf maps a child of the given component to its Database by the
// instance label. It is the watch of the children that carry no owner
// reference (the generated Secret, the backup PVC), and of those that lost
// theirs (orphan deletion).
func DatabaseOf(component string) handler.MapFunc {
	return func(_ context.Context, obj client.Object) []reconcile.Request {
		l := obj.GetLabels()
		if l[resources.LabelComponent] != component || l[resources.LabelInstance] == "" || l[resources.LabelManagedBy] != resources.ManagedBy {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: l[resources.LabelInstance]}}}
	}
}

// DatabasesNaming is the Databases of the Secret's namespace whose field
// index (of the cache c) holds its name, each as a request: those that
// name a Secret of the user's.
func DatabasesNaming(ctx context.Context, c client.Reader, index string, secret client.Object) []reconcile.Request {
	dbs := &dbv1.DatabaseList{}
	if err := c.List(ctx, dbs, client.InNamespace(secret.GetNamespace()), client.MatchingFields{index: secret.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "Listing the Databases that name a Secret", "index", index, "Secret", klog.KObj(secret))
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(dbs.Items))
	for i := range dbs.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&dbs.Items[i])})
	}
	return reqs
}

// Disown removes every owner reference to the Database of db's name from
// obj, which must be live (read from the cache or the API server), with an
// optimistic lock. Earlier versions of dbkeeper gave the generated Secret
// and the backup PVC an owner reference, which lets garbage collection take
// them before the cleanup finalizer runs; the controller that keeps them
// calls this. A patch and not an apply: the Secret's reference was written
// by Create, so leaving it out of an apply would not remove it. It reports
// whether it patched. NotFound is no error; a conflict (obj changed since
// it was read) is returned, for the caller to decide: the watch brings the
// newer version back anyway.
func Disown(ctx context.Context, c client.Client, db *dbv1.Database, obj client.Object) (bool, error) {
	kept, changed := resources.WithoutDatabaseReferences(db, obj.GetOwnerReferences())
	if !changed {
		return false, nil
	}
	log.FromContext(ctx).Info("Removing the owner reference to the Database", Kind(c, obj), klog.KObj(obj))
	before := obj.DeepCopyObject().(client.Object)
	obj.SetOwnerReferences(kept)
	if len(kept) == 0 {
		obj.SetOwnerReferences(nil)
	}
	err := c.Patch(ctx, obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("removing the owner reference to Database %s from %s: %w", db.Name, obj.GetName(), err)
	}
	return true, nil
}

// Kind is the Kind of obj in c's scheme, the key under which a log line
// names it (with klog.KObj); "object" when the scheme does not know it.
func Kind(c client.Client, obj client.Object) string {
	if k := obj.GetObjectKind().GroupVersionKind().Kind; k != "" {
		return k
	}
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil {
		return "object"
	}
	return gvk.Kind
}
