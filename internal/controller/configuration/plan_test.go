package configuration

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

func ok(pod string, restartOnly []string, pending ...string) answer {
	return answer{pod: pod, res: agentapi.ParametersResponse{RestartOnly: restartOnly, PendingRestart: pending}}
}

// TestJudge: what the instances' answers add up to, and when the restart
// revision (the pods' template) may move.
func TestJudge(t *testing.T) {
	spec := map[string]string{"work_mem": "64MB", "shared_buffers": "256MB"}
	restartOnly := []string{"shared_buffers"}
	full := revision(spec, map[string]bool{"shared_buffers": true}, nil)
	assert.NotEmpty(t, full)

	t.Run("applied everywhere", func(t *testing.T) {
		v := judge(spec, 2, []answer{ok("db-0", restartOnly), ok("db-1", restartOnly)}, full)
		assert.Equal(t, metav1.ConditionTrue, v.condition.Status)
		assert.Equal(t, dbv1.ReasonParametersApplied, v.condition.Reason)
		assert.Equal(t, "the 2 parameters of spec.postgresql.parameters are applied on every instance", v.condition.Message)
		assert.Equal(t, full, v.revision)
		assert.Empty(t, v.pending)
	})
	t.Run("a restart-only parameter written everywhere moves the revision", func(t *testing.T) {
		v := judge(spec, 2, []answer{ok("db-0", restartOnly, "shared_buffers"), ok("db-1", restartOnly, "shared_buffers")}, "")
		assert.Equal(t, metav1.ConditionTrue, v.condition.Status)
		assert.Equal(t, dbv1.ReasonRestartPending, v.condition.Reason)
		assert.Contains(t, v.condition.Message, "shared_buffers (db-0, db-1)")
		assert.Equal(t, []string{"shared_buffers"}, v.pending)
		assert.Equal(t, full, v.revision)
	})
	t.Run("an instance not running yet keeps the revision", func(t *testing.T) {
		v := judge(spec, 3, []answer{ok("db-0", restartOnly, "shared_buffers"), ok("db-1", restartOnly, "shared_buffers")}, "old")
		assert.Equal(t, "old", v.revision, "the template may change only once every instance wrote the values")
		assert.Contains(t, v.condition.Message, "written on 2 of 3 instances (the others once they run)")
	})
	t.Run("an instance that does not answer keeps the revision", func(t *testing.T) {
		v := judge(spec, 2, []answer{ok("db-0", restartOnly), {pod: "db-1", err: errors.New("connection refused")}}, "old")
		assert.Equal(t, metav1.ConditionFalse, v.condition.Status)
		assert.Equal(t, dbv1.ReasonInstancesUnreachable, v.condition.Reason)
		assert.Contains(t, v.condition.Message, "no answer from db-1 (connection refused)")
		assert.Equal(t, "old", v.revision)
	})
	t.Run("a refused parameter is named with PostgreSQL's message", func(t *testing.T) {
		bad := map[string]string{"work_mem": "1XB", "shared_buffers": "256MB"}
		msg := `invalid value for parameter "work_mem": "1XB" (HINT: Valid units for this parameter are "B", "kB", "MB", "GB", and "TB".)`
		refusing := func(pod string) answer {
			a := ok(pod, restartOnly)
			a.res.Refused = map[string]string{"work_mem": msg}
			return a
		}
		v := judge(bad, 2, []answer{refusing("db-0"), refusing("db-1")}, "")
		assert.Equal(t, metav1.ConditionFalse, v.condition.Status)
		assert.Equal(t, dbv1.ReasonParameterRefused, v.condition.Reason)
		assert.Equal(t, "PostgreSQL refused spec.postgresql.parameters.work_mem: "+msg+" (db-0, db-1); the parameter is left as it was, the others are applied", v.condition.Message)
		assert.Equal(t, full, v.revision, "the restart-only parameters that were taken still roll out")
	})
	t.Run("a refused restart-only value is not in the revision", func(t *testing.T) {
		bad := map[string]string{"shared_buffers": "-5"}
		a := ok("db-0", restartOnly)
		a.res.Refused = map[string]string{"shared_buffers": "-5 8kB is outside the valid range"}
		v := judge(bad, 1, []answer{a}, "")
		assert.Empty(t, v.revision, "no restart for a value that was not written")
	})
	t.Run("restart-only parameters removed: the revision goes, which restarts the instances", func(t *testing.T) {
		v := judge(map[string]string{"work_mem": "64MB"}, 1, []answer{ok("db-0", nil, "shared_buffers")}, full)
		assert.Empty(t, v.revision)
		assert.Equal(t, []string{"shared_buffers"}, v.pending)
	})
	t.Run("a value changed moves the revision", func(t *testing.T) {
		other := map[string]string{"work_mem": "64MB", "shared_buffers": "512MB"}
		v := judge(other, 1, []answer{ok("db-0", restartOnly, "shared_buffers")}, full)
		assert.NotEqual(t, full, v.revision)
		assert.NotEmpty(t, v.revision)
	})
	t.Run("no parameters", func(t *testing.T) {
		v := judge(map[string]string{}, 1, []answer{ok("db-0", nil)}, "")
		assert.Equal(t, dbv1.ReasonParametersApplied, v.condition.Reason)
		assert.Empty(t, v.revision)
	})
	t.Run("scaled to zero keeps what it had", func(t *testing.T) {
		v := judge(spec, 0, nil, full)
		assert.Equal(t, full, v.revision)
		assert.Equal(t, metav1.ConditionTrue, v.condition.Status)
	})
}

// TestPreloadFromExtensions: the extensions whose library must be
// preloaded put it in shared_preload_libraries, sorted and once, an Absent
// entry too (its extension may still exist); the others add nothing. The
// condition names the field it comes from, also when refused.
func TestPreloadFromExtensions(t *testing.T) {
	db := &dbv1.Database{}
	db.Spec.PostgreSQL.Parameters = map[string]dbv1.ParameterValue{"work_mem": "64MB"}
	assert.Equal(t, map[string]string{"work_mem": "64MB"}, parameters(db))
	db.Spec.PostgreSQL.Extensions = []dbv1.ExtensionSpec{{Name: "vector"}, {Name: "pgaudit", Ensure: dbv1.EnsureAbsent}, {Name: "pg_stat_statements"}}
	spec := parameters(db)
	assert.Equal(t, map[string]string{"work_mem": "64MB", "shared_preload_libraries": "pg_stat_statements,pgaudit"}, spec)

	v := judge(spec, 1, []answer{ok("db-0", []string{"shared_preload_libraries"})}, "")
	assert.Equal(t, "the 1 parameters of spec.postgresql.parameters, and shared_preload_libraries = pg_stat_statements,pgaudit for spec.postgresql.extensions are applied on every instance", v.condition.Message)
	assert.NotEmpty(t, v.revision, "a restart rolls out for the library")

	refused := answer{pod: "db-0", res: agentapi.ParametersResponse{Refused: map[string]string{"shared_preload_libraries": `library "pgaudit" is not in this image`}}}
	v = judge(spec, 1, []answer{refused}, "")
	assert.Equal(t, dbv1.ReasonParameterRefused, v.condition.Reason)
	assert.Contains(t, v.condition.Message, `spec.postgresql.extensions (shared_preload_libraries): library "pgaudit" is not in this image (db-0)`)
}
