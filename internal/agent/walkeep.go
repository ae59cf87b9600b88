package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// pg_rewind removes every file of the target that the source does not
// have, WAL segments included. Recovery after a rewind starts at the last
// checkpoint both histories share, often minutes of WAL before the
// divergence; a new primary that checkpointed since its promotion has
// recycled those segments, so the rewound instance waited for them for
// ever ("requested WAL segment ... has already been removed"), although
// they were in its own pg_wal before pg_rewind ran. The agent keeps them:
// hard links taken before pg_rewind, linked back after it.

// walSegmentRE matches a WAL segment file's name: its timeline, then the
// high and low parts of its segment number, eight hex digits each.
var walSegmentRE = regexp.MustCompile(`^([0-9A-F]{8})([0-9A-F]{8})([0-9A-F]{8})$`)

// walKeepDir is where keepWAL links the WAL segments while pg_rewind runs:
// beside the data directory, on its volume (hard links cost no space).
func (a *Agent) walKeepDir() string {
	return filepath.Join(filepath.Dir(a.cfg.PGData), "dbkeeper-wal-kept")
}

// keepWAL hard-links the WAL segment files of pgdata's pg_wal into dir,
// which it empties first (a rewind cut short leaves it behind).
func keepWAL(pgdata, dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("emptying %s: %w", dir, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("keeping the WAL before pg_rewind: %w", err)
	}
	entries, err := os.ReadDir(filepath.Join(pgdata, "pg_wal"))
	if err != nil {
		return fmt.Errorf("keeping the WAL before pg_rewind: %w", err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || !walSegmentRE.MatchString(e.Name()) {
			continue
		}
		if err := os.Link(filepath.Join(pgdata, "pg_wal", e.Name()), filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("keeping the WAL before pg_rewind: %w", err)
		}
	}
	return nil
}

// restoreWAL links back into pgdata's pg_wal the segments kept in dir that
// pg_rewind removed and that lie wholly in the shared history: on a
// timeline up to the divergence's, tli, and before the segment of the
// divergence at diverged (segments of segSize bytes). It removes dir and
// returns the names it restored.
func restoreWAL(pgdata, dir string, diverged uint64, tli uint32, segSize uint64) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("restoring the WAL after pg_rewind: %w", err)
	}
	var restored []string
	for _, e := range entries {
		segTLI, segNo, ok := walSegment(e.Name(), segSize)
		if !ok || segTLI > tli || segNo >= diverged/segSize {
			continue
		}
		to := filepath.Join(pgdata, "pg_wal", e.Name())
		if _, err := os.Lstat(to); err == nil {
			continue
		}
		if err := os.Link(filepath.Join(dir, e.Name()), to); err != nil {
			return restored, fmt.Errorf("restoring the WAL after pg_rewind: %w", err)
		}
		restored = append(restored, e.Name())
	}
	if err := os.RemoveAll(dir); err != nil {
		return restored, fmt.Errorf("removing %s: %w", dir, err)
	}
	return restored, nil
}

// walSegment reads a WAL segment file's name: its timeline and segment
// number (segments of segSize bytes).
func walSegment(name string, segSize uint64) (tli uint32, segNo uint64, ok bool) {
	m := walSegmentRE.FindStringSubmatch(name)
	if m == nil || segSize == 0 {
		return 0, 0, false
	}
	t, _ := strconv.ParseUint(m[1], 16, 32)
	hi, _ := strconv.ParseUint(m[2], 16, 32)
	lo, _ := strconv.ParseUint(m[3], 16, 32)
	return uint32(t), hi*segmentsPerID(segSize) + lo, true
}

// walSegmentName is the file name of segment segNo on timeline tli, the
// inverse of walSegment.
func walSegmentName(tli uint32, segNo, segSize uint64) string {
	return fmt.Sprintf("%08X%08X%08X", tli, segNo/segmentsPerID(segSize), segNo%segmentsPerID(segSize))
}

// segmentsPerID is how many segments of segSize bytes a name's middle part
// (the high 32 bits of a WAL position) counts.
func segmentsPerID(segSize uint64) uint64 { return 0x100000000 / segSize }

