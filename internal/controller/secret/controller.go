// Package secret is the controller of a Database's credentials. It generates
// the <name>-credentials Secret once and never regenerates it, or checks the
// user's Secret named in spec.credentials.secretName and never modifies it;
// it generates <name>-superuser once, and <name>-replication (the
// replication role's password and the agents' token) once; and it keeps
// the server in line with
// the application's Secret: the role, its database, and its password, set
// whenever the Secret's password changes (docs/design/roles-and-rotation.md).
// It owns the CredentialsReady condition, status.credentials and the
// deprecated status.credentialsSecret.
package secret

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// Name is the controller's name in --controllers.
const Name = "secret"

// PasswordBytes is the number of random bytes in a generated password (256
// bits), encoded as unpadded URL-safe base64.
const PasswordBytes = 32

// IndexSecretName is the field index of Databases by the user's Secret
// they name in spec.credentials.secretName.
const IndexSecretName = "spec.credentials.secretName"

// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases,verbs=get;list;watch
// +kubebuilder:rbac:groups=database.dbkeeper.io,resources=databases/status,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// ReasonSecretKeysRestored is the reason of the Event of a generated
// Secret whose keys derived from the password somebody else changed and
// dbkeeper set back.
const ReasonSecretKeysRestored = "SecretKeysRestored"

// Controller is the secret controller.
type Controller struct{}

// New returns the secret controller.
func New() Controller { return Controller{} }

// Name implements controller.Controller.
func (Controller) Name() string { return Name }

// ConditionType implements controller.Controller.
func (Controller) ConditionType() string { return dbv1.ConditionCredentialsReady }

// SetupWithManager implements controller.Controller.
func (c Controller) SetupWithManager(mgr ctrl.Manager, o facet.Options) error {
	w := facet.NewWriter(mgr, Name)
	s := newSyncer(mgr.GetClient(), mgr.GetAPIReader(), w, o.Instances)
	s.metadata = mgr.GetCache()
	s.marks.Key = o.MarkerKey
	r := facet.NewReconciler(mgr.GetClient(), w, c.ConditionType(), s, o)
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &dbv1.Database{}, IndexSecretName, secretNameOf); err != nil {
		return fmt.Errorf("indexing Databases by %s: %w", IndexSecretName, err)
	}
	b := ctrl.NewControllerManagedBy(mgr)
	if o.SecretMetadata != nil {
		// Every Secret's metadata, from the second cache (the main one
		// holds only dbkeeper's labelled Secrets): a user's Secret changes,
		// appears or goes, and the Databases naming it are reconciled at
		// once; so is a Database whose generated name a foreign Secret took.
		secretMeta := &metav1.PartialObjectMetadata{}
		secretMeta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		b = b.WatchesRawSource(source.Kind(o.SecretMetadata, client.Object(secretMeta),
			handler.EnqueueRequestsFromMapFunc(databasesNaming(mgr.GetClient()))))
	}
	return b.
		Named(Name).
		For(&dbv1.Database{}, facet.ForDatabase()).
		// The generated Secret has no owner reference (a deletion policy
		// may keep it): find its Database by the instance label. Metadata
		// only: the cache never holds a password.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(facet.DatabaseOf(resources.ComponentCredentials)), builder.OnlyMetadata).
		// The superuser Secret likewise (a second handler on the same
		// metadata informer).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(facet.DatabaseOf(resources.ComponentSuperuser)), builder.OnlyMetadata).
		// Instance 0 turning Ready (or getting a new IP) is when a pending
		// password can reach the server.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(facet.DatabaseOf(resources.ComponentDatabase)),
			builder.WithPredicates(instance.ReachabilityChanged())).
		// The replication Secret: the engine pods cannot start without it.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(facet.DatabaseOf(resources.ComponentReplication)), builder.OnlyMetadata).
		// The server's TLS Secret: its ca.crt is copied into the generated
		// Secret.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(facet.DatabaseOf(resources.ComponentTLS)), builder.OnlyMetadata).
		WithOptions(facet.ControllerOptions(o)).
		Complete(r)
}

