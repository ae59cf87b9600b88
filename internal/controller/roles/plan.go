package roles

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
)

// Event reasons of the steps: each names the role or database and what
// changed, never a password.
const (
	ReasonRoleCreated     = "RoleCreated"
	ReasonRoleAltered     = "RoleAltered"
	ReasonPasswordSet     = "PasswordSet"
	ReasonRoleDropped     = "RoleDropped"
	ReasonDatabaseCreated = "DatabaseCreated"
	ReasonDatabaseAltered = "DatabaseAltered"
	ReasonDatabaseDropped = "DatabaseDropped"
	ReasonReleased        = "Released"
)

// app is the application's role and database, from its credentials
// Secret: the secret controller keeps them, this one never does.
type app struct {
	role, database string
}

// password is what a role's passwordSecret gave: a value, or the problem
// that kept it from giving one.
type password struct {
	value   string
	problem *problem
}

// desired is what the planner is asked for.
type desired struct {
	roles     []dbv1.RoleSpec
	databases []dbv1.ServerDatabaseSpec
	app       app
	// passwords by role name, for the roles with a passwordSecret.
	passwords map[string]password
	// allowPrivileged is --allow-privileged-roles.
	allowPrivileged bool
	// previous is status.roles as it was.
	previous dbv1.RolesStatus
}

// step is one statement of a plan.
type step struct {
	// event is the Event's reason once it ran.
	event string
	// object is "role x" or "database y": a step whose object failed
	// earlier in the plan is not run.
	object string
	// entry is the spec's entry, for messages: "spec.roles[2] (reader)".
	entry string
	// database is where it runs; "" is the maintenance database.
	database string
	sql      string
	// secret: sql carries a password verifier; it runs in a transaction
	// that keeps it out of the server's log, and is never logged here.
	secret bool
	// note says what it does, for the log and the Event.
	note string
	// refused is the condition's reason when the server refuses it.
	refused string
}

// problem is something the condition says: a reason and a message.
type problem struct {
	reason, message string
}

// plan is what the planner decided.
type plan struct {
	steps    []step
	problems []problem
	// status is status.roles once every step ran.
	status dbv1.RolesStatus
	// released are the roles and databases that have just left the spec
	// and stay on the server ("role x", "database y").
	released []string
}

// ident quotes a name for SQL.
func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// entryOf names the i-th entry of a spec list.
func entryOf(list string, i int, name string) string {
	return fmt.Sprintf("spec.%s[%d] (%s)", list, i, name)
}

// planFor brings the server (seen) in line with want: the roles to
// create first, then their attributes and passwords, their memberships,
// the databases, and last what ensure: Absent drops. A role or database
// that cannot be kept as declared is a problem and is left out; the rest
// is planned.
func planFor(want desired, seen *catalog) plan {
	p := &planner{want: want, seen: seen, declared: map[string]bool{}, skipped: map[string]bool{}}
	p.checkRoles()
	for i := range want.roles {
		if r := &want.roles[i]; r.Present() && !p.skipped[r.Name] {
			p.role(i, r)
		}
	}
	for i := range want.databases {
		if d := &want.databases[i]; d.Present() {
			p.database(i, d)
		}
	}
	for i := range want.databases {
		if d := &want.databases[i]; !d.Present() {
			p.dropDatabase(i, d)
		}
	}
	for i := range want.roles {
		if r := &want.roles[i]; !r.Present() && !p.skipped[r.Name] {
			p.dropRole(i, r)
		}
	}
	p.releasedOnes()
	out := plan{problems: p.problems, status: p.status, released: p.released}
	out.steps = slices.Concat(p.creates, p.alters, p.grants, p.databases, p.drops)
	return out
}

type planner struct {
	want desired
	seen *catalog
	// declared are the Present roles of the spec that are kept.
	declared map[string]bool
	// skipped are the roles left out (refused).
	skipped map[string]bool
	// dropping are the databases this plan drops.
	dropping map[string]bool

	creates, alters, grants, databases, drops []step
	problems                                  []problem
	status                                    dbv1.RolesStatus
	released                                  []string
}

func (p *planner) refuse(reason, format string, args ...any) {
	p.problems = append(p.problems, problem{reason: reason, message: fmt.Sprintf(format, args...)})
}

