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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	batchv1ac "k8s.io/client-go/applyconfigurations/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dbkeeper/dbkeeper/internal/apply"
)

// Ensure returns the live Job of desired's name, creating it from
// desired when it does not exist yet; a Job just created is returned
// without status, so Finished reports it running. A Job is never updated:
// its template is immutable, and an existing one is the run that counts.
func Ensure(ctx context.Context, c client.Client, desired *batchv1ac.JobApplyConfiguration, owner string) (*batchv1.Job, bool, error) {
	job := &batchv1.Job{}
	key := client.ObjectKey{Namespace: *desired.GetNamespace(), Name: *desired.GetName()}
	err := c.Get(ctx, key, job)
	if err == nil {
		return job, false, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, false, fmt.Errorf("getting Job %s: %w", key.Name, err)
	}
	if _, err := apply.Apply(ctx, c, nil, desired, owner); err != nil {
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