// SetupDisabled implements controller.Controller.
func (c Controller) SetupDisabled(mgr ctrl.Manager, o facet.Options) error {
	return facet.SetupDisabled(mgr, Name, c.ConditionType(), o)
}

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
	pending sync.Map
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

// restoreData puts back the keys of a generated Secret derived from its
// password (username, database, host, port, uri) when somebody changed or
// removed them, and reports a Secret that lost its password, which
// dbkeeper cannot restore and never regenerates. It returns nil when the
// data is right.
func (s *syncer) restoreData(ctx context.Context, db *dbv1.Database, cachedVersion string) (*facet.Outcome, error) {
	key := client.ObjectKey{Namespace: db.Namespace, Name: resources.GeneratedSecretName(db)}
	tlsVersion, err := s.tlsVersion(ctx, db)
	if err != nil {
		return nil, err
	}
	version := cachedVersion + "/" + tlsVersion
	if v, ok := s.checked.Load(key); ok && v == version {
		return nil, nil
	}
	eng, err := engine.For(db.Spec.Engine)
	if err != nil {
		return nil, reconcile.TerminalError(err)
	}
	sec := &corev1.Secret{}
	if err := s.reader.Get(ctx, key, sec); err != nil {
		return nil, fmt.Errorf("getting Secret %s: %w", key.Name, err)
	}
	if _, ok := sec.Data[engine.PasswordKey]; !ok {
		return &facet.Outcome{Condition: conditions.False(dbv1.ConditionCredentialsReady, dbv1.ReasonSecretInvalid, fmt.Sprintf(
			"Secret %s lost its %s key: dbkeeper never generates a second password, since the database keeps the first; put it back",
			key.Name, engine.PasswordKey))}, nil
	}
	tls, err := s.clientTLS(ctx, db, sec.Data)
	if err != nil {
		return nil, err
	}
	if drift := resources.CredentialsDrift(db, eng, sec.Data, tls); len(drift) > 0 {
		patch := client.MergeFrom(sec.DeepCopy())
		keys := make([]string, 0, len(drift))
		for k, v := range drift {
			sec.Data[k] = v
			keys = append(keys, k)
		}
		slices.Sort(keys)
		log.FromContext(ctx).Info("Restoring credentials Secret keys changed by somebody else", "Secret", klog.KObj(sec), "keys", keys)
		if err := s.client.Patch(ctx, sec, patch, client.FieldOwner(facet.FieldOwner(Name))); err != nil {
			return nil, fmt.Errorf("restoring keys %s of Secret %s: %w", strings.Join(keys, ","), key.Name, err)
		}
		// Key names only: the values are the credentials.
		s.writer.Eventf(db, sec, corev1.EventTypeNormal, ReasonSecretKeysRestored, "RestoreKeys",
			"Restored keys %s of Secret %s changed by somebody else", strings.Join(keys, ", "), key.Name)
	}
	s.checked.Store(key, sec.ResourceVersion+"/"+tlsVersion)
	return nil, nil
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

func (s *syncer) checkUserSecret(ctx context.Context, db *dbv1.Database) (facet.Outcome, error) {
	name := resources.CredentialsSecretName(db)
	t := dbv1.ConditionCredentialsReady
	sec, err := apply.Live(ctx, s.reader, client.ObjectKey{Namespace: db.Namespace, Name: name}, &corev1.Secret{})
	if err != nil {
		return facet.Outcome{}, fmt.Errorf("getting Secret %s: %w", name, err)
	}
	if sec == nil {
		return facet.Outcome{
			Condition: conditions.False(t, dbv1.ReasonSecretNotFound, fmt.Sprintf("Secret %s named in spec.credentials.secretName does not exist: create it with the keys %s and %s", name, engine.UsernameKey, engine.PasswordKey)),
		}, nil
	}
	if missing := missingKeys(sec.Data); len(missing) > 0 {
		return facet.Outcome{
			Condition: conditions.False(t, dbv1.ReasonSecretInvalid, fmt.Sprintf("Secret %s lacks the key(s) %s: add them (dbkeeper never modifies this Secret)", name, strings.Join(missing, ", "))),
		}, nil
	}
	msg := fmt.Sprintf("using Secret %s from spec.credentials.secretName", name)
	if !optedIn(sec, db.Name) {
		ask := fmt.Sprintf("add the annotation %s: %s to it", dbv1.AnnotationCredentialsFor, db.Name)
		// in use: its password was set on the server before
		if appliedVersion(db, name) == "" {
			return facet.Outcome{Condition: conditions.False(t, dbv1.ReasonSecretNotOptedIn, fmt.Sprintf(
				"Secret %s named in spec.credentials.secretName does not say this Database may use it: %s (dbkeeper uses a Secret it did not make only with it)",
				name, ask))}, nil
		}
		// in use since before the annotation was asked for: kept, and
		// said
		msg += fmt.Sprintf("; it lacks the annotation %s, without which a new Database would not use it: %s", dbv1.AnnotationCredentialsFor, ask)
	}
	return facet.Outcome{
		Condition: conditions.True(t, dbv1.ReasonSecretProvided, msg),
		Status:    dbv1ac.DatabaseStatus().WithCredentialsSecret(name),
	}, nil
}

// optedIn reports whether sec's AnnotationCredentialsFor names the
// Database called name.
func optedIn(sec *corev1.Secret, name string) bool {
	for _, n := range strings.Split(sec.Annotations[dbv1.AnnotationCredentialsFor], ",") {
		if strings.TrimSpace(n) == name {
			return true
		}
	}
	return false
}

// ensureGenerated creates the generated Secret if it does not exist and keeps
// its labels and the keys derived from the password, and takes off the
// owner reference to the Database that earlier versions gave it. The
// password is written exactly once, by Create: a Secret that already
// exists, in the cache or only on the server, keeps its password.
func (s *syncer) ensureGenerated(ctx context.Context, db *dbv1.Database) (facet.Outcome, error) {
	name := resources.GeneratedSecretName(db)
	t := dbv1.ConditionCredentialsReady
	partial := &metav1.PartialObjectMetadata{}
	partial.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	live, err := apply.Live(ctx, s.client, client.ObjectKey{Namespace: db.Namespace, Name: name}, partial)
	switch {
	case err != nil:
		return facet.Outcome{}, fmt.Errorf("getting Secret %s: %w", name, err)
	case live == nil:
		created, err := s.create(ctx, db)
		if err != nil {
			return facet.Outcome{}, err
		}
		if !created {
			// It exists on the server but not in our label-selected cache:
			// a Secret somebody else made under the generated name.
			return s.adoptForeign(ctx, db)
		}
	default:
		if err := s.made(ctx, db, live); err != nil {
			return facet.Outcome{}, err
		}
		// A conflict: the Secret changed since the cache saw it, and that
		// change brings us back.
		if _, err := facet.Disown(ctx, s.client, db, live); err != nil && !apierrors.IsConflict(err) {
			return facet.Outcome{}, err
		}
		if _, err := s.writer.Apply(ctx, live, resources.CredentialsSecretMetadata(db)); err != nil {
			return facet.Outcome{}, fmt.Errorf("applying metadata of Secret %s: %w", name, err)
		}
		if out, err := s.restoreData(ctx, db, live.ResourceVersion); err != nil || out != nil {
			return ptr.Deref(out, facet.Outcome{}), err
		}
	}
	return facet.Outcome{
		Condition: conditions.True(t, dbv1.ReasonSecretGenerated, fmt.Sprintf("dbkeeper generated Secret %s and keeps it", name)),
		Status:    dbv1ac.DatabaseStatus().WithCredentialsSecret(name),
	}, nil
}

// ensureReplication creates <name>-replication once, with a new
// replication password and agent token, and never regenerates it while it
// exists (the servers keep the password); it keeps its labels and owner
// reference. The cache holds its metadata only.
func (s *syncer) ensureReplication(ctx context.Context, db *dbv1.Database) error {
	name := resources.ReplicationSecretName(db)
	partial := &metav1.PartialObjectMetadata{}
	partial.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	live, err := apply.Live(ctx, s.client, client.ObjectKey{Namespace: db.Namespace, Name: name}, partial)
	if err != nil {
		return fmt.Errorf("getting Secret %s: %w", name, err)
	}
	if live != nil {
		if _, err := s.writer.Apply(ctx, live, resources.ReplicationSecretMetadata(db)); err != nil {
			return fmt.Errorf("applying metadata of Secret %s: %w", name, err)
		}
		return nil
	}
	password, err := NewPassword()
	if err != nil {
		return err
	}
	token, err := NewPassword()
	if err != nil {
		return err
	}
	sec := resources.ReplicationSecret(db, password, token)
	log.FromContext(ctx).Info("Generating replication Secret", "Secret", klog.KObj(sec))
	err = s.client.Create(ctx, sec, client.FieldOwner(facet.FieldOwner(Name)))
	if apierrors.IsAlreadyExists(err) {
		// Not in the label-selected cache yet, or made by somebody else
		// (whose password the pods would then use): never overwritten,
		// and used only when it is this Database's.
		return s.ours(ctx, db, name)
	}
	if err != nil {
		return fmt.Errorf("creating Secret %s: %w", name, err)
	}
	return nil
}

// ours reads the metadata of Secret name from the API server and returns
// facet.NotOursError unless it is db's (facet.OurSecret).
func (s *syncer) ours(ctx context.Context, db *dbv1.Database, name string) error {
	partial := &metav1.PartialObjectMetadata{}
	partial.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := s.reader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, partial); err != nil {
		return fmt.Errorf("getting Secret %s: %w", name, err)
	}
	return facet.OurSecret(db, partial)
}

