package extensions

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
)

// Event reasons of the extensions controller.
const (
	ReasonExtensionCreated = "ExtensionCreated"
	ReasonExtensionUpdated = "ExtensionUpdated"
	ReasonExtensionDropped = "ExtensionDropped"
)

// catalog is what the primary has of the extensions of the spec.
type catalog struct {
	// Recovery: the server is a standby (a switchover or failover is under
	// way): nothing can be written there.
	Recovery bool `json:"recovery"`
	// Preloaded is the running server's shared_preload_libraries.
	Preloaded string `json:"preloaded"`
	// ServerVersion is server_version (for messages).
	ServerVersion string `json:"serverVersion"`
	// Available are the extensions of the spec the image has, with their
	// installed version ("" when not installed).
	Available []available `json:"available"`
	// Versions are the versions the image offers of each.
	Versions []offered `json:"versions"`
}

type available struct {
	Name      string `json:"name"`
	Installed string `json:"installed"`
	// Schema is the installed extension's schema.
	Schema string `json:"schema"`
}

type offered struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

func (c catalog) available(name string) (available, bool) {
	for _, a := range c.Available {
		if a.Name == name {
			return a, true
		}
	}
	return available{}, false
}

// versions are the versions of name the image offers, sorted.
func (c catalog) versions(name string) []string {
	var out []string
	for _, v := range c.Versions {
		if v.Name == name {
			out = append(out, v.Version)
		}
	}
	slices.Sort(out)
	return out
}

// preloaded says whether the running server loaded lib at its start.
func (c catalog) preloaded(lib string) bool {
	for _, l := range strings.Split(c.Preloaded, ",") {
		if strings.Trim(strings.TrimSpace(l), `"`) == lib {
			return true
		}
	}
	return false
}

// step is one statement of the plan.
type step struct {
	// entry names the spec's entry ("spec.postgresql.extensions[0] (vector)",
	// "spec.databases[1].extensions[0] (hstore)").
	entry string
	sql   string
	// note says what the statement does ("created extension vector").
	note  string
	event string
}

// problem is something of the spec that cannot be kept (yet).
type problem struct {
	reason, message string
}

// plan is what planFor decided.
type plan struct {
	steps    []step
	problems []problem
}

// planFor is the plan that brings the database seen to the extensions of
// spec (the list at field), in the spec's order: Present ones created
// (with what they require: CASCADE; in their schema) or updated to their
// version and moved to their schema, Absent ones dropped without CASCADE.
// An extension the image lacks, at a version it lacks, or whose library
// the running server has not preloaded yet is a problem, and nothing is
// run for it.
func planFor(field string, spec []dbv1.ExtensionSpec, seen catalog) plan {
	var p plan
	for i, e := range spec {
		entry := fmt.Sprintf("%s[%d] (%s)", field, i, e.Name)
		id, err := engine.QuoteIdentifier(e.Name)
		version, verr := engine.QuoteLiteral(e.Version)
		schema := ""
		if e.Schema != "" {
			var serr error
			schema, serr = engine.QuoteIdentifier(e.Schema)
			verr = errors.Join(verr, serr)
		}
		if err = errors.Join(err, verr); err != nil {
			p.problems = append(p.problems, problem{dbv1.ReasonExtensionRefused, fmt.Sprintf("%s: %v", entry, err)})
			continue
		}
		a, ok := seen.available(e.Name)
		if !e.Present() {
			if ok && a.Installed != "" {
				p.steps = append(p.steps, step{entry: entry, sql: "DROP EXTENSION " + id,
					note: "dropped extension " + e.Name, event: ReasonExtensionDropped})
			}
			continue
		}
		if !ok {
			p.problems = append(p.problems, problem{dbv1.ReasonExtensionUnavailable, fmt.Sprintf(
				"%s: the image of PostgreSQL %s does not have extension %s (pg_available_extensions)", entry, seen.ServerVersion, e.Name)})
			continue
		}
		if offered := seen.versions(e.Name); e.Version != "" && !slices.Contains(offered, e.Version) {
			p.problems = append(p.problems, problem{dbv1.ReasonExtensionUnavailable, fmt.Sprintf(
				"%s: the image has extension %s at versions %s, not %s", entry, e.Name, strings.Join(offered, ", "), e.Version)})
			continue
		}
		if lib, ok := dbv1.PreloadLibraries[e.Name]; ok && !seen.preloaded(lib) {
			p.problems = append(p.problems, problem{dbv1.ReasonWaitingForPreload, fmt.Sprintf(
				"%s: waiting for the restart that loads library %s (shared_preload_libraries; ConfigurationReady says how far it is)", entry, lib)})
			continue
		}
		if a.Installed == "" {
			sql := "CREATE EXTENSION IF NOT EXISTS " + id
			what := e.Name
			if schema != "" {
				sql += " SCHEMA " + schema
			}
			if e.Version != "" {
				sql += " VERSION " + version
				what += " " + e.Version
			}
			if e.Schema != "" {
				what += " in schema " + e.Schema
			}
			p.steps = append(p.steps, step{entry: entry, sql: sql + " CASCADE", note: "created extension " + what, event: ReasonExtensionCreated})
			continue
		}
		if e.Version != "" && a.Installed != e.Version {
			p.steps = append(p.steps, step{entry: entry, sql: "ALTER EXTENSION " + id + " UPDATE TO " + version,
				note: fmt.Sprintf("updated extension %s from %s to %s", e.Name, a.Installed, e.Version), event: ReasonExtensionUpdated})
		}
		if e.Schema != "" && a.Schema != e.Schema {
			p.steps = append(p.steps, step{entry: entry, sql: "ALTER EXTENSION " + id + " SET SCHEMA " + schema,
				note: fmt.Sprintf("moved extension %s from schema %s to %s", e.Name, a.Schema, e.Schema), event: ReasonExtensionUpdated})
		}
	}
	return p
}

// names are the extensions of spec.
func names(spec []dbv1.ExtensionSpec) []string {
	out := make([]string, 0, len(spec))
	for _, e := range spec {
		out = append(out, e.Name)
	}
	return out
}
