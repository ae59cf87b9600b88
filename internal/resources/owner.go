package resources

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// OwnerReference is the controller reference of the children garbage
// collection may take with the Database: the StatefulSet, the Services,
// the CronJob and the backup Jobs. What a deletion policy may keep (the
// generated Secret, the backup PVC; the data PVCs belong to the
// StatefulSet's claim template) never carries it, since the collector
// could take it before the cleanup finalizer runs (foreground deletion) or
// without it (cleanup switched off).
func OwnerReference(db *dbv1.Database) *metav1ac.OwnerReferenceApplyConfiguration {
	return metav1ac.OwnerReference().
		WithAPIVersion(dbv1.GroupVersion.String()).
		WithKind("Database").
		WithName(db.Name).
		WithUID(db.UID).
		WithController(true).
		WithBlockOwnerDeletion(true)
}

// ownerReferenceOf is OwnerReference as a metav1 value, for the children
// dbkeeper creates instead of applying.
func ownerReferenceOf(db *dbv1.Database) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         dbv1.GroupVersion.String(),
		Kind:               "Database",
		Name:               db.Name,
		UID:                db.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}
}

// IsDatabaseReference reports whether ref points to a Database of the given
// name (of any UID).
func IsDatabaseReference(ref metav1.OwnerReference, name string) bool {
	return IsDatabaseKind(ref) && ref.Name == name
}

// IsDatabaseKind reports whether ref points to a Database (of any name and
// any version of the group).
func IsDatabaseKind(ref metav1.OwnerReference) bool {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == dbv1.GroupVersion.Group && ref.Kind == "Database"
}

// WithoutDatabaseReferences returns refs without the references to the
// Database of db's name (whatever their UID: one to an earlier Database of
// the same name would let the collector take the object too), and whether
// there were any.
func WithoutDatabaseReferences(db *dbv1.Database, refs []metav1.OwnerReference) ([]metav1.OwnerReference, bool) {
	kept := make([]metav1.OwnerReference, 0, len(refs))
	for _, ref := range refs {
		if !IsDatabaseReference(ref, db.Name) {
			kept = append(kept, ref)
		}
	}
	return kept, len(kept) != len(refs)
}

// Belongs reports whether obj, found under one of db's child names, is
// db's: it carries db's instance label and dbkeeper's managed-by label, any
// owner reference to a Database of that name has db's UID, and nothing else
// controls it. An object of another Database incarnation, or one somebody
// else controls, is not db's, whatever its labels.
func Belongs(db *dbv1.Database, obj metav1.Object) bool {
	return NotBelonging(db.Name, db.UID, obj, false) == ""
}

// NotBelonging says why obj, found under a child name of the Database
// named name with UID uid, is not that Database's ("" when it is): see
// Belongs. An empty uid (the caller knows only the name) takes a
// reference to a Database of that name as this one's. strict asks for more than the labels: a controller reference
// to that Database, which an object made before the Database existed
// cannot carry (for the Secrets that always carry it: labels alone are
// what anybody who may create a Secret can write).
func NotBelonging(name string, uid types.UID, obj metav1.Object, strict bool) string {
	controlled := false
	for _, ref := range obj.GetOwnerReferences() {
		switch {
		case IsDatabaseReference(ref, name) && uid != "" && ref.UID != uid:
			return fmt.Sprintf("it belongs to an earlier Database %s (UID %s)", name, ref.UID)
		case IsDatabaseReference(ref, name):
			controlled = controlled || ptr.Deref(ref.Controller, false)
		case ptr.Deref(ref.Controller, false):
			return fmt.Sprintf("%s %s controls it", ref.Kind, ref.Name)
		}
	}
	l := obj.GetLabels()
	switch {
	case l[LabelManagedBy] != ManagedBy || l[LabelInstance] != name:
		return fmt.Sprintf("dbkeeper did not make it for this Database (it lacks the labels %s=%s and %s=%s)",
			LabelManagedBy, ManagedBy, LabelInstance, name)
	case strict && !controlled:
		return "dbkeeper did not make it for this Database (it has no owner reference to it)"
	}
	return ""
}

// IsDataPVCName reports whether name is one of the data PVCs the
// StatefulSet's claim template makes: data-<statefulset>-<ordinal>.
func IsDataPVCName(db *dbv1.Database, name string) bool {
	ordinal, ok := strings.CutPrefix(name, DataVolumeName+"-"+StatefulSetName(db)+"-")
	if !ok {
		return false
	}
	n, err := strconv.Atoi(ordinal)
	return err == nil && n >= 0 && strconv.Itoa(n) == ordinal
}

// onDemandSuffix is the part of an on-demand Job's name after <name>-now-.
var onDemandSuffix = regexp.MustCompile(`^[0-9a-f]{8}$`)

// IsJobName reports whether name is one of the Jobs dbkeeper runs for db
// itself (not those of the CronJob): the final backup, the restore, an
// on-demand backup.
func IsJobName(db *dbv1.Database, name string) bool {
	if name == FinalBackupJobName(db) || name == RestoreJobName(db) {
		return true
	}
	suffix, ok := strings.CutPrefix(name, db.Name+"-now-")
	return ok && onDemandSuffix.MatchString(suffix)
}
