// Package jobs is what the controllers that run Jobs share (backup runs
// the on-demand and restore Jobs, cleanup the final backup Job): creating a
// Job once and reading whether it finished. Their watches find a Job's
// Database with facet.DatabaseOf(resources.ComponentBackup).
package jobs

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	batchv1ac "k8s.io/client-go/applyconfigurations/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/internal/apply"
)

// Applier is what creates a Job: the controller's facet.Writer.
type Applier interface {
	Apply(ctx context.Context, live client.Object, desired runtime.ApplyConfiguration) (bool, error)
}

// Ensure returns the live Job of desired's name, read with r, creating it
// from desired with w when it does not exist yet, and reports whether it
// created it; a Job just created is returned without status, so Finished
// reports it running. A Job is never updated: its template is immutable,
// and an existing one is the run that counts. Its errors name the Job and
// the step that failed.
func Ensure(ctx context.Context, r client.Reader, w Applier, desired *batchv1ac.JobApplyConfiguration) (*batchv1.Job, bool, error) {
	key := client.ObjectKey{Namespace: *desired.GetNamespace(), Name: *desired.GetName()}
	job, err := apply.Live(ctx, r, key, &batchv1.Job{})
	if err != nil {
		return nil, false, fmt.Errorf("getting Job %s: %w", key.Name, err)
	}
	if job != nil {
		return job, false, nil
	}
	if _, err := w.Apply(ctx, nil, desired); err != nil {
		return nil, false, fmt.Errorf("creating Job %s: %w", key.Name, err)
	}
	return &batchv1.Job{}, true, nil
}

// Finished reports whether a Job has finished, whether it failed, when, and
// why it failed.
func Finished(j *batchv1.Job) (done, failed bool, at time.Time, msg string) {
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			at = c.LastTransitionTime.Time
			if j.Status.CompletionTime != nil {
				at = j.Status.CompletionTime.Time
			}
			return true, false, at, ""
		case batchv1.JobFailed:
			msg = c.Reason
			if c.Message != "" {
				msg += ": " + c.Message
			}
			return true, true, c.LastTransitionTime.Time, msg
		}
	}
	return false, false, time.Time{}, ""
}
