// Package facettest builds what the controller tests share: a fake client
// that knows the Database type and its status subresource, and a Database
// to reconcile.
package facettest

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// Scheme holds the built-in types and the Database.
func Scheme(t testing.TB) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := dbv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// Client is a fake client holding objs, with the Database's status as a
// subresource, as the API server has it.
func Client(t testing.TB, objs ...client.Object) client.WithWatch {
	t.Helper()
	return fake.NewClientBuilder().
		WithScheme(Scheme(t)).
		WithStatusSubresource(&dbv1.Database{}).
		WithObjects(objs...).
		Build()
}

// Database is the PostgreSQL 17 Database shop/orders at generation 1, with
// the cleanup finalizer (so the facets do not wait for it).
func Database() *dbv1.Database {
	return &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", UID: "orders-uid", Generation: 1,
			Finalizers: []string{dbv1.Finalizer}},
		Spec: dbv1.DatabaseSpec{Engine: dbv1.EnginePostgres, Version: "17"},
	}
}
