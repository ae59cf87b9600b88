package plugin

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
)

// Status writes what a Database's status says, for a person: a summary,
// each condition, the instances, backups and TLS. It reads nothing but
// the Database.
func Status(out io.Writer, db *dbv1.Database, now time.Time) error {
	w := &errWriter{w: out}
	ready := "not Ready"
	for _, c := range db.Status.Conditions {
		if c.Type == dbv1.ConditionReady && c.Status == metav1.ConditionTrue {
			ready = "Ready"
		}
	}
	w.printf("Database %s/%s: %s %s, %d of %d instances ready, %s (phase %s)\n",
		db.Namespace, db.Name, db.Spec.Engine, db.Spec.Version, db.Status.ReadyReplicas, db.Spec.ReplicaCount(), ready, orDash(string(db.Status.Phase)))
	if db.Status.Endpoint != "" {
		w.printf("Endpoint:    %s (credentials in Secret %s)\n", db.Status.Endpoint, orDash(db.Status.CredentialsSecret))
	}
	if db.Status.ObservedGeneration != db.Generation {
		w.printf("Note:        the controllers have not seen generation %d yet (observed %d)\n", db.Generation, db.Status.ObservedGeneration)
	}

	w.printf("\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CONDITION\tSTATUS\tREASON\tSINCE\tMESSAGE")
	for _, c := range db.Status.Conditions {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, age(now, c.LastTransitionTime.Time), conditions.Quote(c.Message, 160))
	}
	w.flush(tw)

	if r := db.Status.Replication; r != nil {
		w.printf("\nPrimary:     %s", orDash(r.CurrentPrimary))
		if r.TargetPrimary != "" && r.TargetPrimary != r.CurrentPrimary {
			w.printf(" (switching over to %s)", r.TargetPrimary)
		}
		if r.PrimaryLostSince != nil {
			w.printf(" (lost for %s)", age(now, r.PrimaryLostSince.Time))
		}
		w.printf("\n")
		if f := r.LastFailover; f != nil {
			w.printf("Last failover: %s\n", failoverLine(f))
		}
		if u := r.MajorUpgrade; u != nil {
			w.printf("Major upgrade: %s\n", majorUpgradeLine(u, now))
		}
		if len(r.Instances) > 0 {
			w.printf("\n")
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "INSTANCE\tROLE\tSTATE\tREADY\tTIMELINE\tLSN\tLAG\tWAL RECEIVER")
			for _, in := range r.Instances {
				lsn := in.CurrentLSN
				if lsn == "" {
					lsn = in.ReplayedLSN
				}
				lag := "-"
				if in.LagBytes != nil {
					lag = byteSize(*in.LagBytes)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%t\t%d\t%s\t%s\t%s\n", in.Name, orDash(in.Role), orDash(in.State), in.Ready, in.Timeline,
					orDash(lsn), lag, orDash(in.WALReceiver))
			}
			w.flush(tw)
		}
	}

	if b := db.Status.Backup; b != nil && (b.RepositoryPath != "" || b.Archive != nil || b.LastBaseBackup != nil ||
		b.LastSuccessfulTime != nil || b.LastFailureMessage != "" || b.LastVerification != nil || b.RestoredFrom != "") {
		w.printf("\nBackups\n")
		if b.RepositoryPath != "" {
			w.printf("  repository:          %s\n", b.RepositoryPath)
		}
		if a := b.Archive; a != nil {
			w.printf("  last archived WAL:   %s %s\n", orDash(a.LastArchivedWAL), ago(now, a.LastArchivedTime))
			if a.LastFailure != "" {
				w.printf("  last archive failure: %s %s: %s\n", orDash(a.LastFailedWAL), ago(now, a.LastFailedTime), conditions.Quote(a.LastFailure, 200))
			}
			if a.VolumeAvailableBytes > 0 {
				w.printf("  pg_wal:              %s (%s free on the volume)\n", byteSize(a.PendingWALBytes), byteSize(a.VolumeAvailableBytes))
			}
		}
		if bb := b.LastBaseBackup; bb != nil {
			w.printf("  last base backup:    %s (%s, %s) %s from %s\n", bb.Label, orDash(bb.Type), byteSize(bb.Size), ago(now, bb.Finished), orDash(bb.Instance))
			if bb.Note != "" {
				w.printf("                       %s\n", conditions.Quote(bb.Note, 200))
			}
		}
		if b.BaseBackups > 0 {
			w.printf("  base backups kept:   %d\n", b.BaseBackups)
		}
		if b.FirstRecoverabilityPoint != nil {
			w.printf("  recoverable from:    %s\n", b.FirstRecoverabilityPoint.UTC().Format(time.RFC3339))
		}
		if b.LastSuccessfulTime != nil {
			w.printf("  last backup Job:     %s %s\n", orDash(b.LastJob), ago(now, b.LastSuccessfulTime))
		}
		if b.LastFailureMessage != "" {
			w.printf("  last Job failure:    %s %s\n", orDash(b.LastFailedJob), conditions.Quote(b.LastFailureMessage, 200))
		}
		if v := b.LastVerification; v != nil {
			outcome := "failed"
			if v.Succeeded {
				outcome = fmt.Sprintf("succeeded: %d tables, %d rows in %s", v.Tables, v.Rows, orDash(v.Database))
			} else if v.Finished == nil {
				outcome = "running"
			}
			w.printf("  last verification:   %s of %s %s", outcome, orDash(v.Backup), ago(now, v.Finished))
			if v.Message != "" {
				w.printf(": %s", conditions.Quote(v.Message, 200))
			}
			w.printf("\n")
		}
		if b.RestoredFrom != "" {
			w.printf("  restored from:       %s\n", b.RestoredFrom)
		}
	}

	if t := db.Status.TLS; t != nil && t.SerialNumber != "" {
		w.printf("\nTLS: certificate %s in Secret %s, valid until %s, renewed %s", t.SerialNumber, orDash(t.SecretName),
			timeOr(t.NotAfter), timeOr(t.RenewalTime))
		if t.ServedSerialNumber != "" && t.ServedSerialNumber != t.SerialNumber {
			w.printf("; the server still serves %s", t.ServedSerialNumber)
		}
		w.printf("\n")
		if r := t.CARotation; r != nil {
			w.printf("CA rotation %s: %s since %s\n", r.Token, r.Phase, timeOr(r.Since))
		}
	}
	return w.err
}

