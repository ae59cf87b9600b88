package engine

import (
	"fmt"
	"strings"
)

// LegacyRoles is the SQL that upgrades a Database created before the
// application's role and the superuser were separated (issue 17): its
// application's role is the server's bootstrap superuser (oid 10), which
// PostgreSQL 16+ refuses to demote and whose objects REASSIGN OWNED refuses
// to move (docs/design/roles-and-rotation.md, D6).
type LegacyRoles interface {
	// BootstrapSuperuser is a query of one row: the name of the server's
	// bootstrap superuser. A Database is a legacy one when that is its
	// application's role.
	BootstrapSuperuser() string
	// LegacyRoleName is the name the bootstrap superuser gets when role
	// stops being it.
	LegacyRoleName(role string) string
	// MigrateLegacyAppRole, run as another superuser connected to the
	// application's database, turns role from the bootstrap superuser into
	// the application's ordinary role, in one transaction: the bootstrap
	// superuser is renamed legacy and can no longer log in, a new role of
	// the old name gets its stored password (so the application's password
	// keeps working), the database and the objects of it the old role owned
	// (schemas, tables, views, sequences, functions, types, large objects).
	// It does nothing when role is not the bootstrap superuser. Sessions
	// opened before keep their superuser session until they reconnect.
	MigrateLegacyAppRole(role, legacy string) (string, error)
	// EnsureSuperuser, run as the bootstrap superuser (the application's
	// role of a legacy Database), makes role a superuser that can log in,
	// creating it without a password if it is missing (D6 step 1); the
	// password is SetPassword's.
	EnsureSuperuser(role string) (string, error)
}

// postgresEnsureSuperuser is the body of EnsureSuperuser's DO block;
// {{role}} is a literal.
const postgresEnsureSuperuser = `DECLARE
  r name := {{role}};
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r) THEN
    EXECUTE pg_catalog.format('CREATE ROLE %I SUPERUSER LOGIN', r);
    RAISE NOTICE 'dbkeeper: created superuser role %', r;
  ELSIF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r AND NOT (rolsuper AND rolcanlogin)) THEN
    EXECUTE pg_catalog.format('ALTER ROLE %I SUPERUSER LOGIN', r);
    RAISE NOTICE 'dbkeeper: made role % a superuser that can log in', r;
  END IF;
END`

// EnsureSuperuser implements LegacyRoles with a DO block, quoted as a
// literal so that no name can end it.
func (Postgres) EnsureSuperuser(role string) (string, error) {
	lit, err := QuoteLiteral(role)
	if err != nil {
		return "", err
	}
	if err := checkIdentifier(role); err != nil {
		return "", fmt.Errorf("role name: %w", err)
	}
	body, err := QuoteLiteral(strings.Replace(postgresEnsureSuperuser, "{{role}}", lit, 1))
	if err != nil {
		return "", err
	}
	return "DO " + body, nil
}

// BootstrapSuperuser implements LegacyRoles.
func (Postgres) BootstrapSuperuser() string {
	return "SELECT rolname FROM pg_catalog.pg_roles WHERE oid = 10"
}

// LegacyRoleName implements LegacyRoles: role_superuser_legacy, role cut
// to fit PostgreSQL's 63 bytes.
func (Postgres) LegacyRoleName(role string) string {
	const suffix = "_superuser_legacy"
	if len(role)+len(suffix) > maxIdentifierBytes {
		role = strings.ToValidUTF8(role[:maxIdentifierBytes-len(suffix)], "")
	}
	return role + suffix
}