// made checks that the credentials or superuser Secret found under its
// generated name (live) is one dbkeeper made (facet.Marks.Check): marked,
// or used by the Database already, which is then marked; otherwise
// facet.NotOursError.
func (s *syncer) made(ctx context.Context, db *dbv1.Database, live client.Object) error {
	sec, marked, err := s.marks.Check(ctx, s.reader, db, live.GetName(), live.GetResourceVersion())
	if err != nil || marked || sec == nil {
		return err
	}
	patch := client.MergeFrom(sec.DeepCopy())
	s.marks.Key.Mark(sec, engine.PasswordKey)
	if err := s.client.Patch(ctx, sec, patch, client.FieldOwner(facet.FieldOwner(Name))); err != nil {
		return fmt.Errorf("marking Secret %s: %w", sec.Name, err)
	}
	log.FromContext(ctx).Info("Marked a Secret the Database already uses", "Secret", klog.KObj(sec))
	s.marks.Remember(sec)
	return nil
}

// create makes the Secret with a new password; false means it already existed.
func (s *syncer) create(ctx context.Context, db *dbv1.Database) (bool, error) {
	eng, err := engine.For(db.Spec.Engine)
	if err != nil {
		return false, reconcile.TerminalError(err)
	}
	password, err := NewPassword()
	if err != nil {
		return false, err
	}
	tls, err := s.clientTLS(ctx, db, nil)
	if err != nil {
		return false, err
	}
	sec := resources.CredentialsSecret(db, eng, password, tls)
	s.marks.Key.Mark(sec, engine.PasswordKey)
	log.FromContext(ctx).Info("Generating credentials Secret", "Secret", klog.KObj(sec))
	err = s.client.Create(ctx, sec, client.FieldOwner(facet.FieldOwner(Name)))
	if apierrors.IsAlreadyExists(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("creating Secret %s: %w", sec.Name, err)
	}
	// Not remembered as checked: the next reconcile compares it with the
	// TLS Secret's version, which may have arrived meanwhile.
	return true, nil
}

