package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// The in-place major upgrade of a primary's data directory
// (docs/design/major-upgrades.md). It runs before the server starts, when
// the template says the image's major is EnvUpgradeTo and the data
// directory is still of EnvUpgradeFrom, with the old major's programs
// copied into OldEngineDir by the init container (CopyEngine):
//
//  1. the old server is started on a private socket (crash recovery, when
//     the primary did not stop cleanly) and read: its bootstrap superuser,
//     locale, checksums, WAL segment size, and what the new major cannot
//     take (extensions without a build for it); the Debian packages'
//     column option pg_attver, which PostgreSQL 18 refuses, is removed
//     from user columns (pg_upgrade --check does not see it, the real run
//     fails on it). Then it is stopped cleanly.
//  2. initdb of the new major into <pgdata>.next with those settings.
//  3. pg_upgrade --link (hard links: no copy of the data, the new cluster
//     on the same volume), which first runs every check of --check and
//     changes nothing when one fails.
//  4. the server's configuration files are carried over, the directories
//     swapped (<pgdata> becomes <pgdata>.major-<from>), and the new server
//     starts as usual. Once it runs: the repository's stanza upgraded,
//     extensions updated, statistics rebuilt (afterMajorUpgrade), the old
//     files removed.
//
// Until the swap, the old data directory is as it was (pg_upgrade --link
// renames its pg_control to pg_control.old only once it links, and that is
// undone), so every failure and every restart before it goes back to the
// old major: a failed upgrade's instance serves the old major from
// OldEngineDir and says why in its report; a new pod tries again. A
// restart after the swap starts the new cluster.

// upgradePort is the old and new servers' port while pg_upgrade runs
// them, on a socket in the upgrade's private directory only.
const (
	upgradeOldPort = 50432
	upgradeNewPort = 50433
)

// upgradeFiles are the paths of an in-place major upgrade, all on the
// data volume beside PGDATA (pg_upgrade --link needs one filesystem).
type upgradeFiles struct {
	pgdata string
	// next is the new major's cluster until the swap.
	next string
	// kept is the old data directory after the swap, until the new
	// server ran.
	kept string
	// work is pg_upgrade's working directory and socket directory, and
	// holds the report, the old programs' library links and hba file.
	work string
}

func (a *Agent) upgradeFiles() upgradeFiles {
	parent, base := filepath.Dir(a.cfg.PGData), filepath.Base(a.cfg.PGData)
	return upgradeFiles{
		pgdata: a.cfg.PGData,
		next:   filepath.Join(parent, base+".next"),
		kept:   filepath.Join(parent, base+".major-"+a.cfg.UpgradeFrom),
		work:   filepath.Join(parent, "major-upgrade"),
	}
}

func (f upgradeFiles) report() string   { return filepath.Join(f.work, "report.json") }
func (f upgradeFiles) upgraded() string { return filepath.Join(f.work, "upgraded") }
func (f upgradeFiles) libs() string     { return filepath.Join(f.work, "libs") }
func (f upgradeFiles) hba() string      { return filepath.Join(f.work, "pg_hba.conf") }

// oldBinDir is the old major's programs in OldEngineDir.
func oldBinDir(major string) string {
	return filepath.Join(agentapi.OldEngineDir, "usr/lib/postgresql", major, "bin")
}

// newBinDir is the image's own major's programs.
func newBinDir(major string) string {
	return filepath.Join("/usr/lib/postgresql", major, "bin")
}

// upgradeReport is the last major upgrade's report on the data volume,
// nil without one.
func (a *Agent) upgradeReport() *agentapi.MajorUpgradeReport {
	if a.cfg.UpgradeTo == "" {
		return nil
	}
	r, _ := readUpgradeReport(a.upgradeFiles().report())
	if r == nil {
		return nil
	}
	return &r.MajorUpgradeReport
}

// upgradeRecord is the report as kept on the volume: with the pod that
// ran it, so that only a new pod tries a failed upgrade again.
type upgradeRecord struct {
	agentapi.MajorUpgradeReport
	PodUID string `json:"podUID,omitempty"`
}