// postgresMigrateLegacy is the DO block of MigrateLegacyAppRole; {{role}}
// and {{legacy}} are literals. Each object's statement has one %I, the new
// owner. Extension members stay with the extension's owner.
const postgresMigrateLegacy = `DECLARE
  r name := {{role}};
  legacy name := {{legacy}};
  verifier text;
  stmt text;
  moved int := 0;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r AND oid = 10) THEN
    RETURN;
  END IF;
  IF session_user = r THEN
    RAISE EXCEPTION 'connect as another superuser than % to migrate it', r USING ERRCODE = 'object_not_in_prerequisite_state';
  END IF;
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = legacy) THEN
    RAISE EXCEPTION 'role % exists already: cannot rename the bootstrap superuser % to it', legacy, r USING ERRCODE = 'duplicate_object';
  END IF;
  SELECT rolpassword INTO verifier FROM pg_catalog.pg_authid WHERE oid = 10;
  EXECUTE pg_catalog.format('ALTER ROLE %I RENAME TO %I', r, legacy);
  EXECUTE pg_catalog.format('CREATE ROLE %I LOGIN', r);
  IF verifier IS NOT NULL THEN
    EXECUTE pg_catalog.format('ALTER ROLE %I PASSWORD %L', r, verifier);
  END IF;
  EXECUTE pg_catalog.format('ALTER DATABASE %I OWNER TO %I', pg_catalog.current_database(), r);
  FOR stmt IN
    WITH ext(classid, objid) AS (
      SELECT classid, objid FROM pg_catalog.pg_depend WHERE deptype = 'e'
    ), sys(oid) AS (
      SELECT oid FROM pg_catalog.pg_namespace
      WHERE nspname IN ('pg_catalog', 'information_schema') OR nspname ~ '^pg_(toast|temp_|toast_temp_)'
    )
    SELECT pg_catalog.format('ALTER SCHEMA %I OWNER TO %%I', n.nspname) FROM pg_catalog.pg_namespace n
    WHERE n.nspowner = 10 AND n.oid NOT IN (SELECT oid FROM sys)
      AND (n.tableoid, n.oid) NOT IN (SELECT * FROM ext)
    UNION ALL
    SELECT pg_catalog.format(CASE c.relkind WHEN 'S' THEN 'ALTER SEQUENCE %s OWNER TO %%I' ELSE 'ALTER TABLE %s OWNER TO %%I' END, c.oid::pg_catalog.regclass)
    FROM pg_catalog.pg_class c
    WHERE c.relowner = 10 AND c.relnamespace NOT IN (SELECT oid FROM sys) AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
      AND (c.tableoid, c.oid) NOT IN (SELECT * FROM ext)
      -- a sequence of a serial or identity column follows its table
      AND NOT (c.relkind = 'S' AND EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
        WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.objid = c.oid
          AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.deptype IN ('a', 'i')))
    UNION ALL
    SELECT pg_catalog.format(CASE p.prokind WHEN 'a' THEN 'ALTER AGGREGATE %s OWNER TO %%I' ELSE 'ALTER ROUTINE %s OWNER TO %%I' END, p.oid::pg_catalog.regprocedure)
    FROM pg_catalog.pg_proc p
    WHERE p.proowner = 10 AND p.pronamespace NOT IN (SELECT oid FROM sys) AND (p.tableoid, p.oid) NOT IN (SELECT * FROM ext)
    UNION ALL
    -- standalone types: not a relation's row type, not an array of another
    SELECT pg_catalog.format('ALTER TYPE %s OWNER TO %%I', t.oid::pg_catalog.regtype)
    FROM pg_catalog.pg_type t
    WHERE t.typowner = 10 AND t.typnamespace NOT IN (SELECT oid FROM sys) AND (t.tableoid, t.oid) NOT IN (SELECT * FROM ext)
      AND t.typtype IN ('b', 'd', 'e', 'r', 'c')
      AND (t.typrelid = 0 OR (SELECT relkind FROM pg_catalog.pg_class WHERE oid = t.typrelid) = 'c')
      AND NOT (t.typelem <> 0 AND t.typsubscript = 'pg_catalog.array_subscript_handler'::pg_catalog.regproc)
    UNION ALL
    SELECT pg_catalog.format('ALTER LARGE OBJECT %s OWNER TO %%I', l.oid) FROM pg_catalog.pg_largeobject_metadata l WHERE l.lomowner = 10
  LOOP
    EXECUTE pg_catalog.format(stmt, r);
    moved := moved + 1;
  END LOOP;
  EXECUTE pg_catalog.format('ALTER ROLE %I NOLOGIN', legacy);
  RAISE NOTICE 'dbkeeper: role % is now the application''s own role and owns database % and % of its objects; the former bootstrap superuser is role %, which cannot log in',
    r, pg_catalog.current_database(), moved, legacy;
END`

// MigrateLegacyAppRole implements LegacyRoles.
func (p Postgres) MigrateLegacyAppRole(role, legacy string) (string, error) {
	if err := p.CheckAppRole(role); err != nil {
		return "", err
	}
	if err := checkIdentifier(legacy); err != nil {
		return "", fmt.Errorf("legacy role name: %w", err)
	}
	r, err := QuoteLiteral(role)
	if err != nil {
		return "", err
	}
	l, err := QuoteLiteral(legacy)
	if err != nil {
		return "", err
	}
	body := strings.NewReplacer("{{role}}", r, "{{legacy}}", l).Replace(postgresMigrateLegacy)
	q, err := QuoteLiteral(body)
	if err != nil {
		return "", err
	}
	return "DO " + q, nil
}

var _ LegacyRoles = Postgres{}