// tlsVersion identifies what the generated Secret's TLS keys derive from:
// whether the server uses TLS and which CA its TLS Secret holds (its
// tls.dbkeeper.io/ca-sha256 annotation, or its resourceVersion for a
// Secret without one, as cert-manager's), from the metadata cache, so
// that the data is read again only when one of them changed; a renewed
// certificate from the same CA changes nothing here.
func (s *syncer) tlsVersion(ctx context.Context, db *dbv1.Database) (string, error) {
	state, err := facet.TLSState(ctx, s.client, db)
	if err != nil {
		return "", err
	}
	if !state.On() {
		return string(state), nil
	}
	live, err := s.tlsMetadata(ctx, db)
	if err != nil || live == nil {
		return string(state) + "/-", err
	}
	if sum := live.Annotations[resources.AnnotationCASHA256]; sum != "" {
		return string(state) + "/" + sum, nil
	}
	return string(state) + "/" + live.ResourceVersion, nil
}

func (s *syncer) tlsMetadata(ctx context.Context, db *dbv1.Database) (*metav1.PartialObjectMetadata, error) {
	partial := &metav1.PartialObjectMetadata{}
	partial.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	r := s.metadata
	if r == nil {
		r = s.client
	}
	live, err := apply.Live(ctx, r, client.ObjectKey{Namespace: db.Namespace, Name: resources.TLSSecretName(db)}, partial)
	if err != nil {
		return nil, fmt.Errorf("getting Secret %s: %w", resources.TLSSecretName(db), err)
	}
	return live, nil
}