// checkRoles leaves out the roles dbkeeper may not keep: the
// application's, the superuser it connects as.
func (p *planner) checkRoles() {
	for i := range p.want.roles {
		r := &p.want.roles[i]
		entry := entryOf("roles", i, r.Name)
		seen := p.seen.role(r.Name)
		switch {
		case r.Name == p.want.app.role:
			p.refuse(dbv1.ReasonRoleRefused, "%s: %s is the application's role, which dbkeeper keeps from the credentials Secret: remove it from spec.roles", entry, r.Name)
		case r.Name == p.seen.User || (seen != nil && seen.Bootstrap):
			p.refuse(dbv1.ReasonRoleRefused, "%s: %s is the server's superuser, which dbkeeper connects as: remove it from spec.roles", entry, r.Name)
		default:
			if r.Present() {
				p.declared[r.Name] = true
			}
			continue
		}
		p.skipped[r.Name] = true
	}
}

// role plans the i-th role of the spec, which is Present.
func (p *planner) role(i int, r *dbv1.RoleSpec) {
	entry := entryOf("roles", i, r.Name)
	object := "role " + r.Name
	seen := p.seen.role(r.Name)
	superuser, replication, bypassrls := p.privileged(i, r)
	mk := func(event, sql, note string) step {
		return step{event: event, object: object, entry: entry, sql: sql, note: note, refused: dbv1.ReasonRoleRefused}
	}
	if seen == nil {
		attrs := []string{
			flag(r.CanLogin(), "LOGIN"), flag(superuser, "SUPERUSER"), flag(r.CreateDB, "CREATEDB"), "NOCREATEROLE",
			flag(replication, "REPLICATION"), flag(bypassrls, "BYPASSRLS"), "CONNECTION LIMIT " + strconv.Itoa(int(r.Limit())),
		}
		p.creates = append(p.creates, mk(ReasonRoleCreated, "CREATE ROLE "+ident(r.Name)+" WITH "+strings.Join(attrs, " "),
			"created role "+r.Name))
	} else {
		var attrs, notes []string
		change := func(have, want bool, attr string) {
			if have != want {
				attrs = append(attrs, flag(want, attr))
				notes = append(notes, flag(want, attr))
			}
		}
		change(seen.Login, r.CanLogin(), "LOGIN")
		change(seen.Superuser, superuser, "SUPERUSER")
		change(seen.CreateDB, r.CreateDB, "CREATEDB")
		change(seen.CreateRole, false, "CREATEROLE")
		change(seen.Replication, replication, "REPLICATION")
		change(seen.BypassRLS, bypassrls, "BYPASSRLS")
		if seen.ConnectionLimit != r.Limit() {
			attrs = append(attrs, "CONNECTION LIMIT "+strconv.Itoa(int(r.Limit())))
			notes = append(notes, fmt.Sprintf("connection limit %d (was %d)", r.Limit(), seen.ConnectionLimit))
		}
		if len(attrs) > 0 {
			p.alters = append(p.alters, mk(ReasonRoleAltered, "ALTER ROLE "+ident(r.Name)+" WITH "+strings.Join(attrs, " "),
				"altered role "+r.Name+": "+strings.Join(notes, ", ")))
		}
	}
	p.password(r, seen, mk)
	p.memberships(r, seen, mk)
	p.status.Roles = append(p.status.Roles, r.Name)
}

