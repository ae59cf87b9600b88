package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// A value ALTER SYSTEM accepts may still keep the server from starting
// (shared_buffers beyond the memory, superuser_reserved_connections not
// below max_connections, a library that is not there). The agent keeps a
// copy of postgresql.auto.conf at each start that reaches connections;
// when a later start fails before that with a file that differs from the
// copy, it puts the copy's values back and starts again
// (putBackLastStarted), and refuses the values that failed while the
// manager asks for them again (refusedStarts). The three files lie beside
// the data directory on its volume, never in it: pg_basebackup and
// pg_rewind do not copy them to another instance.

// autoConfFile is PostgreSQL's file of ALTER SYSTEM.
const autoConfFile = "postgresql.auto.conf"

// lastStartedPath is the copy of postgresql.auto.conf the server last
// started with (it accepted connections).
func (a *Agent) lastStartedPath() string {
	return filepath.Join(filepath.Dir(a.cfg.PGData), "dbkeeper-last-started.auto.conf")
}

// refusedConfPath is the last postgresql.auto.conf the server did not
// start with, kept for a person to read.
func (a *Agent) refusedConfPath() string {
	return filepath.Join(filepath.Dir(a.cfg.PGData), "dbkeeper-refused-at-start.auto.conf")
}

// refusedStartsPath keeps the agent's refusedStarts across its restarts.
func (a *Agent) refusedStartsPath() string {
	return filepath.Join(filepath.Dir(a.cfg.PGData), "dbkeeper-refused-at-start.json")
}

// refusedStart is a combination of settings' values the server did not
// start with, which the agent put back as they were at the last start.
type refusedStart struct {
	// Settings are the values that failed, by name as the file had it.
	Settings map[string]string `json:"settings"`
	// Reason is the server's line that says why it exited.
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// saveLastStarted keeps a copy of postgresql.auto.conf as the one the
// server started with; a failure is logged (the next failed start then
// compares with an older copy, or none).
func (a *Agent) saveLastStarted() {
	b, err := os.ReadFile(filepath.Join(a.cfg.PGData, autoConfFile))
	if err == nil {
		_, err = writeFileAtomic(a.lastStartedPath(), b)
	}
	if err != nil {
		a.log.Error(err, "Cannot keep the postgresql.auto.conf the server started with: a setting that stops a later start is not put back")
	}
}

// putBackLastStarted, after the server exited (exitErr, its output out)
// before it accepted connections, puts back in postgresql.auto.conf the
// values of the last start (lastStartedPath) of the settings that differ
// from it: those that only a start applies (postmasterContexts) when any
// differs, else the others (a reload applied them, but a start may still
// refuse one, a certificate's file for instance); never
// OwnedAutoConfParameters. It keeps the failed file aside
// (refusedConfPath), remembers the failed values with the server's line
// (refusedStarts) and says true: the server is to start again. It changes
// nothing and says false without a copy (a new instance's first start),
// or when no setting but OwnedAutoConfParameters differs from it: a start
// with the last start's values failed too, and the agent fails as it
// would without the copy. So a failed configuration is rewritten at most
// twice (restart-only settings, then the others), never in a loop.
func (a *Agent) putBackLastStarted(out string, exitErr error) bool {
	last, err := os.ReadFile(a.lastStartedPath())
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			a.log.Error(err, "Cannot read the postgresql.auto.conf of the server's last start")
		}
		return false
	}
	auto := filepath.Join(a.cfg.PGData, autoConfFile)
	failed, err := os.ReadFile(auto)
	if err != nil {
		a.log.Error(err, "Cannot read postgresql.auto.conf after the server failed to start")
		return false
	}
	failedSettings, lastSettings := parseConf(string(failed)), parseConf(string(last))
	if len(changedSettings(failedSettings, lastSettings, nil)) == 0 {
		return false
	}
	contexts, err := a.postmasterContexts()
	if err != nil {
		a.log.Error(err, "Cannot read which settings only a start applies: putting back every setting changed since the last start")
	}
	// a name --describe-config does not list (an extension's) counts as
	// restart-only, as most of theirs are.
	names := changedSettings(failedSettings, lastSettings, func(name string) bool {
		kind, known := contexts[strings.ToLower(name)]
		return contexts == nil || !known || kind == "postmaster"
	})
	reason := startFailure(out)
	if reason == "" {
		reason = exitErr.Error()
	}
	refusal := refusedStart{Settings: map[string]string{}, Reason: reason, At: time.Now().UTC()}
	for _, n := range names {
		if s, ok := failedSettings[strings.ToLower(n)]; ok {
			refusal.Settings[s.name] = s.value
		}
	}
	if err := os.WriteFile(a.refusedConfPath(), failed, 0o600); err != nil {
		a.log.Error(err, "Cannot keep aside the postgresql.auto.conf the server did not start with")
	}
	if len(refusal.Settings) > 0 {
		if err := a.rememberRefusedStart(refusal); err != nil {
			a.log.Error(err, "Cannot keep the values the server did not start with: the manager's next request writes them again")
		}
	}
	if _, err := writeFileAtomic(auto, []byte(fallbackConf(string(failed), string(last), names))); err != nil {
		a.log.Error(err, "Cannot put back the settings of the server's last start")
		return false
	}
	a.log.Error(exitErr, "The server did not start with settings changed since its last start: put back their values of that start, starting it again",
		"settings", names, "reason", reason, "refusedFile", a.refusedConfPath())
	a.setState(agentapi.StateStarting, fmt.Sprintf("the server did not start with %s changed since its last start (%s): starting it again with their values of that start",
		strings.Join(names, ", "), reason))
	return true
}

