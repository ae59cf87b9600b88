package engine

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// RoleSQL is the SQL the operator runs in an engine's server, connected as
// its superuser, to keep the application's role: a login role that owns its
// database and nothing more, whose password is the credentials Secret's
// (docs/design/roles-and-rotation.md). Every method returns one statement
// (or query) as text, with names and values quoted, so the driver that runs
// it does not matter; none of them ever holds a plaintext password.
type RoleSQL interface {
	// Superuser is the name of the superuser role of a new Database, the
	// username of its superuser Secret.
	Superuser() string
	// CheckAppRole says whether role can be the application's role; the
	// error says why not, for the condition's message.
	CheckAppRole(role string) error
	// CheckAppDatabase says whether database can be the application's.
	CheckAppDatabase(database string) error
	// EnsureAppRole creates role, a login role without a password, when it
	// is missing, and takes from it any power beyond owning its database
	// (superuser and the like, membership of roles that run programs or
	// read and write the server's files), writing nothing when it has none.
	// It fails, changing nothing, on the server's bootstrap superuser.
	EnsureAppRole(role string) (string, error)
	// AppDatabaseExists is a query with one row when database exists.
	AppDatabaseExists(database string) (string, error)
	// CreateAppDatabase creates database owned by owner; it cannot run in a
	// transaction block.
	CreateAppDatabase(database, owner string) (string, error)
	// EnsureDatabaseOwner makes owner the owner of database (no write when
	// it is already).
	EnsureDatabaseOwner(database, owner string) (string, error)
	// SetPassword sets role's password to a SCRAM-SHA-256 verifier of
	// password with a fresh salt: the plaintext never reaches the server.
	SetPassword(role, password string) (string, error)
	// Unlogged are statements that, run first in the transaction of one
	// that carries a password (SetPassword's), keep that one out of the
	// server's log whatever its logging settings: not logged as DDL, nor
	// with its duration, nor after it failed (a timeout). They need a
	// superuser.
	Unlogged() string
	// StoredPassword is a query of one row and column: the password role
	// has on the server (a verifier, compared with ScramVerifierMatches),
	// NULL when it has none; no row when the role does not exist.
	StoredPassword(role string) (string, error)
}

// maxIdentifierBytes is PostgreSQL's NAMEDATALEN - 1: a longer name is
// silently truncated, and would not be the Secret's.
const maxIdentifierBytes = 63

// Errors of the name checks.
var (
	ErrNameEmpty    = errors.New("the name is empty")
	ErrNameTooLong  = fmt.Errorf("the name is longer than %d bytes, which PostgreSQL would truncate", maxIdentifierBytes)
	ErrNameNUL      = errors.New("the name contains a NUL byte")
	ErrNameReserved = errors.New("the name is reserved by PostgreSQL")
	ErrNameIsSuper  = errors.New("the name is the superuser's")
)