// missingRecoveryWAL names the first WAL segment that recovery of pgdata
// after pg_rewind needs and pg_wal has no usable file of: from the segment
// its backup_label starts recovery in to the one of until (pg_control's
// minimum recovery ending location, up to which pg_rewind copied the
// source's WAL), on timeline tli (that location's). A file is usable when
// its timeline is in tli's history and served that segment (see
// timelineSpans): a segment of the discarded timeline, after its switch,
// holds the WAL pg_rewind discarded, and recovery never reads it. "" when
// none is missing or there is no backup_label.
func missingRecoveryWAL(pgdata string, until uint64, tli uint32, segSize uint64) (string, error) {
	f, err := os.Open(filepath.Join(pgdata, "backup_label"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading backup_label: %w", err)
	}
	defer f.Close()
	start := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// START WAL LOCATION: 0/2000028 (file 000000010000000000000002)
		if rest, ok := strings.CutPrefix(sc.Text(), "START WAL LOCATION:"); ok {
			if _, file, ok := strings.Cut(rest, "(file "); ok {
				start = strings.TrimSuffix(strings.TrimSpace(file), ")")
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("reading backup_label: %w", err)
	}
	_, first, ok := walSegment(start, segSize)
	if !ok {
		return "", fmt.Errorf("backup_label names no start of recovery (START WAL LOCATION)")
	}
	spans, err := timelineSpans(pgdata, tli, segSize)
	if err != nil {
		return "", err
	}
	entries, err := os.ReadDir(filepath.Join(pgdata, "pg_wal"))
	if err != nil {
		return "", fmt.Errorf("reading pg_wal: %w", err)
	}
	have := map[uint64]bool{}
	for _, e := range entries {
		if t, seg, ok := walSegment(e.Name(), segSize); ok && spans.serves(t, seg) {
			have[seg] = true
		}
	}
	for seg := first; seg <= max(first, until/segSize); seg++ {
		if !have[seg] {
			return walSegmentName(spans.timeline(seg), seg, segSize), nil
		}
	}
	return "", nil
}

// timelineSpan is the segments a timeline's WAL files serve in a
// history: from the segment its parent switched to it in, to the one
// before the segment it switched to its child in.
type timelineSpan struct {
	tli         uint32
	first, last uint64
}

// history is a timeline's ancestry, oldest first, the timeline itself
// last (its span has no end).
type history []timelineSpan

// serves says whether the file of segment seg on timeline tli is one
// recovery along h reads.
func (h history) serves(tli uint32, seg uint64) bool {
	for _, s := range h {
		if s.tli == tli && seg >= s.first && seg <= s.last {
			return true
		}
	}
	return false
}

// timeline is the latest timeline of h that serves seg: the one a missing
// segment is named on.
func (h history) timeline(seg uint64) uint32 {
	for i := len(h) - 1; i > 0; i-- {
		if seg >= h[i].first && seg <= h[i].last {
			return h[i].tli
		}
	}
	return h[0].tli // its span starts at segment 0
}

// timelineSpans reads tli's history file in pgdata's pg_wal (lines of
// "parent timeline, switch position, reason"; pg_rewind copies it from
// the source) into its spans. Timeline 1 has none; a later timeline
// without one (not seen) counts every timeline up to it as serving every
// segment, as the check did before it read histories.
func timelineSpans(pgdata string, tli uint32, segSize uint64) (history, error) {
	data, err := os.ReadFile(filepath.Join(pgdata, "pg_wal", fmt.Sprintf("%08X.history", tli)))
	if errors.Is(err, fs.ErrNotExist) {
		h := history{}
		for t := uint32(1); t <= tli; t++ {
			h = append(h, timelineSpan{tli: t, last: ^uint64(0)})
		}
		return h, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the history of timeline %d: %w", tli, err)
	}
	var h history
	var from uint64
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		parent, err := strconv.ParseUint(fields[0], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("history of timeline %d: line %q: %w", tli, line, err)
		}
		switched, err := agentapi.ParseLSN(fields[1])
		if err != nil {
			return nil, fmt.Errorf("history of timeline %d: line %q: %w", tli, line, err)
		}
		// the switch's segment comes from the child's file: it holds the
		// parent's WAL up to the switch, and the child's after it
		if next := switched / segSize; next > from {
			h = append(h, timelineSpan{tli: uint32(parent), first: from, last: next - 1})
			from = next
		}
	}
	return append(h, timelineSpan{tli: tli, first: from, last: ^uint64(0)}), nil
}
