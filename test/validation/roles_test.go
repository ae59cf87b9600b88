package validation_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// roleSpec is spec.roles (and spec.databases, when given) as JSON.
func roleSpec(roles []any, databases ...any) map[string]any {
	spec := map[string]any{"roles": roles}
	if len(databases) > 0 {
		spec["databases"] = databases
	}
	return spec
}

func role(name string, kv ...any) map[string]any {
	r := map[string]any{"name": name}
	for i := 0; i < len(kv); i += 2 {
		r[kv[i].(string)] = kv[i+1]
	}
	return r
}

// TestRoleNamesRefusedAtAdmission: a role's name is a lower-case
// PostgreSQL identifier of at most 63 bytes (so a"b never reaches the
// server), never PostgreSQL's own (postgres, pg_*), dbkeeper's (dbkeeper,
// dbkeeper_*), a reserved one, or the application's (app, with generated
// credentials); the message names the field.
func TestRoleNamesRefusedAtAdmission(t *testing.T) {
	ctx, ns := setup(t)
	for name, want := range map[string]string{
		"postgres":              "spec.roles[].name may not be postgres or start with pg_",
		"pg_monitor":            "spec.roles[].name may not be postgres or start with pg_",
		"dbkeeper":              "spec.roles[].name may not be dbkeeper or start with dbkeeper_",
		"dbkeeper_replica":      "spec.roles[].name may not be dbkeeper or start with dbkeeper_",
		"public":                "spec.roles[].name may not be public, none, current_user, session_user or current_role",
		"current_user":          "spec.roles[].name may not be public, none, current_user, session_user or current_role",
		`a"b`:                   `spec.roles[0].name: Invalid value: "a\"b": spec.roles[0].name in body should match`,
		"Reader":                "spec.roles[0].name in body should match",
		"1reader":               "spec.roles[0].name in body should match",
		"read-only":             "spec.roles[0].name in body should match",
		strings.Repeat("r", 64): "spec.roles[0].name: Too long: may not be more than 63",
		"app":                   "spec.roles: app is the application's role (generated credentials)",
	} {
		err := k8s.Create(ctx, rawDatabase(ns, "bad-role", roleSpec([]any{role(name)})))
		assertInvalid(t, err, want)
	}
	// with a Secret of the user's, its username is only known to the
	// operator (RolesReady says RoleRefused)
	withSecret := roleSpec([]any{role("app")})
	withSecret["credentials"] = map[string]any{"secretName": "mine"}
	require.NoError(t, k8s.Create(ctx, rawDatabase(ns, "own-secret", withSecret)))
}

// TestRoleMembershipsRefusedAtAdmission: inRoles names only the predefined
// roles that stay inside the databases, and Present roles of spec.roles,
// never the role itself; pg_checkpoint and pg_maintain need the versions
// that have them.
func TestRoleMembershipsRefusedAtAdmission(t *testing.T) {
	ctx, ns := setup(t)
	for _, tt := range []struct {
		name  string
		spec  map[string]any
		wants []string
	}{
		{"server files", roleSpec([]any{role("r", "inRoles", []any{"pg_read_server_files"})}),
			[]string{"spec.roles[0].inRoles: Invalid value", "spec.roles[].inRoles may name only the predefined roles pg_read_all_data"}},
		{"programs", roleSpec([]any{role("r", "inRoles", []any{"pg_execute_server_program"})}), []string{"inRoles may name only the predefined roles"}},
		{"unknown role", roleSpec([]any{role("r", "inRoles", []any{"somebody"})}),
			[]string{"spec.roles: Invalid value", "inRoles names a role that is neither a predefined pg_ role nor a role of spec.roles with ensure Present"}},
		{"absent role", roleSpec([]any{role("r", "inRoles", []any{"g"}), role("g", "ensure", "Absent")}), []string{"inRoles names a role that is neither"}},
		{"itself", roleSpec([]any{role("r", "inRoles", []any{"r"})}), []string{"spec.roles[0]: Invalid value", "spec.roles[].inRoles names the role itself"}},
		{"pg_maintain on 16", withVersion("16", roleSpec([]any{role("r", "inRoles", []any{"pg_maintain"})})),
			[]string{"inRoles names pg_maintain, which PostgreSQL has from version 17 on"}},
		{"pg_checkpoint on 14", withVersion("14", roleSpec([]any{role("r", "inRoles", []any{"pg_checkpoint"})})),
			[]string{"inRoles names pg_checkpoint, which PostgreSQL has from version 15 on"}},
		{"ensure", roleSpec([]any{role("r", "ensure", "Gone")}), []string{`spec.roles[0].ensure: Unsupported value: "Gone"`}},
		{"limit", roleSpec([]any{role("r", "connectionLimit", int64(-2))}), []string{"spec.roles[0].connectionLimit: Invalid value: -2"}},
		{"secret name", roleSpec([]any{role("r", "passwordSecret", map[string]any{"name": "Not_A_Name"})}), []string{"spec.roles[0].passwordSecret.name in body should match"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			assertInvalid(t, k8s.Create(ctx, rawDatabase(ns, "bad-member", tt.spec)), tt.wants...)
		})
	}
	var many []any
	for i := range 65 {
		many = append(many, role(fmt.Sprintf("r%d", i)))
	}
	assertInvalid(t, k8s.Create(ctx, rawDatabase(ns, "many", roleSpec(many))), "spec.roles: Too many: 65: must have at most 64 items")
	assertInvalid(t, k8s.Create(ctx, rawDatabase(ns, "twice", roleSpec([]any{role("r"), role("r")}))), `spec.roles[1]: Duplicate value: {"name":"r"}`)
}