// clientTLS is what the generated Secret says of the server's TLS: on or
// off, and the ca.crt of the server's TLS Secret (nil while that Secret
// does not exist). have is the generated Secret's data (nil when it is
// being created): when its ca.crt is the one the TLS Secret's annotation
// names, the TLS Secret is not read.
func (s *syncer) clientTLS(ctx context.Context, db *dbv1.Database, have map[string][]byte) (resources.ClientTLS, error) {
	state, err := facet.TLSState(ctx, s.client, db)
	if err != nil || !state.On() {
		return resources.ClientTLS{}, err
	}
	tls := resources.ClientTLS{On: resources.TLSOn}
	meta, err := s.tlsMetadata(ctx, db)
	if err != nil {
		return resources.ClientTLS{}, err
	}
	if meta == nil && len(have[resources.CAKey]) == 0 {
		return tls, nil // no CA yet: the TLS Secret's arrival brings us back
	}
	sum := ""
	if meta != nil {
		sum = meta.Annotations[resources.AnnotationCASHA256]
	}
	if sum != "" && len(have[resources.CAKey]) > 0 && resources.CASHA256(have[resources.CAKey]) == sum {
		tls.CA = have[resources.CAKey]
		return tls, nil
	}
	name := resources.TLSSecretName(db)
	sec, err := apply.Live(ctx, s.reader, client.ObjectKey{Namespace: db.Namespace, Name: name}, &corev1.Secret{})
	if err != nil {
		return resources.ClientTLS{}, fmt.Errorf("getting Secret %s: %w", name, err)
	}
	if sec != nil {
		tls.CA = sec.Data[resources.CACertKey]
	}
	return tls, nil
}

