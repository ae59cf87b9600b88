package secret

import (
	"context"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// syncer keeps the generated credentials Secret or checks the user's.
type syncer struct {
	client client.Client
	// reader reads Secrets from the API server: the cache holds only the
	// metadata of dbkeeper's own Secrets, never a password.
	reader client.Reader
	// checked maps each generated Secret to the resourceVersion whose data
	// was last checked, so its data is read from the API server only after
	// it changed (and once per Secret after a restart), never on every
	// reconcile.
	checked sync.Map
	// writer applies the Secret's metadata and records the Events of the
	// repairs on the Database. An Event names keys, never a value.
	writer *facet.Writer
	// instances connects to the Databases' servers.
	instances instance.Connector
	// pending maps a Database whose server could not be reached to the
	// delay before the next attempt.
	pending facet.Backoff
	// rotated maps a Database to the last rotation this controller made
	// (a rotation), so that Rotated stays while nothing changes even when
	// the cached Database lags the status that said so.
	rotated sync.Map
	// metadata reads the TLS Secret's metadata from the informer: the
	// manager's client sends every Secret read, metadata too, to the API
	// server. Nil means client (the tests' fake).
	metadata client.Reader
	// marks marks the credentials and superuser Secrets this controller
	// makes and verifies those it finds (made); without a key it marks
	// and checks nothing (tests of other concerns).
	marks facet.Marks
}

// newSyncer is the secret syncer that reads metadata from and creates and
// patches with c, reads Secrets data with reader, which must read from the
// API server, applies and records Events with w, and reaches the servers
// through instances.
func newSyncer(c client.Client, reader client.Reader, w *facet.Writer, instances instance.Connector) *syncer {
	return &syncer{client: c, reader: reader, writer: w, instances: instances}
}

func (s *syncer) Sync(ctx context.Context, db *dbv1.Database) (facet.Outcome, error) {
	// First, whatever the credentials: the engine pods wait for it.
	if err := s.ensureReplication(ctx, db); err != nil {
		return facet.Outcome{}, err
	}
	var out facet.Outcome
	var err error
	if resources.UserSecret(db) {
		out, err = s.checkUserSecret(ctx, db)
	} else {
		out, err = s.ensureGenerated(ctx, db)
	}
	if err != nil || out.Condition.Status != metav1.ConditionTrue {
		out.Status = credentialsStatus(db, appliedVersion(db, resources.CredentialsSecretName(db)))
		return out, err
	}
	eng, err := engine.For(db.Spec.Engine)
	if err != nil {
		return facet.Outcome{}, reconcile.TerminalError(err)
	}
	return s.serverStep(ctx, db, eng, out.Condition)
}