// QuoteIdentifier quotes a name for SQL: in double quotes, with double
// quotes doubled. A name PostgreSQL cannot hold (NUL, empty, longer than 63
// bytes) is an error.
func QuoteIdentifier(name string) (string, error) {
	if err := checkIdentifier(name); err != nil {
		return "", err
	}
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`, nil
}

func checkIdentifier(name string) error {
	switch {
	case name == "":
		return ErrNameEmpty
	case len(name) > maxIdentifierBytes:
		return ErrNameTooLong
	case strings.IndexByte(name, 0) >= 0:
		return ErrNameNUL
	}
	return nil
}

// QuoteLiteral quotes a string constant for SQL: single quotes doubled,
// and, when it holds a backslash, the E'...' form with backslashes doubled, so
// the result means the same whatever standard_conforming_strings is. A NUL
// byte, which no text value can hold, is an error.
func QuoteLiteral(s string) (string, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return "", errors.New("the value contains a NUL byte")
	}
	q := "'" + strings.ReplaceAll(s, "'", "''") + "'"
	if strings.Contains(s, `\`) {
		q = "E" + strings.ReplaceAll(q, `\`, `\\`)
	}
	return q, nil
}

// postgresSuperuser is the superuser role of a new Database.
const postgresSuperuser = "postgres"

// Superuser implements RoleSQL.
func (Postgres) Superuser() string { return postgresSuperuser }

// CheckAppRole implements RoleSQL: a name PostgreSQL can hold untruncated,
// not one it reserves (public, none, current_user, session_user,
// current_role, pg_*) and not the superuser's.
func (Postgres) CheckAppRole(role string) error {
	if err := checkIdentifier(role); err != nil {
		return fmt.Errorf("role name: %w", err)
	}
	switch strings.ToLower(role) {
	case "public", "none", "current_user", "session_user", "current_role":
		return fmt.Errorf("role name %q: %w", role, ErrNameReserved)
	case postgresSuperuser:
		return fmt.Errorf("role name %q: %w, which no application is given", role, ErrNameIsSuper)
	}
	if strings.HasPrefix(role, "pg_") {
		return fmt.Errorf("role name %q: %w (names starting with pg_ are)", role, ErrNameReserved)
	}
	return nil
}

// CheckAppDatabase implements RoleSQL: a name PostgreSQL can hold
// untruncated, and not one of the databases initdb makes (postgres,
// template0, template1).
func (Postgres) CheckAppDatabase(database string) error {
	if err := checkIdentifier(database); err != nil {
		return fmt.Errorf("database name: %w", err)
	}
	switch database {
	case "postgres", "template0", "template1":
		return fmt.Errorf("database name %q: %w (initdb's own database)", database, ErrNameReserved)
	}
	return nil
}

// postgresPrivilegedRoles are the predefined roles that reach outside the
// database (run programs, read or write the server's files): the
// application's role is never a member, directly or not.
const postgresPrivilegedRoles = `'pg_execute_server_program', 'pg_read_server_files', 'pg_write_server_files'`

// postgresEnsureAppRole is the body of EnsureAppRole's DO block; {{role}} is the
// role's name as a literal. Each repair is a NOTICE starting with
// "dbkeeper:", which a driver can turn into an Event. A membership that
// comes through another role is not revoked but refused, as revoking it
// would take the other role's too.
const postgresEnsureAppRole = `DECLARE
  r name := {{role}};
  g name;
BEGIN
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r AND oid = 10) THEN
    RAISE EXCEPTION 'role % is the bootstrap superuser of this server (a Database created before dbkeeper separated the application''s role from the superuser): it cannot be made the application''s role', r
      USING ERRCODE = 'object_not_in_prerequisite_state';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r) THEN
    EXECUTE pg_catalog.format('CREATE ROLE %I LOGIN', r);
    RAISE NOTICE 'dbkeeper: created role %', r;
  END IF;
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r
             AND (rolsuper OR rolcreatedb OR rolcreaterole OR rolreplication OR rolbypassrls OR NOT rolcanlogin)) THEN
    EXECUTE pg_catalog.format('ALTER ROLE %I LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS', r);
    RAISE NOTICE 'dbkeeper: took SUPERUSER, CREATEDB, CREATEROLE, REPLICATION and BYPASSRLS from role %', r;
  END IF;
  FOR g IN
    SELECT b.rolname FROM pg_catalog.pg_auth_members m
    JOIN pg_catalog.pg_roles b ON b.oid = m.roleid
    JOIN pg_catalog.pg_roles u ON u.oid = m.member
    WHERE u.rolname = r AND (b.rolsuper OR b.rolcreaterole OR b.rolreplication OR b.rolbypassrls OR b.rolname IN (` + postgresPrivilegedRoles + `))
  LOOP
    EXECUTE pg_catalog.format('REVOKE %I FROM %I', g, r);
    RAISE NOTICE 'dbkeeper: revoked role % from role %', g, r;
  END LOOP;
  SELECT b.rolname INTO g FROM pg_catalog.pg_roles b
  WHERE (b.rolsuper OR b.rolcreaterole OR b.rolreplication OR b.rolbypassrls OR b.rolname IN (` + postgresPrivilegedRoles + `))
    AND b.rolname <> r AND pg_catalog.pg_has_role(r, b.oid, 'MEMBER')
  LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'role % is a member of role % through another role: revoke that membership', r, g
      USING ERRCODE = 'object_not_in_prerequisite_state';
  END IF;
