package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// rewindReportPath is where the last RewindReport is kept, beside the data
// directory on its volume, so that it survives restarts.
func (a *Agent) rewindReportPath() string {
	return filepath.Join(filepath.Dir(a.cfg.PGData), "dbkeeper-rewind.json")
}

// lastRewind reads the persisted RewindReport, nil when there is none.
func (a *Agent) lastRewind() *agentapi.RewindReport {
	b, err := os.ReadFile(a.rewindReportPath())
	if err != nil {
		return nil
	}
	var r agentapi.RewindReport
	if json.Unmarshal(b, &r) != nil {
		return nil
	}
	return &r
}

// writeRewindReport keeps report, as of now, beside the data directory.
func (a *Agent) writeRewindReport(report *agentapi.RewindReport) error {
	report.At = metav1.Now()
	b, _ := json.Marshal(report)
	if err := os.WriteFile(a.rewindReportPath(), b, 0o600); err != nil {
		return fmt.Errorf("writing the rewind report: %w", err)
	}
	return nil
}

// reportFromOutput is the report of a rewind that did not run: where
// pg_rewind's output (its dry run's, or a failed run's) says the servers
// diverged, and the transactions this instance's WAL committed after
// that; nil when the output does not say.
func (a *Agent) reportFromOutput(ctx context.Context, out string) *agentapi.RewindReport {
	lsn, tli, ok := parseDivergence(out)
	if !ok {
		return nil
	}
	n, end, err := a.countCommits(ctx, lsn, tli)
	if err != nil {
		a.log.Error(err, "Cannot count the transactions after the divergence")
		return nil
	}
	return &agentapi.RewindReport{DivergedLSN: lsn, DivergedTimeline: tli, DiscardedTransactions: n, EndLSN: end}
}

var divergedRE = regexp.MustCompile(`servers diverged at WAL location ([0-9A-Fa-f]+/[0-9A-Fa-f]+) on timeline (\d+)`)

// parseDivergence finds pg_rewind's "servers diverged at WAL location X on
// timeline N".
func parseDivergence(out string) (lsn string, tli uint32, ok bool) {
	m := divergedRE.FindStringSubmatch(out)
	if m == nil {
		return "", 0, false
	}
	n, err := strconv.ParseUint(m[2], 10, 32)
	if err != nil {
		return "", 0, false
	}
	return m[1], uint32(n), true
}

// countCommits counts the commit records of this instance's WAL on
// timeline tli from lsn on, and returns the position of its last record.
// pg_waldump exits non-zero at the end of the WAL; what it printed counts.
func (a *Agent) countCommits(ctx context.Context, lsn string, tli uint32) (int64, string, error) {
	cmd := exec.CommandContext(ctx, "pg_waldump", "--path="+filepath.Join(a.cfg.PGData, "pg_wal"),
		"--timeline="+strconv.FormatUint(uint64(tli), 10), "--start="+lsn)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if err := a.reaper.start(cmd); err != nil {
		return 0, "", fmt.Errorf("running pg_waldump: %w", err)
	}
	waitErr := a.reaper.wait(cmd)
	n, end := countCommitRecords(out.String())
	if waitErr != nil && end == "" {
		a.log.Info("No WAL record after the divergence", "lsn", lsn, "timeline", tli, "pg_waldump", errorLine(errOut.String()))
	}
	return n, end, nil
}

var waldumpLSNRE = regexp.MustCompile(`lsn: ([0-9A-Fa-f]+/[0-9A-Fa-f]+)`)

// countCommitRecords counts the transaction commit records in pg_waldump's
// output, and returns the position of the last record.
func countCommitRecords(out string) (int64, string) {
	var n int64
	end := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := waldumpLSNRE.FindStringSubmatch(line); m != nil {
			end = m[1]
		}
		if strings.HasPrefix(line, "rmgr: Transaction") &&
			(strings.Contains(line, "desc: COMMIT ") || strings.Contains(line, "desc: COMMIT_PREPARED ")) {
			n++
		}
	}
	return n, end
}