func withVersion(v string, spec map[string]any) map[string]any {
	spec["version"] = v
	return spec
}

// TestDatabasesRefusedAtAdmission: a database's name is an identifier
// and not initdb's or the application's; its owner is a Present role of
// spec.roles or the application's.
func TestDatabasesRefusedAtAdmission(t *testing.T) {
	ctx, ns := setup(t)
	db := func(name string, kv ...any) map[string]any { return role(name, kv...) }
	for _, tt := range []struct {
		name string
		spec map[string]any
		want string
	}{
		{"postgres", roleSpec(nil, db("postgres")), "spec.databases[].name may not be postgres, template0 or template1"},
		{"template0", roleSpec(nil, db("template0")), "spec.databases[].name may not be postgres, template0 or template1"},
		{"template1", roleSpec(nil, db("template1")), "spec.databases[].name may not be postgres, template0 or template1"},
		{"app", roleSpec(nil, db("app")), "spec.databases: app is the application's database (generated credentials)"},
		{"quote", roleSpec(nil, db(`d"b`)), "spec.databases[0].name in body should match"},
		{"unknown owner", roleSpec(nil, db("reports", "owner", "nobody")), "spec.databases: owner must be a role of spec.roles with ensure Present, or the application's role"},
		{"absent owner", roleSpec([]any{role("etl", "ensure", "Absent")}, db("reports", "owner", "etl")), "owner must be a role of spec.roles with ensure Present"},
		{"ensure", roleSpec(nil, db("reports", "ensure", "Dropped")), `spec.databases[0].ensure: Unsupported value: "Dropped"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			assertInvalid(t, k8s.Create(ctx, rawDatabase(ns, "bad-db", tt.spec)), tt.want)
		})
	}
}

// TestRolesAndDatabasesAccepted: what a team would write, privileged
// attributes included (only the operator's --allow-privileged-roles
// decides those, and says so in RolesReady); the defaults are filled in.
func TestRolesAndDatabasesAccepted(t *testing.T) {
	ctx, ns := setup(t)
	spec := roleSpec([]any{
		role("reader", "passwordSecret", map[string]any{"name": "reader-password"}, "inRoles", []any{"pg_read_all_data", "readers"}, "connectionLimit", int64(5)),
		role("readers", "login", false),
		role("monitor", "inRoles", []any{"pg_monitor", "pg_checkpoint", "pg_maintain"}),
		role("ops$1", "superuser", true, "replication", true, "bypassrls", true, "createdb", true),
		role("retired", "ensure", "Absent"),
	}, role("reports", "owner", "reader"), role("scratch"), role("old", "ensure", "Absent"), role("apps", "owner", "app"))
	require.NoError(t, k8s.Create(ctx, rawDatabase(ns, "declared", spec)))

	got := &dbv1.Database{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "declared"}, got))
	r := got.Spec.Roles[0]
	assert.Equal(t, dbv1.EnsurePresent, r.Ensure)
	assert.Equal(t, true, *r.Login)
	assert.Equal(t, "password", r.PasswordSecret.Key)
	assert.Equal(t, int32(5), *r.ConnectionLimit)
	assert.Equal(t, int32(-1), *got.Spec.Roles[1].ConnectionLimit)
	assert.Equal(t, dbv1.EnsurePresent, got.Spec.Databases[1].Ensure)
}

// TestPredefinedRolesMatchTheRule: the CEL rule of inRoles lists exactly
// dbv1.PredefinedRoles (each accepted, a neighbour refused).
func TestPredefinedRolesMatchTheRule(t *testing.T) {
	ctx, ns := setup(t)
	for _, name := range dbv1.PredefinedRoles {
		require.NoError(t, k8s.Create(ctx, rawDatabase(ns, "member-"+strings.ReplaceAll(strings.TrimPrefix(name, "pg_"), "_", "-"),
			roleSpec([]any{role("r", "inRoles", []any{name})}))), name)
	}
	for _, name := range []string{"pg_write_server_files", "pg_create_subscription", "pg_use_reserved_connections", "pg_database_owner"} {
		assertInvalid(t, k8s.Create(ctx, rawDatabase(ns, "member-other", roleSpec([]any{role("r", "inRoles", []any{name})}))), "inRoles may name only the predefined roles")
	}
}
