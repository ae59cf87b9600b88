package agent

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The server's output reaches the container's log as JSON lines, one per
// record or line, in the agent's own shape (level, ts, logger, msg) with
// who wrote it (namespace, database, pod) and what it wrote: PostgreSQL's
// jsonlog object as it is ("record"), or a line of text ("line") from its
// stdout and stderr (the entrypoint, initdb, the postmaster before its
// logging collector starts) and from the collector's stderr file (what the
// server's children write without the log protocol: archive_command's
// output, a crash's last words).

// The values of msg in a JSON line of the server's output.
const (
	msgRecord  = "record"  // a jsonlog record, in record
	msgStdout  = "stdout"  // a line of the server's stdout, in line
	msgStderr  = "stderr"  // a line of its stderr (or of the collector's stderr file), in line
	msgDropped = "dropped" // records the agent could not write in time, counted in dropped
)

// serverLogger is the logger of every JSON line of the server's output;
// the agent's own lines say "agent".
const serverLogger = "postgres"

// logTimeLayout is how ts is written: as the agent's own log writes it
// (zapcore.ISO8601TimeEncoder).
const logTimeLayout = "2006-01-02T15:04:05.000Z0700"

// envelope names who wrote a line of the server's output: the constant
// fields of every JSON line.
type envelope struct {
	namespace, database, pod string
}

// jsonLine is one JSON line of the server's output, its fields in this
// order.
type jsonLine struct {
	Level     string          `json:"level"`
	TS        string          `json:"ts"`
	Logger    string          `json:"logger"`
	Msg       string          `json:"msg"`
	Namespace string          `json:"namespace"`
	Database  string          `json:"database"`
	Pod       string          `json:"pod"`
	Record    json.RawMessage `json:"record,omitempty"`
	Line      *string         `json:"line,omitempty"`
	Dropped   int             `json:"dropped,omitempty"`
}

// pgRecord is what the agent reads of a jsonlog record (PostgreSQL leaves
// out the fields it has no value for).
type pgRecord struct {
	Timestamp string `json:"timestamp"`
	PID       int    `json:"pid"`
	Severity  string `json:"error_severity"`
	Message   string `json:"message"`
	Detail    string `json:"detail"`
	Hint      string `json:"hint"`
}

// line is a JSON line of e with the given fields.
func (e envelope) line(now time.Time, level, msg string) jsonLine {
	return jsonLine{Level: level, TS: now.Format(logTimeLayout), Logger: serverLogger, Msg: msg,
		Namespace: e.namespace, Database: e.database, Pod: e.pod}
}

// record is the JSON line of a jsonlog record raw (one line of the
// collector's file), and the text lines of it for the output's tail, as
// the server would have written them to stderr (timestamp [pid]
// SEVERITY:  message, then DETAIL and HINT): exitLine, startFailure and
// walGoneRE read those. A line that is no record goes as text, on
// stderr's terms.
func (e envelope) record(now time.Time, raw []byte) (out []byte, tail string) {
	var r pgRecord
	if err := json.Unmarshal(raw, &r); err != nil || r.Severity == "" {
		return e.text(now, msgStderr, raw), string(raw) + "\n"
	}
	l := e.line(now, severityLevel(r.Severity), msgRecord)
	l.Record = raw
	out, err := encodeLine(l)
	if err != nil {
		return e.text(now, msgStderr, raw), string(raw) + "\n"
	}
	return out, r.tailLines()
}

// text is the JSON line of a line of text the server wrote to stream
// (msgStdout or msgStderr); its level is that of the first PostgreSQL
// severity it holds (info when none).
func (e envelope) text(now time.Time, stream string, text []byte) []byte {
	level := "info"
	if m := textSeverity.FindSubmatch(text); m != nil {
		level = severityLevel(string(m[1]))
	}
	l := e.line(now, level, stream)
	s := string(text)
	l.Line = &s
	out, err := encodeLine(l)
	if err != nil { // a string always encodes
		return append([]byte(strconv.Quote(s)), '\n')
	}
	return out
}

// dropped is the JSON line that says n lines of the server's output were
// dropped.
func (e envelope) dropped(now time.Time, n int) []byte {
	l := e.line(now, "error", msgDropped)
	l.Dropped = n
	out, _ := encodeLine(l)
	return out
}

// encodeLine is l as one line of JSON, HTML characters as they are.
func encodeLine(l jsonLine) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(l); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// textSeverity finds the severity of a line of the server's text log.
var textSeverity = regexp.MustCompile(`\b(DEBUG[1-5]|LOG|INFO|NOTICE|WARNING|ERROR|FATAL|PANIC):  `)

// severityLevel is the level of a line of PostgreSQL's severity: debug,
// info, warn or error (ERROR, FATAL and PANIC alike: record.error_severity
// tells them apart).
func severityLevel(severity string) string {
	switch {
	case strings.HasPrefix(severity, "DEBUG"):
		return "debug"
	case severity == "WARNING":
		return "warn"
	case severity == "ERROR" || severity == "FATAL" || severity == "PANIC":
		return "error"
	}
	return "info"
}

// tailLines are r as the server writes it to stderr with Debian's
// log_line_prefix ('%m [%p] '): a line for the message, one for its detail
// and one for its hint, later lines of each indented with a tab.
func (r pgRecord) tailLines() string {
	prefix := ""
	if r.Timestamp != "" {
		prefix = r.Timestamp + " [" + strconv.Itoa(r.PID) + "] "
	}
	var b strings.Builder
	for _, f := range []struct{ label, text string }{{r.Severity, r.Message}, {"DETAIL", r.Detail}, {"HINT", r.Hint}} {
		if f.text == "" && f.label != r.Severity {
			continue
		}
		b.WriteString(prefix + f.label + ":  " + strings.ReplaceAll(strings.TrimRight(f.text, "\n"), "\n", "\n\t") + "\n")
	}
	return b.String()
}
