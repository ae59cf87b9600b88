package dbtest

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/sqlconn"
)

// ServiceTarget is a connection from the test process to a Service's
// ClusterIP (the real node's host routes the Service range through its
// bridge, and kube-proxy's rules apply to the host's own traffic) with the
// credentials of a Database's Secret, verifying the server's certificate
// for the Service's DNS name host (<service>.<namespace>.svc) with the
// Secret's ca.crt when it has one. It reaches the instances exactly as an
// application's pod does, but one connection is kept across statements,
// so a test can time each one.
func ServiceTarget(ctx context.Context, c client.Reader, namespace, service, secret string) (sqlconn.Target, error) {
	svc := &corev1.Service{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: service}, svc); err != nil {
		return sqlconn.Target{}, fmt.Errorf("getting Service %s: %w", service, err)
	}
	sec := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: secret}, sec); err != nil {
		return sqlconn.Target{}, fmt.Errorf("getting Secret %s: %w", secret, err)
	}
	t := sqlconn.Target{
		Host: svc.Spec.ClusterIP, Port: svc.Spec.Ports[0].Port,
		User: string(sec.Data[engine.UsernameKey]), Password: string(sec.Data[engine.PasswordKey]),
		Database: engine.AppDatabase(sec.Data), SSLMode: "disable",
	}
	if ca := sec.Data["ca.crt"]; len(ca) > 0 {
		cfg, err := pki.ClientConfig(ca, service+"."+namespace+".svc")
		if err != nil {
			return sqlconn.Target{}, fmt.Errorf("Secret %s, ca.crt: %w", secret, err)
		}
		t.TLS = cfg
	}
	return t, nil
}

// Writer inserts unique ids into a table through one target, one
// autocommit INSERT at a time, reconnecting after any error, and records
// every id whose INSERT returned success: an acknowledged write, which no
// switchover, rollout or failover may lose.
type Writer struct {
	target sqlconn.Target
	table  string
	// timeout bounds one connection attempt and one INSERT, 0 none.
	timeout time.Duration
	// every is the pause after an acknowledged INSERT.
	every  time.Duration
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	acked []int64
	ackAt []time.Time
	// ackBy is, for each acknowledged id, the server that acknowledged it
	// (address, postmaster start, transaction id, WAL position) and any
	// warning it sent with the acknowledgement.
	ackBy  []string
	failed int
	// lastErr is the last failed statement's or connection's error, and
	// lastErrAt when it came.
	lastErr   error
	lastErrAt time.Time
	next      int64
	// stoppedAt is when Stop was first called.
	stoppedAt time.Time
}

// StartWriter creates table (id bigint primary key) through target and
// starts inserting into it until Stop.
func StartWriter(ctx context.Context, target sqlconn.Target, table string) (*Writer, error) {
	return StartWriterWithTimeout(ctx, target, table, 0)
}

// StartWriterWithTimeout is StartWriter whose every connection attempt
// and INSERT is abandoned after timeout (0: never), as an application with
// a client-side timeout does: a server that stopped answering (frozen,
// cut off) costs it at most timeout before it reconnects through target
// again. An abandoned INSERT is not acknowledged, whatever became of it.
func StartWriterWithTimeout(ctx context.Context, target sqlconn.Target, table string, timeout time.Duration) (*Writer, error) {
	return StartPacedWriter(ctx, target, table, timeout, 5*time.Millisecond)
}

// StartPacedWriter is StartWriterWithTimeout that waits every between two
// acknowledged INSERTs: a steady writer that leaves the node its disk for a
// long test (StartWriterWithTimeout waits 5 ms).
func StartPacedWriter(ctx context.Context, target sqlconn.Target, table string, timeout, every time.Duration) (*Writer, error) {
	conn, err := sqlconn.Connect(ctx, target)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+table+" (id bigint PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())"); err != nil {
		return nil, fmt.Errorf("creating %s: %w", table, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &Writer{target: target, table: table, timeout: timeout, every: every, cancel: cancel, done: make(chan struct{}), next: 1}
	go w.run(ctx)
	return w, nil
}

func (w *Writer) run(ctx context.Context) {
	defer close(w.done)
	var conn *sqlconn.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for ctx.Err() == nil {
		if conn == nil {
			c, err := w.connect(ctx)
			if ctx.Err() != nil {
				return // stopped: what Stop interrupted is no failure
			}
			if err != nil {
				w.fail(err)
				sleep(ctx, 50*time.Millisecond)
				continue
			}
			conn = c
		}
		w.mu.Lock()
		id := w.next
		w.next++
		w.mu.Unlock()
		by, err := w.insert(ctx, conn, id)
		if err != nil && ctx.Err() != nil {
			return // stopped mid-INSERT: neither acknowledged nor failed
		}
		if err != nil {
			w.fail(err)
			conn.Close(context.Background())
			conn = nil
			sleep(ctx, 20*time.Millisecond)
			continue
		}
		w.mu.Lock()
		w.acked = append(w.acked, id)
		w.ackAt = append(w.ackAt, time.Now())
		w.ackBy = append(w.ackBy, by)
		w.mu.Unlock()
		sleep(ctx, w.every)
	}
}

// connect opens a connection to the target within the timeout.
func (w *Writer) connect(ctx context.Context) (*sqlconn.Conn, error) {
	if w.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.timeout)
		defer cancel()
	}
	return sqlconn.Connect(ctx, w.target)
}

