package plugin

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

var (
	databaseName = regexp.MustCompile(`^[a-z]([-a-z0-9]*[a-z0-9])?$`)
	namespaceRE  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	lsnRE        = regexp.MustCompile(`^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$`)
)

// RecoveryDatabase is a new Database, name in namespace, that recovers
// source's archive up to target (nil: the archive's end): the source's
// engine, version, image, replicas, storage, resources, backups (a
// repository of its own, which recovery needs) and high availability,
// with TLS, which recovery needs too.
func RecoveryDatabase(source *dbv1.Database, namespace, name string, target *dbv1.RecoveryTarget) *dbv1.Database {
	s := source.Spec
	db := &dbv1.Database{
		TypeMeta:   metav1.TypeMeta{APIVersion: dbv1.GroupVersion.String(), Kind: "Database"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: dbv1.DatabaseSpec{
			Engine: s.Engine, Version: s.Version, Image: s.Image, Replicas: s.Replicas,
			Storage: s.Storage, Resources: s.Resources, Backup: *s.Backup.DeepCopy(),
			HighAvailability: *s.HighAvailability.DeepCopy(), NetworkPolicy: *s.NetworkPolicy.DeepCopy(),
			Bootstrap: &dbv1.BootstrapSpec{Recovery: &dbv1.BootstrapRecovery{Database: source.Name, Target: target}},
		},
	}
	if namespace != source.Namespace {
		db.Spec.Bootstrap.Recovery.Namespace = source.Namespace
	}
	// a repository of its own: the object store's (another path in it),
	// else the backup volume's
	if db.Spec.Backup.VolumeRepository == dbv1.VolumeRepositoryDisabled {
		db.Spec.Backup.VolumeRepository = ""
	}
	if t := s.TLS; t != nil && t.Mode != dbv1.TLSModeDisabled {
		db.Spec.TLS = t.DeepCopy()
		if i := t.IssuerRef; i != nil && i.Kind != "ClusterIssuer" && namespace != source.Namespace {
			db.Spec.TLS.IssuerRef = nil // an Issuer of the source's namespace
		}
	}
	return db
}

// restore prints the manifest of RecoveryDatabase, with what to know
// before applying it as comments.
func restore(ctx context.Context, env Env, name string, o options) error {
	if o.to == "" {
		return fmt.Errorf("%w: restore needs --to NEWNAME", ErrUsage)
	}
	if o.targetTime != "" && o.targetLSN != "" {
		return fmt.Errorf("%w: restore takes --target-time or --target-lsn, not both", ErrUsage)
	}
	if !databaseName.MatchString(o.to) || len(o.to) > 45 {
		return fmt.Errorf("%w: --to %q is no Database name (lower-case letters, digits and '-', starting with a letter, at most 45 characters)", ErrUsage, o.to)
	}
	if o.toNS != "" && !namespaceRE.MatchString(o.toNS) {
		return fmt.Errorf("%w: --to-namespace %q is no namespace name", ErrUsage, o.toNS)
	}
	source, err := get(ctx, env, name)
	if err != nil {
		return err
	}
	ns := cmp.Or(o.toNS, source.Namespace)
	if ns == source.Namespace && o.to == source.Name {
		return fmt.Errorf("--to %s: a Database cannot recover into itself; name a new one", o.to)
	}
	b := source.Status.Backup
	if source.Spec.Backup.ObjectStore == nil {
		if b == nil || b.RepositoryPath == "" {
			return fmt.Errorf("Database %s/%s has no archive to recover from (no spec.backup.objectStore, and no repository on its backup volume yet: status.backup.repositoryPath)", source.Namespace, source.Name)
		}
		if ns != source.Namespace {
			return fmt.Errorf("Database %s/%s keeps its archive on its backup volume, which only Databases of namespace %s can recover from; give it spec.backup.objectStore to recover into namespace %s", source.Namespace, source.Name, source.Namespace, ns)
		}
	}
	var notes []string
	var target *dbv1.RecoveryTarget
	switch {
	case o.targetTime != "":
		t, err := time.Parse(time.RFC3339Nano, o.targetTime)
		if err != nil {
			return fmt.Errorf("%w: --target-time %q is not RFC 3339 (such as 2026-12-05T14:01:59Z)", ErrUsage, o.targetTime)
		}
		note, err := checkWindow(source, t, env.now())
		if err != nil {
			return err
		}
		notes = append(notes, note...)
		target = &dbv1.RecoveryTarget{Time: t.UTC().Format(time.RFC3339Nano)}
	case o.targetLSN != "":
		if !lsnRE.MatchString(o.targetLSN) {
			return fmt.Errorf("%w: --target-lsn %q is no WAL position (such as 0/3000060)", ErrUsage, o.targetLSN)
		}
		target = &dbv1.RecoveryTarget{LSN: o.targetLSN}
	}
	db := RecoveryDatabase(source, ns, o.to, target)
	notes = append(restoreNotes(source, db), notes...)
	m := clean(db)
	pruneEmpty(m)
	manifest, err := yaml.Marshal(m)
	if err != nil {
		return fmt.Errorf("encoding Database %s/%s: %w", ns, o.to, err)
	}
	w := &errWriter{w: env.Out}
	for _, n := range notes {
		w.printf("# %s\n", n)
	}
	_, _ = w.Write(manifest)
	return w.err
}

// checkWindow refuses a target time outside source's recoverable window,
// as its status shows it, and notes what the status cannot promise.
func checkWindow(source *dbv1.Database, t, now time.Time) ([]string, error) {
	if t.After(now) {
		return nil, fmt.Errorf("--target-time %s is in the future", t.UTC().Format(time.RFC3339))
	}
	b := source.Status.Backup
	if b == nil || b.FirstRecoverabilityPoint == nil {
		return []string{fmt.Sprintf("The status of %s/%s shows no recoverable window yet (status.backup.firstRecoverabilityPoint): the recovery needs a base backup that ended before the target.", source.Namespace, source.Name)}, nil
	}
	if first := b.FirstRecoverabilityPoint.Time; t.Before(first) {
		return nil, fmt.Errorf("--target-time %s is before the recoverable window of Database %s/%s, which begins at %s (status.backup.firstRecoverabilityPoint)",
			t.UTC().Format(time.RFC3339), source.Namespace, source.Name, first.UTC().Format(time.RFC3339))
	}
	if a := b.Archive; a != nil && a.LastArchivedTime != nil && t.After(a.LastArchivedTime.Time) {
		return []string{fmt.Sprintf("The target is after the last WAL segment archived (%s at %s): the recovery reaches it once the segments after it are archived (spec.backup.archiveTimeout).",
			a.LastArchivedWAL, a.LastArchivedTime.UTC().Format(time.RFC3339))}, nil
	}
	return nil, nil
}

// restoreNotes are the comments above a restore manifest: what it
// recovers, how to apply it, the consent it needs, the Secrets it needs in
// its namespace.
func restoreNotes(source, db *dbv1.Database) []string {
	rec := db.Spec.Bootstrap.Recovery
	to := "the archive's end"
	if t := rec.Target; t != nil {
		to = cmp.Or(t.Time, t.LSN)
	}
	notes := []string{
		fmt.Sprintf("Database %s/%s recovers the backups of %s/%s up to %s.", db.Namespace, db.Name, source.Namespace, source.Name, to),
	}
	if b := source.Status.Backup; b != nil && b.FirstRecoverabilityPoint != nil {
		end := "now"
		if a := b.Archive; a != nil && a.LastArchivedTime != nil {
			end = a.LastArchivedTime.UTC().Format(time.RFC3339) + " (the last archived WAL)"
		}
		notes = append(notes, fmt.Sprintf("Recoverable window of %s/%s: %s to %s.", source.Namespace, source.Name,
			b.FirstRecoverabilityPoint.UTC().Format(time.RFC3339), end))
	}
	notes = append(notes, "Nothing is applied yet: review, then kubectl apply -f this file.")
	if !resources.RestoreConsented(db, source) {
		notes = append(notes, fmt.Sprintf("%s/%s must consent to restores into namespace %s first (BackupReady says RecoveryRefused until then):", source.Namespace, source.Name, db.Namespace),
			fmt.Sprintf("  kubectl dbkeeper -n %s allow-restore %s %s", source.Namespace, source.Name, allowList(source, db.Namespace)))
	}
	if store := source.Spec.Backup.ObjectStore; store != nil && db.Namespace != source.Namespace {
		secrets := store.CredentialsSecret
		for _, s := range []string{store.CASecret, store.EncryptionSecret} {
			if s != "" {
				secrets += ", " + s
			}
		}
		notes = append(notes, fmt.Sprintf("The object store's Secrets (%s) must exist in namespace %s too.", secrets, db.Namespace))
	}
	if resources.UserSecret(source) {
		notes = append(notes, fmt.Sprintf("%s/%s names its own credentials Secret (%s): give the new Database one with the same username (spec.credentials.secretName) for its role to own the recovered data.",
			source.Namespace, source.Name, source.Spec.Credentials.SecretName))
	}
	return notes
}

// allowList is source's restore-allowed-namespaces with ns added.
func allowList(source *dbv1.Database, ns string) string {
	return strings.Join(append(resources.RestoreAllowedNamespaces(source), ns), ",")
}

// clean is obj as a map for YAML or JSON, without status and the
// metadata the API server sets.
func clean(obj runtime.Object) map[string]any {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return map[string]any{"error": err.Error()}
	}
	unstructured.RemoveNestedField(m, "status")
	unstructured.RemoveNestedField(m, "metadata", "creationTimestamp")
	return m
}

// pruneEmpty removes the empty objects of m (resources: {}, tls: {}),
// which say nothing the defaults do not.
func pruneEmpty(m map[string]any) {
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			pruneEmpty(sub)
			if len(sub) == 0 {
				delete(m, k)
			}
		}
	}
}