// startAgain (under a.op) starts the server after putBackLastStarted, as
// a restart of the container would (startInPlace: startPrimary for a
// primary with a lease), unless the agent stops or another operation
// started or fenced it meanwhile.
func (a *Agent) startAgain() {
	a.op.Lock()
	defer a.op.Unlock()
	a.mu.Lock()
	idle := a.srv == nil && !a.stopping && a.state == agentapi.StateStarting
	a.mu.Unlock()
	if !idle || a.ctx.Err() != nil {
		return
	}
	a.startInPlace()
}

// postmasterContexts reads every built-in setting's context
// (pg_settings.context) by name from postgres --describe-config, which
// needs no data directory.
func (a *Agent) postmasterContexts() (map[string]string, error) {
	ctx, cancel := context.WithTimeout(a.ctx, queryTimeout)
	defer cancel()
	out, err := a.run(ctx, "postgres", []string{"--describe-config"}, nil)
	if err != nil {
		return nil, err
	}
	return parseDescribeConfig(out), nil
}

// parseDescribeConfig reads postgres --describe-config's lines (name, tab,
// context, tab, …) into each setting's context by lower-case name.
func parseDescribeConfig(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Split(l, "\t")
		if len(f) > 2 && f[0] != "" {
			m[strings.ToLower(f[0])] = f[1]
		}
	}
	return m
}

