package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// StatusReport is what status shows, for programs (status -o json): the
// summary line's facts and the status's own sections, as the API has
// them.
type StatusReport struct {
	Namespace          string `json:"namespace"`
	Name               string `json:"name"`
	Engine             string `json:"engine"`
	Version            string `json:"version"`
	Generation         int64  `json:"generation"`
	ObservedGeneration int64  `json:"observedGeneration"`
	Phase              string `json:"phase,omitempty"`
	// Ready is the Ready condition's status being True.
	Ready bool `json:"ready"`
	// Instances is spec.replicas, ReadyInstances how many are ready.
	Instances         int32              `json:"instances"`
	ReadyInstances    int32              `json:"readyInstances"`
	Endpoint          string             `json:"endpoint,omitempty"`
	CredentialsSecret string             `json:"credentialsSecret,omitempty"`
	Conditions        []metav1.Condition `json:"conditions"`
	// Primary is status.replication.currentPrimary, SwitchingOverTo its
	// targetPrimary while a switchover runs.
	Primary         string                  `json:"primary,omitempty"`
	SwitchingOverTo string                  `json:"switchingOverTo,omitempty"`
	Replication     *dbv1.ReplicationStatus `json:"replication,omitempty"`
	Backup          *dbv1.BackupStatus      `json:"backup,omitempty"`
	// RecoverableWindow is when a point-in-time recovery can reach, as
	// far as the status knows.
	RecoverableWindow *RecoverableWindow `json:"recoverableWindow,omitempty"`
	TLS               *dbv1.TLSStatus    `json:"tls,omitempty"`
}

// RecoverableWindow is from the end of the oldest base backup to the last
// archived WAL segment (unset when none was archived yet).
type RecoverableWindow struct {
	From *metav1.Time `json:"from"`
	To   *metav1.Time `json:"to,omitempty"`
}

// NewStatusReport is the StatusReport of db.
func NewStatusReport(db *dbv1.Database) StatusReport {
	r := StatusReport{
		Namespace: db.Namespace, Name: db.Name, Engine: string(db.Spec.Engine), Version: db.Spec.Version,
		Generation: db.Generation, ObservedGeneration: db.Status.ObservedGeneration, Phase: string(db.Status.Phase),
		Instances: db.Spec.ReplicaCount(), ReadyInstances: db.Status.ReadyReplicas,
		Endpoint: db.Status.Endpoint, CredentialsSecret: credentialsSecret(db),
		Conditions:  db.Status.Conditions,
		Replication: db.Status.Replication, Backup: db.Status.Backup, TLS: db.Status.TLS,
	}
	if r.Conditions == nil {
		r.Conditions = []metav1.Condition{}
	}
	for _, c := range db.Status.Conditions {
		r.Ready = r.Ready || c.Type == dbv1.ConditionReady && c.Status == metav1.ConditionTrue
	}
	if rep := db.Status.Replication; rep != nil {
		r.Primary = rep.CurrentPrimary
		if rep.TargetPrimary != rep.CurrentPrimary {
			r.SwitchingOverTo = rep.TargetPrimary
		}
	}
	if b := db.Status.Backup; b != nil && b.FirstRecoverabilityPoint != nil {
		r.RecoverableWindow = &RecoverableWindow{From: b.FirstRecoverabilityPoint}
		if a := b.Archive; a != nil {
			r.RecoverableWindow.To = a.LastArchivedTime
		}
	}
	return r
}

// StatusJSON writes the StatusReport of db, indented.
func StatusJSON(out io.Writer, db *dbv1.Database) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(NewStatusReport(db)); err != nil {
		return fmt.Errorf("writing the status of Database %s/%s: %w", db.Namespace, db.Name, err)
	}
	return nil
}

// status writes the status of the Database name as text or json.
func status(ctx context.Context, env Env, name, output string) error {
	if output != "text" && output != "json" {
		return fmt.Errorf("%w: status -o takes text or json, not %q", ErrUsage, output)
	}
	db, err := get(ctx, env, name)
	if err != nil {
		return err
	}
	if output == "json" {
		return StatusJSON(env.Out, db)
	}
	if err := Status(env.Out, db, env.now()); err != nil {
		return err
	}
	events, err := eventsAbout(ctx, env, db.Namespace, map[string]bool{"Database/" + db.Name: true})
	if err != nil {
		// status without the events rather than none
		fmt.Fprintf(env.errOut(), "warning: no events: %v\n", err)
		return nil
	}
	return StatusEvents(env.Out, events, env.now())
}
