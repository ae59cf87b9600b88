package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// parametersTimeout bounds one parameters request: a few statements on
// the local server.
const parametersTimeout = 30 * time.Second

// autoConfSQL reads what postgresql.auto.conf holds now, in the file's
// order (pg_file_settings reads the files when queried).
const autoConfSQL = `SELECT name, COALESCE(setting, '') FROM pg_catalog.pg_file_settings
	WHERE sourcefile = pg_catalog.current_setting('data_directory') || '/postgresql.auto.conf' AND name IS NOT NULL
	ORDER BY seqno`

// postmasterSQL lists the settings PostgreSQL applies only at a start.
const postmasterSQL = `SELECT lower(name) FROM pg_catalog.pg_settings WHERE context = 'postmaster'`

// pendingRestartSQL reads the settings a restart may change: a
// configuration file's value the server could not apply on a reload
// (PostgreSQL marks so a postmaster setting that differs from the running
// value; pg_file_settings reads the files when queried, unlike
// pg_settings.pending_restart, which a reload sets in each backend
// later), and a postmaster setting whose running value came from a file
// that no longer holds it (reset to its built-in default). Each with the
// files' value, the running value and where it came from
// (pendingRestart decides).
const pendingRestartSQL = `SELECT f.name, true, COALESCE(f.setting, ''), s.source, s.setting FROM pg_catalog.pg_file_settings f
	JOIN pg_catalog.pg_settings s ON lower(s.name) = lower(f.name)
	WHERE NOT f.applied AND f.error = 'setting could not be applied' AND s.context = 'postmaster'
UNION ALL
SELECT s.name, false, '', s.source, s.setting FROM pg_catalog.pg_settings s
	WHERE s.context = 'postmaster' AND s.source = 'configuration file'
		AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_file_settings f WHERE lower(f.name) = lower(s.name))`