func failoverLine(f *dbv1.FailoverStatus) string {
	line := fmt.Sprintf("%s -> %s at %s (%s)", f.From, f.To, f.StartedAt.UTC().Format(time.RFC3339), conditions.Quote(f.Reason, 120))
	if f.FinishedAt != nil {
		line += fmt.Sprintf(", took %s", f.FinishedAt.Sub(f.StartedAt.Time).Round(100*time.Millisecond))
	}
	if f.AbortedAt != nil {
		line += fmt.Sprintf(", abandoned after %s: %s stayed the primary", f.AbortedAt.Sub(f.StartedAt.Time).Round(100*time.Millisecond), f.From)
	}
	if f.LostBytes > 0 {
		line += fmt.Sprintf(", %s of WAL not replicated", byteSize(f.LostBytes))
	}
	if f.DiscardedTransactions != nil {
		line += fmt.Sprintf(", %d transactions discarded", *f.DiscardedTransactions)
	}
	return line
}

// errWriter keeps the first write error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

func (e *errWriter) printf(format string, args ...any) { fmt.Fprintf(e, format, args...) }

func (e *errWriter) flush(tw *tabwriter.Writer) {
	if err := tw.Flush(); err != nil && e.err == nil {
		e.err = err
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return now.Sub(t).Round(time.Second).String()
}

func ago(now time.Time, t *metav1.Time) string {
	if t == nil {
		return ""
	}
	return "(" + age(now, t.Time) + " ago)"
}

func timeOr(t *metav1.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// byteSize is n in the largest binary unit that keeps it at 1 or more, with
// one decimal (48.0 MiB).
func byteSize(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, i := float64(n), 0
	for ; v >= 1024 && i < len(units)-1; i++ {
		v /= 1024
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

// majorUpgradeLine says an in-place major upgrade in a line.
func majorUpgradeLine(u *dbv1.MajorUpgradeStatus, now time.Time) string {
	line := fmt.Sprintf("%s to %s on %s, %s", u.From, u.To, u.Primary, u.Phase)
	if u.FinishedAt != nil {
		line += fmt.Sprintf(" after %s", u.FinishedAt.Sub(u.StartedAt.Time).Round(time.Second))
	} else {
		line += fmt.Sprintf(" for %s", age(now, u.StartedAt.Time))
	}
	if u.Message != "" {
		line += ": " + conditions.Quote(u.Message, 200)
	}
	return line
}
