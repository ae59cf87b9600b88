package conditions

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

func TestSummary(t *testing.T) {
	facets := []string{dbv1.ConditionStatefulSetReady, dbv1.ConditionServiceReady, dbv1.ConditionCredentialsReady}
	at := func(c metav1.Condition, gen int64) metav1.Condition { c.ObservedGeneration = gen; return c }
	stsTrue := True(dbv1.ConditionStatefulSetReady, dbv1.ReasonStatefulSetReady, "1 of 1")
	svcTrue := True(dbv1.ConditionServiceReady, dbv1.ReasonServicesReady, "ok")
	secTrue := True(dbv1.ConditionCredentialsReady, dbv1.ReasonSecretGenerated, "ok")
	stsFalse := False(dbv1.ConditionStatefulSetReady, dbv1.ReasonProgressing, "0 of 1 ready")
	stsStuck := False(dbv1.ConditionStatefulSetReady, dbv1.ReasonImagePullFailed, "pod x-0: container engine cannot pull image")
	secFalse := False(dbv1.ConditionCredentialsReady, dbv1.ReasonSecretNotFound, "no Secret x")
	secPaused := Unknown(dbv1.ConditionCredentialsReady, dbv1.ReasonPaused, "paused")
	backupDisabled := Unknown(dbv1.ConditionBackupReady, dbv1.ReasonControllerDisabled, "off")

	cases := []struct {
		name     string
		conds    []metav1.Condition
		paused   bool
		deleting bool
		status   metav1.ConditionStatus
		reason   string
		phase    dbv1.Phase
		observed bool
	}{
		{name: "all true", conds: []metav1.Condition{at(stsTrue, 2), at(svcTrue, 2), at(secTrue, 2)},
			status: metav1.ConditionTrue, reason: dbv1.ReasonReady, phase: dbv1.PhaseReady, observed: true},
		{name: "a disabled facet is not read", conds: []metav1.Condition{at(stsTrue, 2), at(svcTrue, 2), at(secTrue, 2), at(backupDisabled, 2)},
			status: metav1.ConditionTrue, reason: dbv1.ReasonReady, phase: dbv1.PhaseReady, observed: true},
		{name: "first false facet gives the reason", conds: []metav1.Condition{at(stsFalse, 2), at(svcTrue, 2), at(secFalse, 2)},
			status: metav1.ConditionFalse, reason: dbv1.ReasonProgressing, phase: dbv1.PhaseProgressing, observed: true},
		{name: "a StatefulSet whose pod cannot start degrades, with the pod's reason", conds: []metav1.Condition{at(stsStuck, 2), at(svcTrue, 2), at(secTrue, 2)},
			status: metav1.ConditionFalse, reason: dbv1.ReasonImagePullFailed, phase: dbv1.PhaseDegraded, observed: true},
		{name: "a false facet other than the StatefulSet degrades", conds: []metav1.Condition{at(stsTrue, 2), at(svcTrue, 2), at(secFalse, 2)},
			status: metav1.ConditionFalse, reason: dbv1.ReasonSecretNotFound, phase: dbv1.PhaseDegraded, observed: true},
		{name: "a facet behind the generation waits", conds: []metav1.Condition{at(stsTrue, 2), at(svcTrue, 1), at(secTrue, 2)},
			status: metav1.ConditionUnknown, reason: dbv1.ReasonReconciling, phase: dbv1.PhaseProgressing},
		{name: "a stale False does not count", conds: []metav1.Condition{at(stsTrue, 2), at(svcTrue, 2), at(secFalse, 1)},
			status: metav1.ConditionUnknown, reason: dbv1.ReasonReconciling, phase: dbv1.PhaseProgressing},
		{name: "a missing facet waits", conds: []metav1.Condition{at(stsTrue, 2), at(svcTrue, 2)},
			status: metav1.ConditionUnknown, reason: dbv1.ReasonReconciling, phase: dbv1.PhaseProgressing},
		{name: "paused", paused: true, conds: []metav1.Condition{at(stsTrue, 2), at(svcTrue, 2), at(secPaused, 2)},
			status: metav1.ConditionUnknown, reason: dbv1.ReasonPaused, phase: dbv1.PhasePaused, observed: true},
		{name: "deleting wins", deleting: true, conds: []metav1.Condition{at(stsTrue, 2), at(svcTrue, 2), at(secTrue, 2)},
			status: metav1.ConditionFalse, reason: dbv1.ReasonDeleting, phase: dbv1.PhaseDeleting, observed: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := &dbv1.Database{}
			db.Generation = 2
			db.Spec.Paused = tc.paused
			db.Status.Conditions = tc.conds
			if tc.deleting {
				now := metav1.Now()
				db.DeletionTimestamp = &now
			}
			got := Summary(db, facets)
			assert.Equal(t, dbv1.ConditionReady, got.Type)
			assert.Equal(t, tc.status, got.Status, got.Message)
			assert.Equal(t, tc.reason, got.Reason, got.Message)
			assert.Equal(t, tc.phase, Phase(got))
			assert.Equal(t, tc.observed, Observed(db, facets))
		})
	}
}

func TestSummaryMessageNamesTheFailingFacets(t *testing.T) {
	db := &dbv1.Database{}
	db.Status.Conditions = []metav1.Condition{
		False(dbv1.ConditionStatefulSetReady, dbv1.ReasonProgressing, "0 of 1 ready"),
		False(dbv1.ConditionCredentialsReady, dbv1.ReasonSecretNotFound, "no Secret x"),
	}
	got := Summary(db, []string{dbv1.ConditionStatefulSetReady, dbv1.ConditionCredentialsReady})
	assert.Equal(t, "StatefulSetReady: 0 of 1 ready; CredentialsReady: no Secret x", got.Message)
}
