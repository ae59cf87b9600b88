package roles

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	rolesql "github.com/dbkeeper/dbkeeper/internal/roles"
)

// apply runs the plan's steps in order, conn in the maintenance database
// and a session of its own (as login) in each other database a step
// names. A step the server refuses is a problem of its object, whose
// later steps are not run; the others go on. failed are the objects
// ("role x") a step of which failed. An error is trouble reaching the
// primary: the rest waits for the next attempt.
func (s *syncer) apply(ctx context.Context, db *dbv1.Database, conn instance.Conn, login instance.Login, p plan) (failed map[string]bool, problems []problem, err error) {
	failed = map[string]bool{}
	sessions := map[string]instance.Conn{"": conn}
	defer func() {
		for d, c := range sessions {
			if d != "" {
				_ = c.Close(ctx)
			}
		}
	}()
	for _, st := range p.steps {
		if failed[st.object] {
			continue
		}
		c, ok := sessions[st.database]
		if !ok {
			if c, err = s.instances.Connect(ctx, db, login, st.database); err != nil {
				if instance.Unreachable(err) {
					return failed, problems, fmt.Errorf("connecting to database %s: %w", st.database, err)
				}
				failed[st.object] = true
				problems = append(problems, problem{reason: st.refused, message: fmt.Sprintf("%s: cannot connect to database %s, where dbkeeper would have %s: %s",
					st.entry, st.database, st.note, conditions.Quote(instance.ServerError(err), 1024))})
				continue
			}
			sessions[st.database] = c
		}
		logger := log.FromContext(ctx).WithValues("object", st.object, "entry", st.entry)
		logger.Info("Running a step of spec.roles and spec.databases", "step", st.note)
		if st.secret {
			// the verifier is kept out of the server's log too
			err = rolesql.ExecUnlogged(ctx, c, engine.Postgres{}, st.sql)
		} else {
			_, err = c.Exec(ctx, st.sql)
		}
		if err != nil {
			if instance.Unreachable(err) {
				return failed, problems, err
			}
			failed[st.object] = true
			logger.Info("The server refused a step of spec.roles and spec.databases", "step", st.note, "error", err.Error())
			problems = append(problems, problem{reason: st.refused, message: fmt.Sprintf("%s: the server refused the statement that would have %s: %s", st.entry, st.note, conditions.Quote(instance.ServerError(err), 1024))})
			continue
		}
		s.event(db, st.event, "Apply", "%s", capitalized(st.note))
	}
	return failed, problems, nil
}

func capitalized(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}