// insert inserts id within the timeout and returns which server
// acknowledged it: its address, when its postmaster started, the
// transaction's id and the WAL position after it, and the server's
// warnings if it sent any.
func (w *Writer) insert(ctx context.Context, conn *sqlconn.Conn, id int64) (string, error) {
	if w.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.timeout)
		defer cancel()
	}
	v, _, err := conn.QueryValue(ctx, "INSERT INTO "+w.table+" (id) VALUES ("+strconv.FormatInt(id, 10)+
		") RETURNING concat_ws(' ', inet_server_addr(), to_char(pg_postmaster_start_time(), 'HH24:MI:SS.US'), 'xid', pg_current_xact_id(), 'lsn', pg_current_wal_insert_lsn())")
	if err != nil {
		return "", err
	}
	by := ""
	if v != nil {
		by = *v
	}
	if n := conn.Notices(); len(n) > 0 {
		by += fmt.Sprintf(" notices %q", n)
	}
	return by, nil
}

// AckedBy is which server acknowledged id (see insert); false when it was
// not acknowledged.
func (w *Writer) AckedBy(id int64) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if i, ok := slices.BinarySearch(w.acked, id); ok && i < len(w.ackBy) {
		return w.ackBy[i], true
	}
	return "", false
}

func (w *Writer) fail(err error) {
	w.mu.Lock()
	w.failed++
	w.lastErr, w.lastErrAt = err, time.Now()
	w.mu.Unlock()
}

// Describe says, for a failure's message, how many writes were
// acknowledged and failed, when the last was acknowledged and what the
// last error was.
func (w *Writer) Describe() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := fmt.Sprintf("%d acknowledged, %d failed", len(w.acked), w.failed)
	if n := len(w.ackAt); n > 0 {
		s += fmt.Sprintf("; last acknowledged %s ago by %s", time.Since(w.ackAt[n-1]).Round(time.Millisecond), w.ackBy[n-1])
	}
	if w.lastErr != nil {
		s += fmt.Sprintf("; last error %s ago: %v", time.Since(w.lastErrAt).Round(time.Millisecond), w.lastErr)
	}
	return s
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// Stop stops the writer and waits for its last statement.
func (w *Writer) Stop() {
	w.mu.Lock()
	if w.stoppedAt.IsZero() {
		w.stoppedAt = time.Now()
	}
	w.mu.Unlock()
	w.cancel()
	<-w.done
}

// Acked returns the acknowledged ids so far.
func (w *Writer) Acked() []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.acked)
}

// AckedAt is when the INSERT of id returned success; false when it did
// not (yet).
func (w *Writer) AckedAt(id int64) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if i, ok := slices.BinarySearch(w.acked, id); ok {
		return w.ackAt[i], true
	}
	return time.Time{}, false
}

// Failed is how many statements or connections failed.
func (w *Writer) Failed() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.failed
}

// AckCount is how many writes were acknowledged so far.
func (w *Writer) AckCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// LongestGap is the longest time between two consecutive
// acknowledgements at or after since: the write unavailability of a
// change that started at since.
func (w *Writer) LongestGap(since time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var longest time.Duration
	prev := since
	for _, at := range w.ackAt {
		if at.Before(since) {
			continue
		}
		longest = max(longest, at.Sub(prev))
		prev = at
	}
	return longest
}

// FirstAckAfter is when the first write acknowledged after since was;
// false when none was yet.
func (w *Writer) FirstAckAfter(since time.Time) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	i := sort.Search(len(w.ackAt), func(i int) bool { return w.ackAt[i].After(since) })
	if i == len(w.ackAt) {
		return time.Time{}, false
	}
	return w.ackAt[i], true
}

// LastAck is when the last write was acknowledged; false when none was.
func (w *Writer) LastAck() (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.ackAt) == 0 {
		return time.Time{}, false
	}
	return w.ackAt[len(w.ackAt)-1], true
}

// Outage is the longest time without an acknowledgement at or after
// since (as LongestGap), with when it began (since, or the last
// acknowledgement before it) and when it ended (the first one after it;
// zero when writes have not resumed, the outage then running until now
// or until Stop).
func (w *Writer) Outage(since time.Time) (from, to time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	prev := since
	var longest time.Duration
	from = since
	for _, at := range w.ackAt {
		if at.Before(since) {
			continue
		}
		if d := at.Sub(prev); d > longest {
			longest, from, to = d, prev, at
		}
		prev = at
	}
	end := w.stoppedAt
	if end.IsZero() {
		end = time.Now()
	}
	if end.Sub(prev) > longest {
		return prev, time.Time{}
	}
	return from, to
}

// Missing returns the acknowledged ids that are not in the table, read
// through target. The acknowledgements are taken before the table is
// read: an id acknowledged after the read's snapshot (the writer may still
// write) is not in it, and is no loss.
func (w *Writer) Missing(ctx context.Context, target sqlconn.Target) ([]int64, error) {
	acked := w.Acked()
	conn, err := sqlconn.Connect(ctx, target)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	v, _, err := conn.QueryValue(ctx, "SELECT coalesce(string_agg(id::text, ',' ORDER BY id), '') FROM "+w.table)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", w.table, err)
	}
	present := map[int64]bool{}
	if v != nil && *v != "" {
		for _, s := range strings.Split(*v, ",") {
			id, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return nil, err
			}
			present[id] = true
		}
	}
	var missing []int64
	for _, id := range acked {
		if !present[id] {
			missing = append(missing, id)
		}
	}
	return missing, nil
}

// Percentile is the p-th percentile (0–100, nearest rank) of ds.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p/100*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
