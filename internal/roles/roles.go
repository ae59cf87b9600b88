// Package roles brings a Database's server in line with its credentials
// Secret: the application's role exists, is no more than the owner of its
// database, and has the Secret's password. It is what the secret
// controller runs, connected as the superuser, after reading the Secret
// (docs/design/roles-and-rotation.md, D4). It writes nothing to a server
// that is already in line.
package roles

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/engine"
)

// Conn runs statements in the server as its superuser (sqlconn.Conn).
type Conn interface {
	// Exec runs one statement and returns its NOTICEs.
	Exec(ctx context.Context, sql string) ([]string, error)
	// QueryValue runs a query of at most one row and column.
	QueryValue(ctx context.Context, sql string) (value *string, ok bool, err error)
}

// App is what the credentials Secret says.
type App struct {
	// Role is the Secret's username.
	Role string
	// Database is the Secret's database key, or the username without it.
	Database string
	// Password is the Secret's password.
	Password string
}

// Result says what Apply did, for the condition, the Events and the logs;
// it holds no password.
type Result struct {
	// Legacy: the role is the bootstrap superuser of a Database created
	// before issue 17. Only its password was kept in line; the role and the
	// database are left as they are until it is migrated.
	Legacy bool
	// CreatedDatabase: the application's database did not exist.
	CreatedDatabase bool
	// Repairs are the server's notes of what EnsureAppRole changed
	// (created the role, took attributes, revoked memberships).
	Repairs []string
	// PasswordSet: the server did not have the Secret's password and now
	// has it.
	PasswordSet bool
}

// Changed says whether Apply wrote anything.
func (r Result) Changed() bool {
	return r.CreatedDatabase || len(r.Repairs) > 0 || r.PasswordSet
}

// Apply brings the server in line with app. A password or a name the
// engine refuses is an error before anything is sent; the errors name the
// step, never the password.
func Apply(ctx context.Context, c Conn, eng engine.Engine, app App) (Result, error) {
	var res Result
	if err := engine.CheckPassword(app.Password); err != nil {
		return res, fmt.Errorf("password of role %s: %w", app.Role, err)
	}
	if legacy, ok := eng.(engine.LegacyRoles); ok {
		bootstrap, _, err := c.QueryValue(ctx, legacy.BootstrapSuperuser())
		if err != nil {
			return res, fmt.Errorf("finding the bootstrap superuser: %w", err)
		}
		res.Legacy = bootstrap != nil && *bootstrap == app.Role
	}
	if !res.Legacy {
		if err := ensureRoleAndDatabase(ctx, c, eng, app, &res); err != nil {
			return res, err
		}
	}
	stored, err := eng.StoredPassword(app.Role)
	if err != nil {
		return res, err
	}
	verifier, ok, err := c.QueryValue(ctx, stored)
	if err != nil {
		return res, fmt.Errorf("reading the password of role %s: %w", app.Role, err)
	}
	if !ok {
		return res, fmt.Errorf("role %s does not exist", app.Role)
	}
	if verifier != nil && engine.ScramVerifierMatches(*verifier, app.Password) {
		return res, nil
	}
	set, err := eng.SetPassword(app.Role, app.Password)
	if err != nil {
		return res, fmt.Errorf("password of role %s: %w", app.Role, err)
	}
	if err := ExecUnlogged(ctx, c, eng, set); err != nil {
		return res, fmt.Errorf("setting the password of role %s: %w", app.Role, err)
	}
	res.PasswordSet = true
	return res, nil
}

func ensureRoleAndDatabase(ctx context.Context, c Conn, eng engine.Engine, app App, res *Result) error {
	ensure, err := eng.EnsureAppRole(app.Role)
	if err != nil {
		return err
	}
	notices, err := c.Exec(ctx, ensure)
	if err != nil {
		return fmt.Errorf("keeping role %s: %w", app.Role, err)
	}
	for _, n := range notices {
		if strings.HasPrefix(n, "dbkeeper: ") {
			res.Repairs = append(res.Repairs, strings.TrimPrefix(n, "dbkeeper: "))
		}
	}
	exists, err := eng.AppDatabaseExists(app.Database)
	if err != nil {
		return err
	}
	_, found, err := c.QueryValue(ctx, exists)
	if err != nil {
		return fmt.Errorf("looking for database %s: %w", app.Database, err)
	}
	if !found {
		create, err := eng.CreateAppDatabase(app.Database, app.Role)
		if err != nil {
			return err
		}
		if _, err := c.Exec(ctx, create); err != nil {
			return fmt.Errorf("creating database %s: %w", app.Database, err)
		}
		res.CreatedDatabase = true
	}
	owner, err := eng.EnsureDatabaseOwner(app.Database, app.Role)
	if err != nil {
		return err
	}
	if _, err := c.Exec(ctx, owner); err != nil {
		return fmt.Errorf("making role %s the owner of database %s: %w", app.Role, app.Database, err)
	}
	return nil
}

// ExecUnlogged runs stmt, which carries a password, in a transaction of
// its own that first keeps it out of the server's log (RoleSQL.Unlogged),
// whether it succeeds or fails. A failure rolls the transaction back, so
// that c stays usable.
func ExecUnlogged(ctx context.Context, c Conn, eng engine.RoleSQL, stmt string) error {
	if _, err := c.Exec(ctx, "BEGIN"); err != nil {
		return err
	}
	_, err := c.Exec(ctx, eng.Unlogged())
	if err == nil {
		_, err = c.Exec(ctx, stmt)
	}
	if err == nil {
		_, err = c.Exec(ctx, "COMMIT")
		return err
	}
	rollback, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, _ = c.Exec(rollback, "ROLLBACK")
	return err
}