END`

// EnsureAppRole implements RoleSQL with a DO block, itself quoted as a
// literal so that no name can end it.
func (p Postgres) EnsureAppRole(role string) (string, error) {
	if err := p.CheckAppRole(role); err != nil {
		return "", err
	}
	lit, err := QuoteLiteral(role)
	if err != nil {
		return "", err
	}
	body, err := QuoteLiteral(strings.Replace(postgresEnsureAppRole, "{{role}}", lit, 1))
	if err != nil {
		return "", err
	}
	return "DO " + body, nil
}

// AppDatabaseExists implements RoleSQL.
func (p Postgres) AppDatabaseExists(database string) (string, error) {
	if err := p.CheckAppDatabase(database); err != nil {
		return "", err
	}
	lit, err := QuoteLiteral(database)
	if err != nil {
		return "", err
	}
	return "SELECT 1 FROM pg_catalog.pg_database WHERE datname = " + lit, nil
}

// CreateAppDatabase implements RoleSQL.
func (p Postgres) CreateAppDatabase(database, owner string) (string, error) {
	d, o, err := p.databaseAndOwner(database, owner)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("CREATE DATABASE %s OWNER %s", d, o), nil
}

// EnsureDatabaseOwner implements RoleSQL; PostgreSQL writes nothing when
// owner already owns it.
func (p Postgres) EnsureDatabaseOwner(database, owner string) (string, error) {
	d, o, err := p.databaseAndOwner(database, owner)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("ALTER DATABASE %s OWNER TO %s", d, o), nil
}

func (p Postgres) databaseAndOwner(database, owner string) (string, string, error) {
	if err := p.CheckAppDatabase(database); err != nil {
		return "", "", err
	}
	if err := p.CheckAppRole(owner); err != nil {
		return "", "", err
	}
	d, err := QuoteIdentifier(database)
	if err != nil {
		return "", "", err
	}
	o, err := QuoteIdentifier(owner)
	return d, o, err
}

// SetPassword implements RoleSQL. It accepts any role name PostgreSQL can
// hold (the superuser's too); the password must pass CheckPassword.
func (Postgres) SetPassword(role, password string) (string, error) {
	r, err := QuoteIdentifier(role)
	if err != nil {
		return "", fmt.Errorf("role name: %w", err)
	}
	verifier, err := ScramVerifier(password)
	if err != nil {
		return "", err
	}
	v, err := QuoteLiteral(verifier)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("ALTER ROLE %s PASSWORD %s", r, v), nil
}

// Unlogged implements RoleSQL, as one statement (SET LOCAL of each
// setting): log_statement would log the statement
// before it runs (checked when it is parsed, so these must run in an
// earlier statement of the transaction), log_min_duration_statement once
// it ran, log_min_error_statement (ERROR by default) when it failed.
func (Postgres) Unlogged() string {
	return "SELECT pg_catalog.set_config('log_statement', 'none', true), pg_catalog.set_config('log_min_duration_statement', '-1', true), " +
		"pg_catalog.set_config('log_min_error_statement', 'panic', true)"
}

// StoredPassword implements RoleSQL; it needs a superuser (pg_authid).
func (Postgres) StoredPassword(role string) (string, error) {
	if err := checkIdentifier(role); err != nil {
		return "", fmt.Errorf("role name: %w", err)
	}
	lit, err := QuoteLiteral(role)
	if err != nil {
		return "", err
	}
	return "SELECT rolpassword FROM pg_catalog.pg_authid WHERE rolname = " + lit, nil
}

var _ Engine = Postgres{}

// TextArray is names as a SQL text[] constant, each once, sorted.
func TextArray(names []string) (string, error) {
	sorted := slices.Compact(slices.Sorted(slices.Values(names)))
	quoted := make([]string, 0, len(sorted))
	for _, n := range sorted {
		lit, err := QuoteLiteral(n)
		if err != nil {
			return "", fmt.Errorf("name %q: %w", n, err)
		}
		quoted = append(quoted, lit)
	}
	return "ARRAY[" + strings.Join(quoted, ", ") + "]::text[]", nil
}