// startFailure is the server's line that says why a start failed: its
// last PANIC or FATAL as it wrote it (exitLine), else its last line (the
// postmaster reports some settings it refuses without a severity).
func startFailure(out string) string {
	if l := severityLine(out); l != "" {
		return l
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// changedSettings names, sorted, the settings other than
// OwnedAutoConfParameters that failed and last (parseConf's) hold with
// different values, or only one of them holds; of those, only the ones
// restartOnly says a start alone applies when it says so of any (nil:
// all).
func changedSettings(failed, last map[string]autoConfSetting, restartOnly func(string) bool) []string {
	names := map[string]string{} // by lower-case name, as failed spells it if it has it
	for key, s := range last {
		names[key] = s.name
	}
	for key, s := range failed {
		names[key] = s.name
	}
	var all, restart []string
	for key, name := range names {
		f, inFailed := failed[key]
		l, inLast := last[key]
		if isOwned(name) || inFailed && inLast && sameValue(name, f.value, l.value) {
			continue
		}
		all = append(all, name)
		if restartOnly != nil && restartOnly(name) {
			restart = append(restart, name)
		}
	}
	if len(restart) > 0 {
		all = restart
	}
	sort.Strings(all)
	return all
}

// isOwned says whether name is one of OwnedAutoConfParameters.
func isOwned(name string) bool {
	return slices.ContainsFunc(agentapi.OwnedAutoConfParameters, func(o string) bool { return strings.EqualFold(o, name) })
}

// fallbackConf is the text of postgresql.auto.conf failed with the
// settings names as the text last has them: failed's lines that set one
// of them left out, last's lines that set one of them appended. Every
// other line, OwnedAutoConfParameters' among them, stays as it is.
func fallbackConf(failed, last string, names []string) string {
	put := map[string]bool{}
	for _, n := range names {
		put[strings.ToLower(n)] = true
	}
	var out []string
	for _, l := range strings.Split(strings.TrimRight(failed, "\n"), "\n") {
		if name, _, ok := parseConfLine(l); !ok || !put[strings.ToLower(name)] {
			out = append(out, l)
		}
	}
	for _, l := range strings.Split(last, "\n") {
		if name, _, ok := parseConfLine(l); ok && put[strings.ToLower(name)] {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n") + "\n"
}

// parseConf reads the settings of a configuration file's text by
// lower-case name; of a name set twice, the last (which the server
// applies).
func parseConf(text string) map[string]autoConfSetting {
	m := map[string]autoConfSetting{}
	for _, l := range strings.Split(text, "\n") {
		if name, value, ok := parseConfLine(l); ok {
			m[strings.ToLower(name)] = autoConfSetting{name: name, value: value}
		}
	}
	return m
}

// parseConfLine reads a line of a configuration file, `name = 'value'`
// as ALTER SYSTEM writes it (a quote doubled, a backslash escape) or
// `name value` unquoted up to a blank or a comment; false for a blank
// line, a comment, or a line without a value.
func parseConfLine(line string) (name, value string, ok bool) {
	s := strings.TrimSpace(line)
	if s == "" || s[0] == '#' {
		return "", "", false
	}
	i := strings.IndexAny(s, " \t=")
	if i <= 0 {
		return "", "", false
	}
	name = s[:i]
	rest := strings.TrimLeft(s[i:], " \t")
	rest = strings.TrimLeft(strings.TrimPrefix(rest, "="), " \t")
	if rest == "" {
		return "", "", false
	}
	if rest[0] != '\'' {
		if j := strings.IndexAny(rest, " \t#"); j >= 0 {
			rest = rest[:j]
		}
		return name, rest, true
	}
	var b strings.Builder
	for j := 1; j < len(rest); j++ {
		switch c := rest[j]; {
		case c == '\'' && j+1 < len(rest) && rest[j+1] == '\'':
			b.WriteByte('\'')
			j++
		case c == '\'':
			return name, b.String(), true
		case c == '\\' && j+1 < len(rest):
			j++
			e := rest[j]
			if k := strings.IndexByte("bfnrt", e); k >= 0 {
				e = "\b\f\n\r\t"[k]
			}
			b.WriteByte(e)
		default:
			b.WriteByte(c)
		}
	}
	return "", "", false // no closing quote
}

// loadRefusedStarts reads the refusals a former run of the agent kept
// (refusedStartsPath); a file that cannot be read is logged and ignored.
func (a *Agent) loadRefusedStarts() {
	b, err := os.ReadFile(a.refusedStartsPath())
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	var refused []refusedStart
	if err == nil {
		err = json.Unmarshal(b, &refused)
	}
	if err != nil {
		a.log.Error(err, "Cannot read the values the server did not start with: the manager's next request writes them again", "file", a.refusedStartsPath())
		return
	}
	a.refusedMu.Lock()
	a.refused = refused
	a.refusedMu.Unlock()
}

// rememberRefusedStart adds r to the agent's refusals and keeps them all
// in refusedStartsPath.
func (a *Agent) rememberRefusedStart(r refusedStart) error {
	a.refusedMu.Lock()
	defer a.refusedMu.Unlock()
	a.refused = append(a.refused, r)
	return a.writeRefusedStarts()
}

// writeRefusedStarts (under refusedMu) writes the agent's refusals to
// refusedStartsPath, or removes it when there are none.
func (a *Agent) writeRefusedStarts() error {
	if len(a.refused) == 0 {
		if err := os.Remove(a.refusedStartsPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing the refused values: %w", err)
		}
		return nil
	}
	b, _ := json.MarshalIndent(a.refused, "", "  ")
	_, err := writeFileAtomic(a.refusedStartsPath(), b)
	return err
}

// refusedStarts are the messages, by lower-case name, of the parameters
// of req that the server did not start with (refusedStart) and that the
// agent does not write again: the combinations req asks for again in
// full. The refusals of the others are forgotten (for good: req changed
// one of their values, or no longer asks for one), and their values are
// written as any other.
func (a *Agent) refusedStarts(req map[string]string) map[string]string {
	a.refusedMu.Lock()
	defer a.refusedMu.Unlock()
	keep, forgot, refused := repeatedStarts(a.refused, req)
	if len(forgot) > 0 {
		for _, r := range forgot {
			a.log.Info("Forgot values the server did not start with: other values asked for", "settings", r.Settings)
		}
		a.refused = keep
		if err := a.writeRefusedStarts(); err != nil {
			a.log.Error(err, "Cannot keep the values the server did not start with")
		}
	}
	return refused
}

// repeatedStarts splits refused into those req asks for again in full
// (each setting with the same value: kept) and the others (forgot), and
// gives the message of each setting of those kept by lower-case name.
func repeatedStarts(refused []refusedStart, req map[string]string) (keep, forgot []refusedStart, messages map[string]string) {
	asked := map[string]string{}
	for n, v := range req {
		asked[strings.ToLower(n)] = v
	}
	messages = map[string]string{}
	for _, r := range refused {
		again := len(r.Settings) > 0
		for n, v := range r.Settings {
			w, ok := asked[strings.ToLower(n)]
			again = again && ok && sameValue(n, v, w)
		}
		if !again {
			forgot = append(forgot, r)
			continue
		}
		keep = append(keep, r)
		for n := range r.Settings {
			messages[strings.ToLower(n)] = r.message(n)
		}
	}
	return keep, forgot, messages
}

// message says that the server did not start with name's value, with the
// others of r if any, and why: "the server did not start with
// shared_buffers = '64GB': FATAL:  could not map anonymous shared memory:
// Cannot allocate memory".
func (r refusedStart) message(name string) string {
	var others []string
	for n, v := range r.Settings {
		if n != name {
			others = append(others, n+" = "+quoteLiteral(v))
		}
	}
	sort.Strings(others)
	msg := "the server did not start with " + name + " = " + quoteLiteral(r.Settings[name])
	if len(others) > 0 {
		msg += " (together with " + strings.Join(others, ", ") + ")"
	}
	return msg + ": " + r.Reason
}

// forgetStarts removes the copy of the last start and the refusals: a
// bootstrap fills the data directory anew.
func (a *Agent) forgetStarts() {
	a.refusedMu.Lock()
	a.refused = nil
	a.refusedMu.Unlock()
	for _, p := range []string{a.lastStartedPath(), a.refusedConfPath(), a.refusedStartsPath()} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			a.log.Error(err, "Cannot remove a file of the former data directory's starts", "file", p)
		}
	}
}
