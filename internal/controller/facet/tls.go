package facet

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// TLSState is whether the Database's server uses TLS (resources.TLSFor),
// from spec.tls and the StatefulSet in c's cache, so that the controllers
// that build the server's pod and the pods and Secrets that reach it
// agree.
func TLSState(ctx context.Context, c client.Reader, db *dbv1.Database) (resources.TLSState, error) {
	live, err := apply.Live(ctx, c, client.ObjectKey{Namespace: db.Namespace, Name: resources.StatefulSetName(db)}, &appsv1.StatefulSet{})
	if err != nil {
		return "", fmt.Errorf("getting StatefulSet %s to learn whether its server uses TLS: %w", resources.StatefulSetName(db), err)
	}
	return resources.TLSFor(db, live), nil
}