// handleParameters answers POST ParametersPath.
func (a *Agent) handleParameters(w http.ResponseWriter, r *http.Request) {
	var req agentapi.ParametersRequest
	if !readJSON(w, r, &req) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), parametersTimeout)
	defer cancel()
	resp, err := a.applyParameters(ctx, req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// autoConfSetting is one setting of postgresql.auto.conf.
type autoConfSetting struct {
	name, value string
}

// applyParameters makes postgresql.auto.conf of the running server (a
// primary or a standby) hold req's parameters, beside
// OwnedAutoConfParameters, with ALTER SYSTEM: it sets what differs,
// resets what req does not name, reloads the configuration when it
// changed anything, and says which parameters need a restart. A value the
// server did not start with is refused while req asks for it again
// (refusedStarts). A running server is required (409 otherwise).
func (a *Agent) applyParameters(ctx context.Context, req agentapi.ParametersRequest) (agentapi.ParametersResponse, error) {
	var resp agentapi.ParametersResponse
	a.parameters.Lock()
	defer a.parameters.Unlock()
	if s := a.status(ctx); s.State != agentapi.StateRunning || !s.Ready {
		return resp, conflict("not a running server that accepts connections (state %s)", s.State)
	}
	c, err := a.connect(ctx)
	if err != nil {
		return resp, conflict("the server does not accept connections: %v", err)
	}
	defer c.Close(context.Background())

	file, err := readAutoConf(ctx, c)
	if err != nil {
		return resp, err
	}
	owned := map[string]bool{}
	for _, n := range agentapi.OwnedAutoConfParameters {
		owned[strings.ToLower(n)] = true
	}
	refuse := func(name, why string) {
		if resp.Refused == nil {
			resp.Refused = map[string]string{}
		}
		resp.Refused[name] = why
		a.log.Info("Refused a PostgreSQL parameter: left as it was", "parameter", name, "reason", why)
	}
	// alter runs one ALTER SYSTEM: the server's refusal is name's, the
	// loss of the connection ends the request.
	alter := func(name, stmt string) (bool, error) {
		_, err := c.Exec(ctx, stmt)
		var pgErr *pgconn.PgError
		if err != nil && errors.As(err, &pgErr) && !c.IsClosed() {
			refuse(name, refusal(pgErr))
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("ALTER SYSTEM of %s: %w", name, err)
		}
		return true, nil
	}

	names := make([]string, 0, len(req.Parameters))
	requested := map[string]bool{}
	for n := range req.Parameters {
		names = append(names, n)
		requested[strings.ToLower(n)] = true
	}
	sort.Strings(names)
	refusedAtStart := a.refusedStarts(req.Parameters)
	changed, reloaded := false, false
	// a request cut short after a change reloads all the same: the next
	// one finds the file as it wants it and changes (reloads) nothing.
	defer func() {
		if changed && !reloaded {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), queryTimeout)
			defer cancel()
			if err := a.exec(rctx, "SELECT pg_catalog.pg_reload_conf()"); err != nil {
				a.log.Error(err, "Cannot reload the configuration: the parameters written apply at the server's next reload or start")
			}
		}
	}()
	for _, name := range names {
		value := req.Parameters[name]
		if owned[strings.ToLower(name)] {
			refuse(name, "dbkeeper sets "+name+" itself")
			continue
		}
		if why, ok := refusedAtStart[strings.ToLower(name)]; ok {
			refuse(name, why)
			continue
		}
		if why := missingLibrary(name, value, pkglibdir); why != "" {
			refuse(name, why)
			continue
		}
		cur, ok := file[strings.ToLower(name)]
		if ok && sameValue(name, cur.value, value) {
			continue
		}
		stmt, err := alterSystemSet(name, value)
		if err != nil {
			refuse(name, err.Error())
			continue
		}
		done, err := alter(name, stmt)
		if err != nil {
			return resp, err
		}
		if done {
			a.log.Info("Set a PostgreSQL parameter", "parameter", name, "value", value)
			changed = true
		}
	}
	stale := make([]string, 0, len(file))
	for key, s := range file {
		if !requested[key] && !owned[key] {
			stale = append(stale, s.name)
		}
	}
	sort.Strings(stale)
	for _, name := range stale {
		done, err := alter(name, alterSystemReset(name))
		if err != nil {
			return resp, err
		}
		if done {
			a.log.Info("Reset a PostgreSQL parameter", "parameter", name, "was", file[strings.ToLower(name)].value)
			changed = true
		}
	}
	if changed {
		if _, err := c.Exec(ctx, "SELECT pg_catalog.pg_reload_conf()"); err != nil {
			return resp, fmt.Errorf("reloading the configuration: %w", err)
		}
		reloaded = true
	}

	postmaster, err := queryNames(ctx, c, postmasterSQL)
	if err != nil {
		return resp, fmt.Errorf("reading the settings that need a restart: %w", err)
	}
	for _, name := range names {
		if slices.Contains(postmaster, strings.ToLower(name)) {
			resp.RestartOnly = append(resp.RestartOnly, name)
		}
	}
	pending, err := readPending(ctx, c)
	if err != nil {
		return resp, err
	}
	standby := isStandby(a.cfg.PGData)
	var control map[string]string
	for _, p := range pending {
		if standby && p.source == "command line" && isStandbyFloor(p.name) {
			if control, err = a.controlData(ctx); err != nil {
				a.log.Error(err, "Cannot read pg_control: the settings this standby started with raised to its primary's count as pending a restart")
			}
			break
		}
	}
	resp.PendingRestart = pendingRestart(pending, standby, a.commandSets, control)
	return resp, nil
}

// pendingRow is a setting whose running value may not be the one a
// restart would give (pendingRestartSQL).
type pendingRow struct {
	name string
	// inFile says a configuration file holds the setting, with value
	// file; else none holds it any more.
	inFile bool
	file   string
	// source is where the running value came from (pg_settings.source),
	// running the value.
	source, running string
}

