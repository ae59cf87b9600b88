package tls

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1ac "github.com/dbkeeper/dbkeeper/apis/applyconfiguration/database/v1"
	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// ReasonCARotation is the reason of the Events of a CA rotation.
const ReasonCARotation = "CARotation"

// caPhase is the phase of a rotation the CA Secret is in: Trusting while
// it holds the next CA, Serving while it holds the previous one, else
// Done (or never rotated).
func caPhase(sec *corev1.Secret) dbv1.CARotationPhase {
	switch {
	case len(sec.Data[resources.CANextCertKey]) > 0:
		return dbv1.CARotationTrusting
	case len(sec.Data[resources.CAPreviousCertKey]) > 0:
		return dbv1.CARotationServing
	}
	return dbv1.CARotationDone
}

// rotateCA moves a rotation of the Database's CA (dbv1.AnnotationRotateCA)
// on when its time has come, and returns its status (nil: never rotated)
// and when to look again (zero: nothing pending). The CA Secret holds the
// whole state, so a restarted manager, or one that lost the Database's
// status, goes on where it was:
//   - a new token: a new CA goes into next.crt/next.key; ca.crt (the
//     bundle, resources.CABundle) holds both, the old one still signs;
//   - an overlap later: the new CA signs, the old one's certificate stays
//     in previous.crt (still trusted), its key is gone;
//   - another overlap later: previous.crt goes.
//
// Each step changes the bundle's hash, so ensureCertificate re-issues the
// server certificate (from the CA that signs then) with the new ca.crt,
// and the server reloads it: in the same reconcile, given the CA Secret
// as the step left it (stepped; nil when no step was taken), since the
// cache has not seen it yet and the status this reconcile writes already
// says the new phase. The Secret is updated with its resourceVersion: two
// managers cannot both take a step.
func (s *syncer) rotateCA(ctx context.Context, db *dbv1.Database) (st *dbv1ac.CARotationStatusApplyConfiguration, after time.Duration, stepped *corev1.Secret, err error) {
	name := resources.CASecretName(db)
	now := s.now()
	overlap := db.Spec.CARotationOverlap()
	token := db.Annotations[dbv1.AnnotationRotateCA]
	// The metadata cache says whether there is anything to do: a converged
	// Database reads no Secret.
	meta, err := s.metadata(ctx, db, name)
	if err != nil {
		return nil, 0, nil, err
	}
	if meta == nil {
		return nil, 0, nil, nil // ensureCA makes it, for the token there is now
	}
	if a := meta.Annotations; (token == "" || token == a[resources.AnnotationCARotation]) &&
		a[resources.AnnotationCARotationPhase] != string(dbv1.CARotationTrusting) && a[resources.AnnotationCARotationPhase] != string(dbv1.CARotationServing) {
		st, after, err := rotationStatus(a, overlap, now)
		return st, after, nil, err
	}
	live, err := apply.Live(ctx, s.reader, client.ObjectKey{Namespace: db.Namespace, Name: name}, &corev1.Secret{})
	if err != nil {
		return nil, 0, nil, fmt.Errorf("getting Secret %s: %w", name, err)
	}
	if live == nil {
		return nil, 0, nil, nil
	}
	if err := facet.OurSecret(db, live); err != nil {
		return nil, 0, nil, err
	}
	phase := caPhase(live)
	since, _ := time.Parse(time.RFC3339, live.Annotations[resources.AnnotationCARotationSince])
	next := since.Add(overlap)

	updated := live.DeepCopy()
	if updated.Annotations == nil {
		updated.Annotations = map[string]string{}
	}
	var step string
	switch {
	case phase == dbv1.CARotationDone && token != "" && token != live.Annotations[resources.AnnotationCARotation]:
		ca, err := pki.NewCA(caCommonName(db), now)
		if err != nil {
			return nil, 0, nil, err
		}
		updated.Data[resources.CANextCertKey], updated.Data[resources.CANextKeyKey] = ca.Cert, ca.Key
		updated.Annotations[resources.AnnotationCARotation] = token
		step = fmt.Sprintf("Started rotating the CA of Secret %s (rotate-ca %s): ca.crt holds the old and the new CA; "+
			"the server keeps the old CA's certificate until %s", name, token, now.Add(overlap).UTC().Format(time.RFC3339))
	case phase == dbv1.CARotationTrusting && !now.Before(next):
		updated.Data[resources.CAPreviousCertKey] = live.Data[resources.CACertKey]
		updated.Data[resources.CACertKey] = live.Data[resources.CANextCertKey]
		updated.Data[resources.CAKeyKey] = live.Data[resources.CANextKeyKey]
		delete(updated.Data, resources.CANextCertKey)
		delete(updated.Data, resources.CANextKeyKey)
		step = fmt.Sprintf("The new CA of Secret %s signs the server's and the clients' certificates now; "+
			"the old one stays in ca.crt until %s", name, now.Add(overlap).UTC().Format(time.RFC3339))
	case phase == dbv1.CARotationServing && !now.Before(next):
		delete(updated.Data, resources.CAPreviousCertKey)
		step = fmt.Sprintf("Finished rotating the CA of Secret %s: ca.crt holds the new CA only", name)
	}
	if step != "" {
		updated.Annotations[resources.AnnotationCARotationSince] = now.UTC().Format(time.RFC3339)
		updated.Annotations[resources.AnnotationCARotationPhase] = string(caPhase(updated))
		updated.Annotations[resources.AnnotationCASHA256] = resources.CASHA256(resources.CABundle(updated))
		if err := s.client.Update(ctx, updated, client.FieldOwner(facet.FieldOwner(Name))); err != nil {
			return nil, 0, nil, fmt.Errorf("updating Secret %s for the CA rotation: %w", name, err)
		}
		log.FromContext(ctx).Info("Rotating the CA", "Secret", klog.KObj(updated), "phase", caPhase(updated),
			"token", updated.Annotations[resources.AnnotationCARotation])
		s.writer.Eventf(db, nil, corev1.EventTypeNormal, ReasonCARotation, "RotateCA", "%s", step)
		live, stepped = updated, updated
	}
	st, after, err = rotationStatus(live.Annotations, overlap, now)
	return st, after, stepped, err
}

// rotationStatus is status.tls.caRotation from the CA Secret's
// annotations (nil: never rotated), and when the next phase is due (zero:
// none).
func rotationStatus(a map[string]string, overlap time.Duration, now time.Time) (*dbv1ac.CARotationStatusApplyConfiguration, time.Duration, error) {
	since, err := time.Parse(time.RFC3339, a[resources.AnnotationCARotationSince])
	if err != nil {
		return nil, 0, nil // never rotated
	}
	phase := dbv1.CARotationPhase(a[resources.AnnotationCARotationPhase])
	st := dbv1ac.CARotationStatus().
		WithToken(a[resources.AnnotationCARotation]).
		WithPhase(phase).
		WithSince(metav1.NewTime(since))
	if phase == dbv1.CARotationDone {
		return st, 0, nil
	}
	next := since.Add(overlap)
	st.WithNextPhaseAt(metav1.NewTime(next))
	return st, max(next.Sub(now), time.Second), nil
}

// caRotationApply is status.tls.caRotation as it is, to apply again.
func caRotationApply(r dbv1.CARotationStatus) *dbv1ac.CARotationStatusApplyConfiguration {
	ac := dbv1ac.CARotationStatus().WithToken(r.Token).WithPhase(r.Phase)
	if r.Since != nil {
		ac.WithSince(*r.Since)
	}
	if r.NextPhaseAt != nil {
		ac.WithNextPhaseAt(*r.NextPhaseAt)
	}
	return ac
}
