package service

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"sigs.k8s.io/controller-runtime/pkg/event"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// TestRestoreFinishedChanged: the status write that records the finished
// restore (or a status without it) wakes the controller; other status
// writes do not.
func TestRestoreFinishedChanged(t *testing.T) {
	db := func(bootstrap bool, restoredFrom string, ready int32) *dbv1.Database {
		d := &dbv1.Database{}
		if bootstrap {
			d.Spec.Bootstrap = &dbv1.BootstrapSpec{FromBackup: &dbv1.BootstrapFromBackup{Database: "src"}}
		}
		if restoredFrom != "" {
			d.Status.Backup = &dbv1.BackupStatus{RestoredFrom: restoredFrom}
		}
		d.Status.ReadyReplicas = ready
		return d
	}
	p := restoreFinishedChanged()
	for name, tc := range map[string]struct {
		old, new *dbv1.Database
		want     bool
	}{
		"restore finished":         {db(true, "", 0), db(true, "src/latest", 0), true},
		"restored status lost":     {db(true, "src/latest", 0), db(true, "", 0), true},
		"other status, restoring":  {db(true, "", 0), db(true, "", 1), false},
		"other status, restored":   {db(true, "src/latest", 0), db(true, "src/latest", 1), false},
		"other status, no restore": {db(false, "", 0), db(false, "", 1), false},
	} {
		assert.Equal(t, tc.want, p.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}), name)
	}
	assert.False(t, p.Create(event.CreateEvent{Object: db(true, "", 0)}), "create events come through DatabaseChanged")
}