// adoptForeign handles a Secret of the generated name that exists on the
// server but not in the label-selected cache. One dbkeeper made whose
// labels somebody took off (it still carries the record of the secret
// controller's last apply) gets them back and keeps its password. Any
// other is refused: whoever may create Secrets in the namespace could
// otherwise choose the password of a Database not yet made. A Secret of
// the user's is named in spec.credentials.secretName.
func (s *syncer) adoptForeign(ctx context.Context, db *dbv1.Database) (facet.Outcome, error) {
	name := resources.GeneratedSecretName(db)
	partial := &metav1.PartialObjectMetadata{}
	partial.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := s.reader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, partial); err != nil {
		return facet.Outcome{}, fmt.Errorf("getting existing Secret %s: %w", name, err)
	}
	if _, err := s.writer.Apply(ctx, nil, resources.CredentialsSecretMetadata(db)); err != nil {
		var taken *facet.NotOursError
		if errors.As(err, &taken) {
			taken.Why += "; to use the password it holds, name it in spec.credentials.secretName"
			return facet.Outcome{}, taken
		}
		return facet.Outcome{}, fmt.Errorf("labelling Secret %s again: %w", name, err)
	}
	log.FromContext(ctx).Info("Labelled the credentials Secret again", "Secret", klog.KObj(partial))
	return facet.Outcome{
		Condition: conditions.True(dbv1.ConditionCredentialsReady, dbv1.ReasonSecretGenerated, fmt.Sprintf("dbkeeper generated Secret %s and keeps it", name)),
		Status:    dbv1ac.DatabaseStatus().WithCredentialsSecret(name),
	}, nil
}

func (s *syncer) CurrentStatus(db *dbv1.Database) *dbv1ac.DatabaseStatusApplyConfiguration {
	if db.Status.CredentialsSecret == "" && db.Status.Credentials == nil {
		return nil
	}
	st := dbv1ac.DatabaseStatus()
	if db.Status.CredentialsSecret != "" {
		st.WithCredentialsSecret(db.Status.CredentialsSecret)
	}
	if c := db.Status.Credentials; c != nil {
		ac := dbv1ac.CredentialsStatus()
		if c.Secret != "" {
			ac.WithSecret(c.Secret)
		}
		if c.SuperuserSecret != "" {
			ac.WithSuperuserSecret(c.SuperuserSecret)
		}
		if c.AppliedResourceVersion != "" {
			ac.WithAppliedResourceVersion(c.AppliedResourceVersion)
		}
		st.WithCredentials(ac)
	}
	return st
}

// missingKeys lists the keys a credentials Secret lacks: a username, and a
// password key (an empty password is refused later, as a rotation the
// server does not take, RotationFailed).
func missingKeys(data map[string][]byte) []string {
	var missing []string
	if len(data[engine.UsernameKey]) == 0 {
		missing = append(missing, engine.UsernameKey)
	}
	if _, ok := data[engine.PasswordKey]; !ok {
		missing = append(missing, engine.PasswordKey)
	}
	return missing
}

// NewPassword returns PasswordBytes bytes from crypto/rand as unpadded
// URL-safe base64: safe in URIs and shells, and 256 bits of entropy.
func NewPassword() (string, error) {
	b := make([]byte, PasswordBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("reading random bytes for a password: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// secretNameOf is the IndexSecretName index function.
func secretNameOf(obj client.Object) []string {
	db, ok := obj.(*dbv1.Database)
	if !ok || !resources.UserSecret(db) {
		return nil
	}
	return []string{db.Spec.Credentials.SecretName}
}

// databasesNaming maps a Secret to the Databases of its namespace whose
// spec.credentials.secretName names it, read through the field index of
// the cache c, and to the Database whose generated Secret would have its
// name.
func databasesNaming(c client.Reader) handler.MapFunc {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		dbs := &dbv1.DatabaseList{}
		if err := c.List(ctx, dbs, client.InNamespace(obj.GetNamespace()), client.MatchingFields{IndexSecretName: obj.GetName()}); err != nil {
			log.FromContext(ctx).Error(err, "Listing the Databases that name a Secret", "Secret", klog.KObj(obj))
			return nil
		}
		var reqs []reconcile.Request
		for i := range dbs.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&dbs.Items[i])})
		}
		if name, ok := strings.CutSuffix(obj.GetName(), resources.GeneratedSecretSuffix); ok && name != "" {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: obj.GetNamespace(), Name: name}})
		}
		return reqs
	}
}
