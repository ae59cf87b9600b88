package resources

import (
	"fmt"
	"strings"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// RecoveryRefusedError says why the source of spec.bootstrap cannot be
// used.
type RecoveryRefusedError struct{ msg string }

func (e *RecoveryRefusedError) Error() string { return e.msg }

func refuse(format string, args ...any) error {
	return &RecoveryRefusedError{msg: fmt.Sprintf(format, args...)}
}

// RestoreConsented says whether source lets db fill itself with source's
// data (a dump or a point-in-time recovery): its annotation
// database.dbkeeper.io/restore-allowed-namespaces lists db's namespace
// (its own namespace too: being in the same namespace is no consent) or
// "*".
func RestoreConsented(db, source *dbv1.Database) bool {
	for _, v := range RestoreAllowedNamespaces(source) {
		if v == "*" || v == db.Namespace {
			return true
		}
	}
	return false
}

// RestoreAllowedNamespaces are the entries of source's
// AnnotationRestoreAllowedNamespaces: namespaces, or "*".
func RestoreAllowedNamespaces(source *dbv1.Database) []string {
	var list []string
	for _, v := range strings.Split(source.Annotations[dbv1.AnnotationRestoreAllowedNamespaces], ",") {
		if v = strings.TrimSpace(v); v != "" {
			list = append(list, v)
		}
	}
	return list
}

// notConsented is the RecoveryRefusedError of field when source does not
// consent (RestoreConsented), with the command that gives consent.
func notConsented(field string, db, source *dbv1.Database) error {
	if RestoreConsented(db, source) {
		return nil
	}
	return refuse("%s: Database %s/%s does not allow restores into namespace %s: its owner consents with `kubectl annotate database -n %s %s %s=%s` (a comma-separated list of namespaces, or *)",
		field, source.Namespace, source.Name, db.Namespace, source.Namespace, source.Name, dbv1.AnnotationRestoreAllowedNamespaces, db.Namespace)
}

// DumpSourceRefused says why db may not restore the dumps of the Database
// spec.bootstrap.fromBackup names (nil: it may). source is that Database
// of db's namespace, nil when there is none. A Database restores its own
// predecessor's dumps (the same name, a Retained backup volume) and those
// of a Database that consents (RestoreConsented). The backup volume of a
// Database that no longer exists has nobody to consent: it is restorable
// by any Database of its namespace, as anyone who may run pods there can
// mount it (delete the PVC to withdraw it).
func DumpSourceRefused(db, source *dbv1.Database) error {
	from := db.Spec.Bootstrap.FromBackup
	if source == nil || from.Database == db.Name {
		return nil
	}
	return notConsented("spec.bootstrap.fromBackup.database", db, source)
}