// pendingRestart names, sorted and once each, the settings of rows that a
// restart would change. A running value from the server's command line
// (source "command line") outranks the files: one the image's command or
// the agent itself sets stays at a restart. The exception is a standby's
// setting of standbyFloorSettings that the agent raised to its primary's
// at the start (standbyFloorArgs): a restart gives the greater of the
// files' value and pg_control's (control, pg_controldata's fields; nil
// when not read: the files' value) on a standby, the files' on a primary
// (after a promotion).
func pendingRestart(rows []pendingRow, standby bool, commandSets func(string) bool, control map[string]string) []string {
	var out []string
	for _, r := range rows {
		if r.inFile && r.source == "command line" {
			if !isStandbyFloor(r.name) || commandSets(r.name) {
				continue
			}
			if standby && standbyFloorAfterStart(r, control) == r.running {
				continue
			}
		}
		out = append(out, r.name)
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// isStandbyFloor says whether name is one of standbyFloorSettings.
func isStandbyFloor(name string) bool {
	return slices.ContainsFunc(standbyFloorSettings, func(s standbyFloorSetting) bool {
		return strings.EqualFold(s.name, name)
	})
}

// standbyFloorAfterStart is the value a standby's next start gives r, a
// setting of standbyFloorSettings: the files' value, raised to
// pg_control's (control) when lower (standbyFloors); "" when the files'
// value is not a number.
func standbyFloorAfterStart(r pendingRow, control map[string]string) string {
	for _, s := range standbyFloorSettings {
		if !strings.EqualFold(s.name, r.name) {
			continue
		}
		raise, _ := standbyFloors(map[string]string{s.name: r.file}, control)
		for _, f := range raise {
			if f.name == s.name {
				return strconv.Itoa(f.primary)
			}
		}
	}
	if _, err := strconv.Atoi(strings.TrimSpace(r.file)); err != nil {
		return ""
	}
	return strings.TrimSpace(r.file)
}

// readPending reads the rows of pendingRestartSQL.
func readPending(ctx context.Context, c *pgx.Conn) ([]pendingRow, error) {
	rows, err := c.Query(ctx, pendingRestartSQL)
	if err != nil {
		return nil, fmt.Errorf("reading the settings pending a restart: %w", err)
	}
	var out []pendingRow
	var r pendingRow
	_, err = pgx.ForEachRow(rows, []any{&r.name, &r.inFile, &r.file, &r.source, &r.running}, func() error {
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the settings pending a restart: %w", err)
	}
	return out, nil
}

// readAutoConf reads the settings of postgresql.auto.conf by lower-case
// name (PostgreSQL's names are case-insensitive); of a name written twice,
// the last, which is the one PostgreSQL applies.
func readAutoConf(ctx context.Context, c *pgx.Conn) (map[string]autoConfSetting, error) {
	rows, err := c.Query(ctx, autoConfSQL)
	if err != nil {
		return nil, fmt.Errorf("reading postgresql.auto.conf: %w", err)
	}
	file := map[string]autoConfSetting{}
	var s autoConfSetting
	_, err = pgx.ForEachRow(rows, []any{&s.name, &s.value}, func() error {
		file[strings.ToLower(s.name)] = s
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading postgresql.auto.conf: %w", err)
	}
	return file, nil
}

// queryNames runs a query of one text column and returns its values.
func queryNames(ctx context.Context, c *pgx.Conn, sql string) ([]string, error) {
	rows, err := c.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// refusal is the server's message for a refused statement, with its hint
// when it has one: `invalid value for parameter "work_mem": "1XB" (HINT:
// Valid units for this parameter are ...)`.
func refusal(e *pgconn.PgError) string {
	if e.Hint == "" {
		return e.Message
	}
	return e.Message + " (HINT: " + e.Hint + ")"
}

// quoteName quotes each dot-separated part of a parameter's name as an
// identifier (a custom parameter is "extension.name").
func quoteName(name string) string {
	return pgx.Identifier(strings.Split(name, ".")).Sanitize()
}

// quoteLiteral quotes s as a string constant that means the same
// whatever standard_conforming_strings says: an escape string constant
// (E'...') when it holds a backslash, as libpq's PQescapeLiteral does.
func quoteLiteral(s string) string {
	q := "'" + strings.ReplaceAll(s, "'", "''") + "'"
	if strings.Contains(s, `\`) {
		q = "E" + strings.ReplaceAll(q, `\`, `\\`)
	}
	return q
}

// listQuoteParameters are PostgreSQL's list parameters (GUC_LIST_QUOTE)
// whose every value ALTER SYSTEM quotes as an identifier: one constant
// 'pg_stat_statements,auto_explain' would become the single library
// "pg_stat_statements,auto_explain", which the server then fails to load
// at its start. pg_dump's variable_is_guc_list_quote keeps the same list.
// Their values are given as lists, one constant per element; true marks
// those whose elements are SQL names (an element not in double quotes is
// lower-cased), false those of file names (taken as they are).
var listQuoteParameters = map[string]bool{
	"local_preload_libraries":   false,
	"search_path":               true,
	"session_preload_libraries": false,
	"shared_preload_libraries":  false,
	"temp_tablespaces":          true,
	"unix_socket_directories":   false,
}

// alterSystemSet is the statement that writes name = value to
// postgresql.auto.conf; it refuses a NUL byte, and a list parameter's
// value that does not parse or is empty (ALTER SYSTEM would write "", a
// library the server cannot load).
func alterSystemSet(name, value string) (string, error) {
	if strings.ContainsRune(name, 0) || strings.ContainsRune(value, 0) {
		return "", errors.New("a parameter's name and value cannot hold a NUL byte")
	}
	constants := []string{quoteLiteral(value)}
	if names, isList := listQuoteParameters[strings.ToLower(name)]; isList {
		elems, ok := splitList(value, names)
		if !ok {
			return "", fmt.Errorf("invalid list syntax in parameter %q", name)
		}
		if len(elems) == 0 {
			return "", fmt.Errorf("ALTER SYSTEM cannot write an empty %s: leave it out of the parameters to reset it", name)
		}
		constants = constants[:0]
		for _, e := range elems {
			constants = append(constants, quoteLiteral(e))
		}
	}
	return "ALTER SYSTEM SET " + quoteName(name) + " = " + strings.Join(constants, ", "), nil
}

// alterSystemReset is the statement that removes name from
// postgresql.auto.conf.
func alterSystemReset(name string) string {
	return "ALTER SYSTEM RESET " + quoteName(name)
}

// sameValue says whether postgresql.auto.conf's value of name, inFile,
// is the value wanted: the same text, or for a list parameter the same
// elements (ALTER SYSTEM writes "a, b" for "a,b").
func sameValue(name, inFile, want string) bool {
	if inFile == want {
		return true
	}
	names, isList := listQuoteParameters[strings.ToLower(name)]
	if !isList {
		return false
	}
	a, okA := splitList(inFile, names)
	b, okB := splitList(want, names)
	return okA && okB && slices.Equal(a, b)
}

// splitList splits a list parameter's value as the server does
// (SplitIdentifierString, SplitDirectoriesString): elements separated by
// commas, the blanks around them ignored; an element in double quotes is
// taken as it is ("" stands for one quote); another one ends at a blank
// and is lower-cased when names, or ends at the comma when not (a file
// name may hold blanks). It says false for a value the server would not
// parse. An empty value is an empty list.
func splitList(value string, names bool) ([]string, bool) {
	isBlank := func(b byte) bool { return strings.IndexByte(" \t\n\r\f\v", b) >= 0 }
	out := []string{}
	i := 0
	for i < len(value) && isBlank(value[i]) {
		i++
	}
	if i == len(value) {
		return out, true
	}
	for {
		var elem string
		if value[i] == '"' {
			var b strings.Builder
			i++
			for {
				j := strings.IndexByte(value[i:], '"')
				if j < 0 {
					return nil, false
				}
				b.WriteString(value[i : i+j])
				i += j + 1
				if i < len(value) && value[i] == '"' {
					b.WriteByte('"')
					i++
					continue
				}
				break
			}
			elem = b.String()
		} else {
			start := i
			for i < len(value) && value[i] != ',' && (!names || !isBlank(value[i])) {
				i++
			}
			elem = strings.TrimRight(value[start:i], " \t\n\r\f\v")
			if elem == "" {
				return nil, false
			}
			if names {
				elem = asciiLower(elem)
			}
		}
		out = append(out, elem)
		for i < len(value) && isBlank(value[i]) {
			i++
		}
		if i == len(value) {
			return out, true
		}
		if value[i] != ',' {
			return nil, false
		}
		i++
		for i < len(value) && isBlank(value[i]) {
			i++
		}
		if i == len(value) {
			return nil, false
		}
	}
}

// asciiLower lower-cases the ASCII letters of s, as the server folds an
// unquoted name.
func asciiLower(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
}

// pkglibdir is where the image's PostgreSQL keeps its libraries: lib
// beside the bin directory of the postgres on PATH (Debian's
// /usr/lib/postgresql/N/lib, as in the official images); "" when there is
// no postgres on PATH.
func pkglibdir() string {
	bin, err := exec.LookPath("postgres")
	if err != nil {
		return ""
	}
	return filepath.Join(filepath.Dir(filepath.Dir(bin)), "lib")
}

// missingLibrary says which library of a shared_preload_libraries value
// (name, value) is not in the library directory (libdir, asked only for
// that parameter): the server would not start with it (it fails to load
// it), so the value never reaches postgresql.auto.conf. "" for any other
// parameter, a library given by path, or when the directory cannot be
// read (the server's own check at its start stands: refusedStarts).
func missingLibrary(name, value string, libdir func() string) string {
	if !strings.EqualFold(name, "shared_preload_libraries") {
		return ""
	}
	dir := libdir()
	if dir == "" {
		return ""
	}
	if _, err := os.Stat(dir); err != nil {
		return ""
	}
	libs, ok := splitList(value, false)
	if !ok {
		return ""
	}
	for _, lib := range libs {
		if strings.ContainsRune(lib, '/') || strings.HasPrefix(lib, "$libdir") {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, lib+".so")); errors.Is(err, fs.ErrNotExist) {
			if _, err := os.Stat(filepath.Join(dir, lib)); errors.Is(err, fs.ErrNotExist) {
				return fmt.Sprintf("library %q is not in this image (no %s.so in %s): the server would not start with it", lib, lib, dir)
			}
		}
	}
	return ""
}