// privileged are the privileged attributes the role gets: those the spec
// asks for, when --allow-privileged-roles allows them; each refused one
// is a problem naming its field.
func (p *planner) privileged(i int, r *dbv1.RoleSpec) (superuser, replication, bypassrls bool) {
	if p.want.allowPrivileged {
		return r.Superuser, r.Replication, r.BypassRLS
	}
	var fields, attrs []string
	for _, a := range []struct {
		on          bool
		field, attr string
	}{{r.Superuser, "superuser", "SUPERUSER"}, {r.Replication, "replication", "REPLICATION"}, {r.BypassRLS, "bypassrls", "BYPASSRLS"}} {
		if a.on {
			fields = append(fields, fmt.Sprintf("spec.roles[%d].%s", i, a.field))
			attrs = append(attrs, a.attr)
		}
	}
	if len(fields) > 0 {
		p.refuse(dbv1.ReasonRoleRefused, "%s %s true, and this dbkeeper does not allow privileged roles (a cluster administrator allows them with the manager's --allow-privileged-roles, the chart's allowPrivilegedRoles): role %s is kept without %s",
			strings.Join(fields, ", "), isAre(len(fields)), r.Name, strings.Join(attrs, ", "))
	}
	return false, false, false
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

func flag(on bool, attr string) string {
	if on {
		return attr
	}
	return "NO" + attr
}

// password plans the role's password: the Secret's when the server's
// verifier does not match it, none when the spec names no Secret (a
// password set by hand is removed), and nothing while the Secret cannot
// be used (the role keeps what it has).
func (p *planner) password(r *dbv1.RoleSpec, seen *seenRole, mk func(event, sql, note string) step) {
	if r.PasswordSecret == nil {
		if seen != nil && seen.Password != nil {
			p.alters = append(p.alters, mk(ReasonRoleAltered, "ALTER ROLE "+ident(r.Name)+" PASSWORD NULL",
				"removed the password of role "+r.Name+" (its entry names no passwordSecret)"))
		}
		return
	}
	pw := p.want.passwords[r.Name]
	if pw.problem != nil {
		p.problems = append(p.problems, *pw.problem)
		return
	}
	if seen != nil && seen.Password != nil && engine.ScramVerifierMatches(*seen.Password, pw.value) {
		return
	}
	sql, err := engine.Postgres{}.SetPassword(r.Name, pw.value)
	if err != nil {
		p.refuse(dbv1.ReasonPasswordSecretMissing, "role %s: the password of Secret %s, key %s: %v", r.Name, r.PasswordSecret.Name, r.PasswordSecret.PasswordKey(), err)
		return
	}
	s := mk(ReasonPasswordSet, sql, fmt.Sprintf("set the password of role %s from Secret %s, key %s", r.Name, r.PasswordSecret.Name, r.PasswordSecret.PasswordKey()))
	s.secret = true
	p.alters = append(p.alters, s)
}

// memberships plans the grants of inRoles the role lacks, and the
// revocation of those it has in a role dbkeeper keeps the list for (a
// predefined role, a role of the spec, a privileged role) that inRoles
// does not name.
func (p *planner) memberships(r *dbv1.RoleSpec, seen *seenRole, mk func(event, sql, note string) step) {
	want := map[string]bool{}
	for _, g := range r.InRoles {
		if !p.skipped[g] {
			want[g] = true
		}
	}
	have := map[string]bool{}
	if seen != nil {
		for _, m := range seen.MemberOf {
			have[m.Role] = true
			if want[m.Role] || !(strings.HasPrefix(m.Role, "pg_") || p.declared[m.Role] || m.Privileged) {
				continue
			}
			sql := "REVOKE " + ident(m.Role) + " FROM " + ident(r.Name)
			if m.Grantor != "" {
				sql += " GRANTED BY " + ident(m.Grantor)
			}
			p.grants = append(p.grants, mk(ReasonRoleAltered, sql, fmt.Sprintf("revoked the membership of role %s in %s (not in inRoles)", r.Name, m.Role)))
		}
	}
	for _, g := range r.InRoles {
		if want[g] && !have[g] {
			p.grants = append(p.grants, mk(ReasonRoleAltered, "GRANT "+ident(g)+" TO "+ident(r.Name),
				fmt.Sprintf("granted role %s membership in %s", r.Name, g)))
		}
	}
}

// database plans the i-th database of the spec, which is Present: created
// with its owner, or its owner put back.
func (p *planner) database(i int, d *dbv1.ServerDatabaseSpec) {
	entry := entryOf("databases", i, d.Name)
	if d.Name == p.want.app.database {
		p.refuse(dbv1.ReasonDatabaseRefused, "%s: %s is the application's database, which dbkeeper keeps from the credentials Secret: remove it from spec.databases", entry, d.Name)
		return
	}
	owner := d.Owner
	if owner == "" {
		owner = p.want.app.role
	}
	switch {
	case owner == p.want.app.role && p.seen.role(owner) == nil:
		p.refuse(dbv1.ReasonWaitingForCredentials, "%s: its owner is the application's role %s, which is not on the server yet (see CredentialsReady)", entry, owner)
		return
	case owner != p.want.app.role && !p.declared[owner]:
		p.refuse(dbv1.ReasonDatabaseRefused, "%s: owner %s is neither a role dbkeeper keeps (spec.roles, ensure Present) nor the application's role %s", entry, owner, p.want.app.role)
		return
	}
	s := step{object: "database " + d.Name, entry: entry, refused: dbv1.ReasonDatabaseRefused}
	seen := p.seen.database(d.Name)
	switch {
	case seen == nil:
		s.event, s.sql, s.note = ReasonDatabaseCreated, "CREATE DATABASE "+ident(d.Name)+" OWNER "+ident(owner),
			fmt.Sprintf("created database %s owned by role %s", d.Name, owner)
	case seen.Owner != owner:
		s.event, s.sql, s.note = ReasonDatabaseAltered, "ALTER DATABASE "+ident(d.Name)+" OWNER TO "+ident(owner),
			fmt.Sprintf("changed the owner of database %s to %s (was %s)", d.Name, owner, seen.Owner)
	}
	if s.sql != "" {
		p.databases = append(p.databases, s)
	}
	p.status.Databases = append(p.status.Databases, d.Name)
}

// dropDatabase plans DROP DATABASE of the i-th database of the spec,
// which is Absent, unless sessions are connected to it: dbkeeper never
// ends them (no WITH (FORCE)).
func (p *planner) dropDatabase(i int, d *dbv1.ServerDatabaseSpec) {
	entry := entryOf("databases", i, d.Name)
	seen := p.seen.database(d.Name)
	switch {
	case d.Name == p.want.app.database:
		p.refuse(dbv1.ReasonDatabaseRefused, "%s: %s is the application's database, which dbkeeper never drops: remove it from spec.databases", entry, d.Name)
	case seen == nil:
	case seen.Sessions > 0:
		p.refuse(dbv1.ReasonDropRefused, "%s: database %s is not dropped while sessions are connected to it (%d, of %s): dbkeeper does not end them; it drops the database once they are gone",
			entry, d.Name, seen.Sessions, names(seen.Users))
	default:
		if p.dropping == nil {
			p.dropping = map[string]bool{}
		}
		p.dropping[d.Name] = true
		p.drops = append(p.drops, step{event: ReasonDatabaseDropped, object: "database " + d.Name, entry: entry,
			sql: "DROP DATABASE " + ident(d.Name), note: "dropped database " + d.Name + " (ensure: Absent)", refused: dbv1.ReasonDropRefused})
	}
}

func names(users []string) string {
	if len(users) == 0 {
		return "unknown users"
	}
	return "role " + strings.Join(users, ", ")
}

// dropRole plans the i-th role of the spec, which is Absent: when it owns
// nothing, its privileges are revoked in each database where it holds
// some (DROP OWNED BY, which then drops no object) and it is dropped; a
// role that owns a database or objects is left, and said.
func (p *planner) dropRole(i int, r *dbv1.RoleSpec) {
	entry := entryOf("roles", i, r.Name)
	seen := p.seen.role(r.Name)
	if seen == nil {
		return
	}
	var owns []string
	for _, d := range seen.OwnedDatabases {
		if !p.dropping[d] {
			owns = append(owns, "database "+d)
		}
	}
	for _, o := range seen.Owns {
		if !p.dropping[o.Database] {
			owns = append(owns, fmt.Sprintf("%s in database %s", count(o.Objects, "object"), o.Database))
		}
	}
	if len(owns) > 0 {
		p.refuse(dbv1.ReasonDropRefused, "%s: role %s is not dropped while it owns %s: dropping it would drop them or hand them to somebody dbkeeper cannot choose; "+
			"give them another owner (REASSIGN OWNED BY %s TO ... in each database, or another owner in spec.databases) and dbkeeper drops it",
			entry, r.Name, strings.Join(owns, ", "), r.Name)
		return
	}
	object := "role " + r.Name
	for _, d := range seen.PrivilegesIn {
		if p.dropping[d] {
			continue
		}
		sql, err := dropOwnedIfOwnsNothing(r.Name)
		if err != nil {
			p.refuse(dbv1.ReasonDropRefused, "%s: %v", entry, err)
			return
		}
		where := "database " + d
		if d == "" {
			where = "shared objects"
		}
		p.drops = append(p.drops, step{event: ReasonRoleAltered, object: object, entry: entry, database: d, sql: sql,
			note: fmt.Sprintf("revoked the privileges of role %s on %s (it owns nothing)", r.Name, where), refused: dbv1.ReasonDropRefused})
	}
	p.drops = append(p.drops, step{event: ReasonRoleDropped, object: object, entry: entry, sql: "DROP ROLE " + ident(r.Name),
		note: "dropped role " + r.Name + " (ensure: Absent)", refused: dbv1.ReasonDropRefused})
}

// dropOwnedBody is the DO block that revokes the privileges of role
// {{role}} in the current database and on shared objects (DROP OWNED BY)
// only while it owns nothing anywhere, checked under a lock that keeps
// anybody from giving it an object meanwhile: DROP OWNED would drop that
// object too.
const dropOwnedBody = `DECLARE
  r name := {{role}};
BEGIN
  LOCK TABLE pg_catalog.pg_shdepend IN SHARE MODE;
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_shdepend s JOIN pg_catalog.pg_authid a ON a.oid = s.refobjid
             WHERE s.refclassid = ` + authid + ` AND a.rolname = r AND s.deptype = 'o'
               AND s.classid <> ` + defaultACL + `) THEN
    RAISE EXCEPTION 'role % owns objects: it is not dropped', r USING ERRCODE = 'dependent_objects_still_exist';
  END IF;
  EXECUTE pg_catalog.format('DROP OWNED BY %I', r);
END`

func dropOwnedIfOwnsNothing(role string) (string, error) {
	lit, err := engine.QuoteLiteral(role)
	if err != nil {
		return "", err
	}
	body, err := engine.QuoteLiteral(strings.Replace(dropOwnedBody, "{{role}}", lit, 1))
	if err != nil {
		return "", err
	}
	return "DO " + body, nil
}

// releasedOnes are the roles and databases kept before (status) that left
// the spec: left on the server as they are, listed while they are there.
func (p *planner) releasedOnes() {
	inSpec := map[string]bool{}
	for _, r := range p.want.roles {
		inSpec["role "+r.Name] = true
	}
	for _, d := range p.want.databases {
		inSpec["database "+d.Name] = true
	}
	prev := p.want.previous
	for _, name := range slices.Concat(prev.Roles, prev.ReleasedRoles) {
		if inSpec["role "+name] || p.seen.role(name) == nil || slices.Contains(p.status.ReleasedRoles, name) {
			continue
		}
		p.status.ReleasedRoles = append(p.status.ReleasedRoles, name)
		if slices.Contains(prev.Roles, name) {
			p.released = append(p.released, "role "+name)
		}
	}
	for _, name := range slices.Concat(prev.Databases, prev.ReleasedDatabases) {
		if inSpec["database "+name] || p.seen.database(name) == nil || slices.Contains(p.status.ReleasedDatabases, name) {
			continue
		}
		p.status.ReleasedDatabases = append(p.status.ReleasedDatabases, name)
		if slices.Contains(prev.Databases, name) {
			p.released = append(p.released, "database "+name)
		}
	}
	for _, l := range []*[]string{&p.status.Roles, &p.status.Databases, &p.status.ReleasedRoles, &p.status.ReleasedDatabases} {
		slices.Sort(*l)
		*l = (*l)[:min(len(*l), maxListed)]
	}
}

// maxListed is how many names each list of status.roles holds at most
// (the CRD's MaxItems).
const maxListed = 64

// lookedAt are the names the catalog is read for: the spec's, those kept
// before, the application's.
func lookedAt(want desired) (roles, databases []string) {
	for _, r := range want.roles {
		roles = append(roles, r.Name)
		roles = append(roles, r.InRoles...)
	}
	for _, d := range want.databases {
		databases = append(databases, d.Name)
		if d.Owner != "" {
			roles = append(roles, d.Owner)
		}
	}
	roles = slices.Concat(roles, want.previous.Roles, want.previous.ReleasedRoles, []string{want.app.role})
	databases = slices.Concat(databases, want.previous.Databases, want.previous.ReleasedDatabases, []string{want.app.database})
	return roles, databases
}