func readUpgradeReport(path string) (*upgradeRecord, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r upgradeRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return &r, nil
}

func (a *Agent) writeUpgradeReport(r *upgradeRecord) {
	f := a.upgradeFiles()
	b, _ := json.Marshal(r)
	if err := writeFileSynced(f.report(), b); err != nil {
		a.log.Error(err, "Cannot keep the major upgrade's report")
	}
}

// writeFileSynced replaces path with b through a synced temporary file
// (writeSynced), the rename synced too.
func writeFileSynced(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := writeSynced(tmp, b); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// needOldEngine is an error when the init container copied no old
// server into the pod, which a data directory of the old major needs.
func (a *Agent) needOldEngine() error {
	if _, err := os.Stat(filepath.Join(oldBinDir(a.cfg.UpgradeFrom), "postgres")); err != nil {
		return fmt.Errorf("the data directory is of PostgreSQL %s and this image runs %s: %w", a.cfg.UpgradeFrom, a.cfg.UpgradeTo, errNoOldEngine)
	}
	return nil
}

// prepareMajor (under a.op, holding the lease, before the primary's
// server starts) upgrades a data directory of EnvUpgradeFrom in place.
// When the upgrade fails, now or in this pod before (its report says
// why), the data directory is as it was and the server runs the old
// major's programs (oldEngineEnv); an error is what stops the agent.
func (a *Agent) prepareMajor() error {
	from, to := a.cfg.UpgradeFrom, a.cfg.UpgradeTo
	if from == "" || to == "" || from == to {
		return nil
	}
	f := a.upgradeFiles()
	if err := finishSwap(f); err != nil {
		return err
	}
	switch dataVersion(f.pgdata) {
	case to:
		// a restart after the swap, before the report said so
		if r, _ := readUpgradeReport(f.report()); r != nil && r.Phase == agentapi.UpgradeRunning && r.From == from && r.To == to {
			r.Phase, r.Step = agentapi.UpgradeAnalyzing, "starting the new server"
			a.writeUpgradeReport(r)
		}
		return nil
	case from:
	default:
		return nil
	}
	if err := a.needOldEngine(); err != nil {
		return err
	}
	if r, _ := readUpgradeReport(f.report()); r != nil && r.Phase == agentapi.UpgradeFailed && r.From == from && r.To == to && r.PodUID == a.cfg.PodUID {
		a.log.Info("The major upgrade failed in this pod before: serving the old major; a new pod tries again", "from", from, "to", to, "why", r.Message)
		return nil
	}
	if err := a.upgradeMajor(f); err != nil {
		a.log.Error(err, "The major upgrade failed: the data directory is as it was, serving the old major", "from", from, "to", to)
	}
	return nil
}

// finishSwap completes a swap that a restart cut between its two renames.
func finishSwap(f upgradeFiles) error {
	if hasCluster(f.pgdata) || !hasCluster(f.next) {
		return nil
	}
	if _, err := os.Stat(f.upgraded()); err != nil {
		return nil
	}
	if err := os.Rename(f.next, f.pgdata); err != nil {
		return fmt.Errorf("finishing the major upgrade's swap: %w", err)
	}
	return nil
}

// upgradeMajor runs the upgrade (see above) and swaps the directories; on
// a failure it puts the old data directory back as it was and records
// why.
func (a *Agent) upgradeMajor(f upgradeFiles) error {
	from, to := a.cfg.UpgradeFrom, a.cfg.UpgradeTo
	rec := &upgradeRecord{PodUID: a.cfg.PodUID, MajorUpgradeReport: agentapi.MajorUpgradeReport{
		From: from, To: to, Phase: agentapi.UpgradeRunning, Method: "link", StartedAt: time.Now().UTC().Format(time.RFC3339)}}
	step := func(s string) {
		rec.Step = s
		a.writeUpgradeReport(rec)
		a.setState(agentapi.StateStarting, fmt.Sprintf("upgrading PostgreSQL %s to %s in place: %s", from, to, s))
		a.log.Info("Major upgrade", "from", from, "to", to, "step", s)
	}
	if err := os.MkdirAll(f.work, 0o700); err != nil {
		return err
	}
	step("preparing")
	err := a.runUpgrade(f, step)
	if err != nil {
		if rbErr := rollBackUpgrade(f); rbErr != nil {
			err = fmt.Errorf("%w; and putting the old data directory back failed: %v", err, rbErr)
		}
		if a.ctx.Err() != nil {
			// stopped (the pod is deleted), not failed: the next pod
			// upgrades again from the old directory
			rec.Message = "interrupted at " + rec.Step + ": " + err.Error()
			a.writeUpgradeReport(rec)
			return err
		}
		rec.Phase, rec.Message, rec.FinishedAt = agentapi.UpgradeFailed, err.Error(), time.Now().UTC().Format(time.RFC3339)
		a.writeUpgradeReport(rec)
		return err
	}
	rec.Phase, rec.Step, rec.Message = agentapi.UpgradeAnalyzing, "starting the new server", ""
	a.writeUpgradeReport(rec)
	return nil
}

// rollBackUpgrade puts the old data directory back as it was before
// pg_upgrade: its pg_control back (pg_upgrade --link renamed it before it
// linked), the new cluster removed.
func rollBackUpgrade(f upgradeFiles) error {
	ctl := filepath.Join(f.pgdata, "global", "pg_control")
	if _, err := os.Stat(ctl + ".old"); err == nil {
		if err := os.Rename(ctl+".old", ctl); err != nil {
			return err
		}
	}
	return os.RemoveAll(f.next)
}

// oldCluster is what the upgrade reads from the old server.
type oldCluster struct {
	superuser  string
	encoding   string
	collate    string
	ctype      string
	provider   string // c (libc), i (icu), b (builtin)
	locale     string // ICU or builtin locale
	checksums  bool
	walSegSize int // bytes
	stripped   int
}

// runUpgrade is the upgrade's steps up to the swap.
func (a *Agent) runUpgrade(f upgradeFiles, step func(string)) error {
	from, to := a.cfg.UpgradeFrom, a.cfg.UpgradeTo
	if err := rollBackUpgrade(f); err != nil { // a run cut before: start from the old directory
		return err
	}
	_ = os.Remove(f.upgraded())
	if err := a.linkOldLibraries(f); err != nil {
		return err
	}
	// pg_upgrade's servers listen on a socket in f.work (0700) only.
	if err := os.WriteFile(f.hba(), []byte("local all all trust\n"), 0o600); err != nil {
		return err
	}
	step("reading the old cluster")
	old, err := a.readOldCluster(f)
	if err != nil {
		return err
	}
	step("initdb of PostgreSQL " + to)
	args := []string{"-D", f.next, "-U", old.superuser, "--encoding", old.encoding, "--lc-collate", old.collate, "--lc-ctype", old.ctype,
		"--wal-segsize", strconv.Itoa(old.walSegSize / (1 << 20)), "--auth-local", "trust", "--auth-host", "scram-sha-256", "--no-instructions",
		"--no-sync"} // pg_upgrade syncs the whole new cluster once it is done
	switch old.provider {
	case "i":
		args = append(args, "--locale-provider", "icu", "--icu-locale", old.locale)
	case "b":
		args = append(args, "--locale-provider", "builtin", "--builtin-locale", old.locale)
	}
	if old.checksums {
		args = append(args, "--data-checksums")
	} else if n, _ := strconv.Atoi(to); n >= 18 {
		args = append(args, "--no-data-checksums") // on by default from 18
	}
	if _, err := a.runUpgradeTool(f, filepath.Join(newBinDir(to), "initdb"), args...); err != nil {
		return fmt.Errorf("initdb of PostgreSQL %s: %w", to, err)
	}
	common := []string{"-b", oldBinDir(from), "-B", newBinDir(to), "-d", f.pgdata, "-D", f.next, "-U", old.superuser,
		"-s", f.work, "-p", strconv.Itoa(upgradeOldPort), "-P", strconv.Itoa(upgradeNewPort),
		"-o", "-c hba_file=" + f.hba() + " -c ssl=off -c archive_mode=off", "-O", "-c hba_file=" + f.hba()}
	// pg_upgrade runs every check of --check first and changes nothing
	// when one fails; a separate --check would only start both servers
	// once more.
	step("pg_upgrade --link")
	if out, err := a.runUpgradeTool(f, filepath.Join(newBinDir(to), "pg_upgrade"), append(common, "--link")...); err != nil {
		if !strings.Contains(out, "Performing Upgrade") {
			return fmt.Errorf("pg_upgrade's checks refused the upgrade: %s", upgradeFailure(out))
		}
		return fmt.Errorf("pg_upgrade failed: %s", upgradeFailure(out))
	}
	step("carrying the configuration over")
	for _, name := range []string{"postgresql.conf", "postgresql.auto.conf", "pg_hba.conf", "pg_ident.conf"} {
		src := filepath.Join(f.pgdata, name)
		if _, err := os.Stat(src); err != nil {
			continue
		}
		if err := copyFile(src, filepath.Join(f.next, name), 0o600); err != nil {
			return err
		}
	}
	// a setting the new major refuses would stop its server from
	// starting after the swap, with no way back: the new server reads
	// the configuration once here (-C prints a setting and exits)
	if out, err := a.runUpgradeTool(f, filepath.Join(newBinDir(to), "postgres"), "-D", f.next, "-C", "data_directory"); err != nil {
		return fmt.Errorf("PostgreSQL %s refuses the configuration carried over from %s (postgresql.conf, postgresql.auto.conf): %s", to, from, errorLine(out))
	}
	if err := syncDir(f.next); err != nil {
		return err
	}
	// the point of no return: from here a restart finishes the swap
	if err := writeFileSynced(f.upgraded(), []byte(from+" "+to+"\n")); err != nil {
		return err
	}
	if err := os.RemoveAll(f.kept); err != nil {
		return err
	}
	if err := os.Rename(f.pgdata, f.kept); err != nil {
		return err
	}
	if err := os.Rename(f.next, f.pgdata); err != nil {
		return err
	}
	a.log.Info("Upgraded the data directory in place", "from", from, "to", to, "strippedColumnOptions", old.stripped)
	return syncDir(filepath.Dir(f.pgdata))
}

// upgradeEnv is the environment of the old major's programs: their
// libraries the new image lacks come first (linkOldLibraries).
func upgradeEnv(f upgradeFiles) []string {
	return append(os.Environ(), "LD_LIBRARY_PATH="+f.libs(), "LC_ALL=C")
}

// runUpgradeTool runs one of the upgrade's programs in f.work.
func (a *Agent) runUpgradeTool(f upgradeFiles, name string, args ...string) (string, error) {
	return a.runIn(a.ctx, f.work, upgradeEnv(f), name, args...)
}

// linkOldLibraries links, in f.libs(), each library the old programs load
// whose name the new image does not have: the old programs then load
// those from OldEngineDir and every other from the new image, and the
// new programs, which need none of those names, are unaffected.
func (a *Agent) linkOldLibraries(f upgradeFiles) error {
	if err := os.RemoveAll(f.libs()); err != nil {
		return err
	}
	if err := os.MkdirAll(f.libs(), 0o700); err != nil {
		return err
	}
	entries, err := os.ReadDir(filepath.Join(agentapi.OldEngineDir, "libs"))
	if err != nil {
		return fmt.Errorf("reading the old major's libraries: %w", err)
	}
	for _, e := range entries {
		if findLibrary(e.Name()) != "" {
			continue
		}
		if err := os.Symlink(filepath.Join(agentapi.OldEngineDir, "libs", e.Name()), filepath.Join(f.libs(), e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// upgradeFailure is why pg_upgrade failed: its last lines, and the first
// lines of the report files they name (such as the tables a check found).
func upgradeFailure(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var keep []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasSuffix(l, "ok") || strings.HasPrefix(l, "Performing") || strings.HasPrefix(l, "-----") {
			continue
		}
		keep = append(keep, l)
	}
	if len(keep) > 8 {
		keep = keep[len(keep)-8:]
	}
	msg := strings.Join(keep, " ")
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "/") || !strings.HasSuffix(l, ".txt") {
			continue
		}
		// the file goes with the new cluster: its content is quoted
		msg = strings.ReplaceAll(msg, l, filepath.Base(l))
		if b, err := os.ReadFile(l); err == nil {
			detail := strings.Fields(string(b))
			if len(detail) > 30 {
				detail = append(detail[:30], "...")
			}
			msg += " [" + filepath.Base(l) + ": " + strings.Join(detail, " ") + "]"
		}
	}
	return msg
}

// readOldCluster starts the old server on f.work's socket (which runs
// crash recovery when the primary did not stop cleanly), reads what
// initdb of the new major must match, runs the checks pg_upgrade does
// not, removes pg_attver from user columns, and stops it cleanly.
func (a *Agent) readOldCluster(f upgradeFiles) (*oldCluster, error) {
	from, to := a.cfg.UpgradeFrom, a.cfg.UpgradeTo
	pgctl := filepath.Join(oldBinDir(from), "pg_ctl")
	opts := fmt.Sprintf("-c listen_addresses= -c unix_socket_directories=%s -p %d -c hba_file=%s -c ssl=off -c archive_mode=off", f.work, upgradeOldPort, f.hba())
	if out, err := a.runUpgradeTool(f, pgctl, "-D", f.pgdata, "-w", "-t", "600", "-l", filepath.Join(f.work, "old-server.log"), "-o", opts, "start"); err != nil {
		return nil, fmt.Errorf("starting PostgreSQL %s to read it: %w: %s", from, err, lastLines(filepath.Join(f.work, "old-server.log"), out))
	}
	old, checkErr := a.inspectOld(f, to)
	if out, err := a.runUpgradeTool(f, pgctl, "-D", f.pgdata, "-w", "-t", "600", "-m", "fast", "stop"); err != nil {
		return nil, errors.Join(checkErr, fmt.Errorf("stopping PostgreSQL %s: %w: %s", from, err, out))
	}
	return old, checkErr
}

// lastLines is the last lines of the log at path, or out when it has none.
func lastLines(path, out string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return strings.TrimSpace(out)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " ")
}

// inspectOld reads the old server and checks each database it lets in.
func (a *Agent) inspectOld(f upgradeFiles, to string) (*oldCluster, error) {
	ctx, cancel := context.WithTimeout(a.ctx, 10*time.Minute)
	defer cancel()
	connect := func(db string) (*pgx.Conn, error) {
		cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable connect_timeout=10 application_name=dbkeeper-upgrade",
			conninfoValue(f.work), upgradeOldPort, conninfoValue(a.cfg.User), conninfoValue(db)))
		if err != nil {
			return nil, err
		}
		return pgx.ConnectConfig(ctx, cfg)
	}
	inDatabase := func(db string, f func(*pgx.Conn) error) error {
		dc, err := connect(db)
		if err != nil {
			return fmt.Errorf("connecting to database %s of the old server: %w", db, err)
		}
		defer dc.Close(context.Background())
		return f(dc)
	}
	c, err := connect("template1")
	if err != nil {
		return nil, fmt.Errorf("connecting to the old server: %w", err)
	}
	defer c.Close(context.Background())
	old := &oldCluster{}
	var seg, checksums string
	if err := c.QueryRow(ctx, `SELECT (SELECT rolname FROM pg_authid WHERE oid = 10), pg_encoding_to_char(encoding), datcollate, datctype,
		current_setting('wal_segment_size'), current_setting('data_checksums') FROM pg_database WHERE datname = 'template1'`).
		Scan(&old.superuser, &old.encoding, &old.collate, &old.ctype, &seg, &checksums); err != nil {
		return nil, fmt.Errorf("reading the old cluster: %w", err)
	}
	old.checksums = checksums == "on"
	if old.walSegSize, err = parseSize(seg); err != nil {
		return nil, err
	}
	// the locale provider and its locale: datlocprovider from 15,
	// daticulocale until 16, datlocale from 17
	var locale *string
	q := `SELECT 'c', NULL::text`
	if n, _ := strconv.Atoi(a.cfg.UpgradeFrom); n >= 17 {
		q = `SELECT datlocprovider::text, datlocale FROM pg_database WHERE datname = 'template1'`
	} else if n >= 15 {
		q = `SELECT datlocprovider::text, daticulocale FROM pg_database WHERE datname = 'template1'`
	}
	if err := c.QueryRow(ctx, q).Scan(&old.provider, &locale); err != nil {
		return nil, fmt.Errorf("reading the old cluster's locale provider: %w", err)
	}
	if locale != nil {
		old.locale = *locale
	}
	rows, err := c.Query(ctx, `SELECT datname FROM pg_database WHERE datallowconn ORDER BY datname`)
	if err != nil {
		return nil, err
	}
	dbs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, db := range dbs {
		err := inDatabase(db, func(dc *pgx.Conn) error {
			p, err := checkOldDatabase(ctx, dc, db, to)
			problems = append(problems, p...)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("PostgreSQL %s cannot take what PostgreSQL %s holds: %s", to, a.cfg.UpgradeFrom, strings.Join(problems, "; "))
	}
	for _, db := range dbs {
		err := inDatabase(db, func(dc *pgx.Conn) error {
			n, err := removeAttver(ctx, dc, db)
			old.stripped += n
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return old, nil
}

// checkOldDatabase is the checks of one database that pg_upgrade does not
// make: every extension must have a build for the new major (its control
// file in the new image).
func checkOldDatabase(ctx context.Context, c *pgx.Conn, db, to string) ([]string, error) {
	rows, err := c.Query(ctx, `SELECT extname, extversion FROM pg_extension ORDER BY extname`)
	if err != nil {
		return nil, fmt.Errorf("reading the extensions of database %s: %w", db, err)
	}
	type ext struct{ name, version string }
	exts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ext, error) {
		var e ext
		return e, r.Scan(&e.name, &e.version)
	})
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, e := range exts {
		if _, err := os.Stat(filepath.Join("/usr/share/postgresql", to, "extension", e.name+".control")); err != nil {
			problems = append(problems, fmt.Sprintf("database %s uses extension %s %s, which this image has no build of for PostgreSQL %s (drop it, or use an image that has it in spec.image)", db, e.name, e.version, to))
		}
	}
	return problems, nil
}

// removeAttver removes the Debian packages' pg_attver column option from
// the user columns of one database: PostgreSQL 18 refuses it when
// pg_upgrade restores the schema (pg_upgrade's checks do not see it). It
// returns how many columns it changed.
func removeAttver(ctx context.Context, c *pgx.Conn, db string) (int, error) {
	tag, err := c.Exec(ctx, `UPDATE pg_catalog.pg_attribute
		SET attoptions = NULLIF(ARRAY(SELECT o FROM unnest(attoptions) o WHERE o NOT LIKE 'pg\_attver=%'), '{}')
		WHERE attrelid >= 16384 AND attoptions IS NOT NULL AND EXISTS (SELECT FROM unnest(attoptions) o WHERE o LIKE 'pg\_attver=%')`)
	if err != nil {
		return 0, fmt.Errorf("removing the pg_attver column option in database %s: %w", db, err)
	}
	return int(tag.RowsAffected()), nil
}

// parseSize reads a size setting as SHOW prints it (16MB).
func parseSize(s string) (int, error) {
	units := map[string]int{"kB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}
	for u, m := range units {
		if n, ok := strings.CutSuffix(s, u); ok {
			v, err := strconv.Atoi(n)
			return v * m, err
		}
	}
	v, err := strconv.Atoi(strings.TrimSuffix(s, "B"))
	return v, err
}

// oldEngineEnv is the environment the server runs with: when the data
// directory is of EnvUpgradeFrom (an upgrade that failed, or a standby of
// a primary that still runs the old major), the old major's programs
// from OldEngineDir come first on PATH, with their libraries; else nil.
func (a *Agent) oldEngineEnv() ([]string, error) {
	from := a.cfg.UpgradeFrom
	if from == "" || a.cfg.UpgradeTo == "" || dataVersion(a.cfg.PGData) != from {
		return nil, nil
	}
	if err := a.needOldEngine(); err != nil {
		return nil, err
	}
	f := a.upgradeFiles()
	if err := os.MkdirAll(f.work, 0o700); err != nil {
		return nil, err
	}
	if err := a.linkOldLibraries(f); err != nil {
		return nil, err
	}
	return []string{"PATH=" + oldBinDir(from) + ":" + os.Getenv("PATH"), "LD_LIBRARY_PATH=" + f.libs()}, nil
}

// oldMajorStandby says whether the data directory is a standby's of the
// major being upgraded from.
func (a *Agent) oldMajorStandby() bool {
	return a.cfg.UpgradeTo != "" && a.cfg.UpgradeFrom != "" && isStandby(a.cfg.PGData) && dataVersion(a.cfg.PGData) == a.cfg.UpgradeFrom
}

// startOldMajorStandby (under a.op) starts a standby whose data directory
// is of the old major: once the primary answers on the new major, its
// copy is emptied to be cloned from it again (the primary kept its own
// old data directory until its upgrade succeeded); while the primary
// still answers on the old major (its upgrade failed, or it has not
// restarted yet), the standby runs on the old major's programs, and
// watchUpgradedPrimary clones it again once the primary has upgraded.
func (a *Agent) startOldMajorStandby() {
	from, to := a.cfg.UpgradeFrom, a.cfg.UpgradeTo
	for {
		major, err := a.primaryMajor(a.ctx)
		switch {
		case a.ctx.Err() != nil:
			return
		case err == nil && major == to:
			if err := a.reclone(fmt.Sprintf("the primary runs PostgreSQL %s after its in-place upgrade, and this standby's copy is of %s", to, from)); err != nil {
				a.fail(err)
			}
			return
		case err == nil && major == from:
			if err := a.startServer(agentapi.StateStarting); err != nil {
				a.fail(err)
				return
			}
			go a.watchUpgradedPrimary()
			return
		case err == nil:
			err = fmt.Errorf("it answers on PostgreSQL %s", major)
		}
		a.setState(agentapi.StateStarting, fmt.Sprintf("this standby's data is of PostgreSQL %s, kept until the primary runs %s after its upgrade: %v", from, to, err))
		select {
		case <-a.ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
}

// watchUpgradedPrimary stops a standby that runs the old major once the
// primary answers on the new one, and empties it to be cloned again.
func (a *Agent) watchUpgradedPrimary() {
	for {
		select {
		case <-a.ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
		if major, err := a.primaryMajor(a.ctx); err != nil || major != a.cfg.UpgradeTo {
			continue
		}
		if !a.op.TryLock() {
			continue
		}
		if !a.oldMajorStandby() {
			a.op.Unlock()
			return
		}
		a.log.Info("The primary runs the new major: stopping this standby of the old one to clone it again", "from", a.cfg.UpgradeFrom, "to", a.cfg.UpgradeTo)
		err := a.stopServer(a.ctx)
		if err == nil {
			err = a.reclone(fmt.Sprintf("the primary runs PostgreSQL %s after its in-place upgrade, and this standby's copy is of %s", a.cfg.UpgradeTo, a.cfg.UpgradeFrom))
		}
		a.op.Unlock()
		if err != nil {
			a.fail(err)
		}
		return
	}
}

// primaryMajor is the major of the server behind PrimaryHost, when it
// runs as a primary.
func (a *Agent) primaryMajor(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*connectTimeout)
	defer cancel()
	c, err := a.connectPrimaryHost(ctx)
	if err != nil {
		return "", err
	}
	defer c.Close(context.Background())
	var recovery bool
	var num int
	if err := c.QueryRow(ctx, "SELECT pg_is_in_recovery(), current_setting('server_version_num')::int").Scan(&recovery, &num); err != nil {
		return "", err
	}
	if recovery {
		return "", fmt.Errorf("%s answers as a standby", a.cfg.PrimaryHost)
	}
	return strconv.Itoa(num / 10000), nil
}

// afterMajorUpgrade runs once the upgraded primary accepts connections:
// it removes the old major's files, upgrades the repository's stanza,
// updates each extension to the new build's default version and rebuilds
// the planner's statistics, reporting each step. A restart runs it again
// (every step may).
func (a *Agent) afterMajorUpgrade() {
	f := a.upgradeFiles()
	rec, _ := readUpgradeReport(f.report())
	if rec == nil || rec.Phase != agentapi.UpgradeAnalyzing || dataVersion(f.pgdata) != rec.To {
		return
	}
	step := func(s string) {
		rec.Step = s
		a.writeUpgradeReport(rec)
		a.log.Info("Major upgrade", "from", rec.From, "to", rec.To, "step", s)
	}
	step("removing the old data directory")
	for _, p := range []string{f.kept, f.libs()} {
		if err := os.RemoveAll(p); err != nil {
			a.log.Error(err, "Cannot remove the old major's files", "path", p)
		}
	}
	_ = os.Remove(f.upgraded())
	var notes []string
	if a.archive != nil {
		step("upgrading the repository's stanza")
		if _, err := a.pgbackrest(a.ctx, a.archive.configPath(), pgbackrestTimeout, "stanza-upgrade"); err != nil {
			notes = append(notes, "the repository's stanza-upgrade failed: "+err.Error())
		} else {
			a.archive.mu.Lock()
			a.archive.stanzaOK, a.archive.infoDirty = false, true
			a.archive.mu.Unlock()
		}
	}
	step("updating extensions")
	updated, err := a.updateExtensions()
	if err != nil {
		notes = append(notes, "updating extensions: "+err.Error())
	}
	step("rebuilding statistics")
	args := []string{"--all", "--analyze-in-stages", "-h", a.cfg.SocketDir, "-p", strconv.Itoa(a.cfg.Port), "-U", a.cfg.User}
	if n, _ := strconv.Atoi(rec.To); n >= 18 {
		args = append(args, "--missing-stats-only") // 18 keeps the statistics pg_upgrade can carry
	}
	env := append(os.Environ(), "PGPASSWORD="+a.cfg.Password, "LC_ALL=C")
	if out, err := a.runIn(a.ctx, "", env, filepath.Join(newBinDir(rec.To), "vacuumdb"), args...); err != nil {
		notes = append(notes, "vacuumdb: "+errorLine(out))
	}
	rec.Phase, rec.Step, rec.FinishedAt = agentapi.UpgradeSucceeded, "", time.Now().UTC().Format(time.RFC3339)
	rec.Message = fmt.Sprintf("PostgreSQL %s upgraded to %s with pg_upgrade --link; %d extension(s) updated; statistics rebuilt", rec.From, rec.To, updated)
	if len(notes) > 0 {
		rec.Message += "; " + strings.Join(notes, "; ")
	}
	a.writeUpgradeReport(rec)
	a.log.Info("The major upgrade is done", "from", rec.From, "to", rec.To, "message", rec.Message)
}

// updateExtensions runs ALTER EXTENSION ... UPDATE in every database for
// each extension older than its new build's default version.
func (a *Agent) updateExtensions() (int, error) {
	ctx, cancel := context.WithTimeout(a.ctx, 10*time.Minute)
	defer cancel()
	c, err := a.connect(ctx)
	if err != nil {
		return 0, err
	}
	rows, err := c.Query(ctx, `SELECT datname FROM pg_database WHERE datallowconn ORDER BY datname`)
	if err != nil {
		c.Close(context.Background())
		return 0, err
	}
	dbs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	c.Close(context.Background())
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, db := range dbs {
		dc, err := a.connectTo(ctx, db, "", untracked)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rows, err := dc.Query(ctx, `SELECT e.extname FROM pg_extension e JOIN pg_available_extensions a ON a.name = e.extname WHERE e.extversion <> a.default_version`)
		var names []string
		if err == nil {
			names, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		for _, name := range names {
			if _, uerr := dc.Exec(ctx, "ALTER EXTENSION "+pgx.Identifier{name}.Sanitize()+" UPDATE"); uerr != nil {
				errs = append(errs, fmt.Errorf("extension %s in database %s: %w", name, db, uerr))
				continue
			}
			n++
		}
		if err != nil {
			errs = append(errs, err)
		}
		dc.Close(context.Background())
	}
	return n, errors.Join(errs...)
}
