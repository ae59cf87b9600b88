package tls

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/apply"
	"github.com/dbkeeper/dbkeeper/internal/conditions"
	"github.com/dbkeeper/dbkeeper/internal/controller/facet"
	"github.com/dbkeeper/dbkeeper/internal/engine"
	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// reloadRecheck is how soon the controller looks again at a server that
// does not serve the Secret's certificate yet: the kubelet updates mounted
// Secrets on its sync (about a minute by default).
const reloadRecheck = 5 * time.Second

// unreachableRecheck is how soon the controller tries again a server it
// could not reach.
const unreachableRecheck = time.Minute

// observeServer compares the certificate the server serves with the
// Secret's, asks the server to reload when they differ, and says so.
func (s *syncer) observeServer(ctx context.Context, db *dbv1.Database, eng engine.Engine, info certInfo) (facet.Outcome, error) {
	t := dbv1.ConditionTLSReady
	now := s.now()
	status := statusOf(db, info)
	renew := untilRenewal(info.renewal, now)
	secret := resources.TLSSecretName(db)
	if s.prober == nil {
		return facet.Outcome{Status: status, RequeueAfter: renew, Condition: conditions.True(t, dbv1.ReasonTLSReady, fmt.Sprintf(
			"Secret %s holds certificate %s; what the server serves is not checked (--tls-server-probe=false), so a renewed certificate is loaded when the server restarts",
			secret, info.serial))}, nil
	}
	pod, err := s.serverPod(ctx, db)
	if err != nil {
		return facet.Outcome{}, err
	}
	if pod == nil {
		return facet.Outcome{Status: status, RequeueAfter: renew, Condition: conditions.True(t, dbv1.ReasonTLSReady, fmt.Sprintf(
			"Secret %s holds certificate %s; no server runs to serve it yet", secret, info.serial))}, nil
	}
	addr := net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(eng.Port())))
	served, err := s.prober.Served(ctx, addr)
	switch {
	case errors.Is(err, ErrNoTLS):
		return facet.Outcome{Status: status, RequeueAfter: reloadRecheck, Condition: conditions.False(t, dbv1.ReasonTLSIssuing, fmt.Sprintf(
			"Secret %s holds certificate %s; server %s does not offer TLS yet (it restarts with it, see StatefulSetReady)", secret, info.serial, pod.Name))}, nil
	case err != nil:
		// The certificate is in place and a restarted server loads it;
		// the operator may just not reach the pods (a NetworkPolicy).
		return facet.Outcome{Status: status, RequeueAfter: unreachableRecheck, Condition: conditions.True(t, dbv1.ReasonTLSReady, fmt.Sprintf(
			"Secret %s holds certificate %s; dbkeeper cannot tell what server %s serves, so it cannot reload it after a renewal: %s",
			secret, info.serial, pod.Name, conditions.Quote(err.Error(), 200)))}, nil
	}
	status.TLS.WithServedSerialNumber(pki.Serial(served))
	same := pki.Serial(served) == info.serial
	if info.raw != nil {
		same = bytes.Equal(served.Raw, info.raw)
	}
	if same {
		return facet.Outcome{Status: status, RequeueAfter: renew, Condition: conditions.True(t, dbv1.ReasonTLSReady, fmt.Sprintf(
			"server %s serves certificate %s of Secret %s", pod.Name, info.serial, secret))}, nil
	}
	// The kubelet may not have updated the mounted files yet; a reload
	// then loads the same files again, which is harmless.
	log.FromContext(ctx).Info("Reloading server configuration to load the renewed certificate", "Pod", klog.KObj(pod),
		"served", pki.Serial(served), "secret", info.serial)
	msg := fmt.Sprintf("server %s serves certificate %s; Secret %s holds %s, and dbkeeper asked the server to reload its configuration (no restart) to load it",
		pod.Name, pki.Serial(served), secret, info.serial)
	err = s.reload(ctx, db, pod, eng, info)
	if err != nil {
		msg = fmt.Sprintf("server %s serves certificate %s; Secret %s holds %s, and reloading the server's configuration failed: %s",
			pod.Name, pki.Serial(served), secret, info.serial, conditions.Quote(err.Error(), 200))
	} else {
		s.writer.Eventf(db, pod, corev1.EventTypeNormal, ReasonServerReloaded, "Reload",
			"Asked server %s to reload its configuration to load certificate %s", pod.Name, info.serial)
	}
	cond := conditions.True(t, dbv1.ReasonTLSReloading, msg)
	if !now.Before(served.NotAfter) {
		cond = conditions.False(t, dbv1.ReasonTLSReloading, msg+"; the served certificate has expired")
	}
	return facet.Outcome{Status: status, RequeueAfter: reloadRecheck, Condition: cond}, nil
}

// reload asks the server of pod to reload, verifying it with the CA of the
// certificate Secret (read now when info does not have it).
func (s *syncer) reload(ctx context.Context, db *dbv1.Database, pod *corev1.Pod, eng engine.Engine, info certInfo) error {
	ca := info.ca
	if ca == nil {
		name := resources.TLSSecretName(db)
		sec, err := apply.Live(ctx, s.reader, client.ObjectKey{Namespace: db.Namespace, Name: name}, &corev1.Secret{})
		if err != nil {
			return fmt.Errorf("getting Secret %s: %w", name, err)
		}
		if sec == nil {
			return fmt.Errorf("secret %s is gone", name)
		}
		ca = sec.Data[resources.CACertKey]
	}
	return s.reloader.Reload(ctx, db, pod.Status.PodIP, eng.Port(), ca)
}

// serverPod is the Database's first engine pod when it is ready and has an
// IP, or nil.
func (s *syncer) serverPod(ctx context.Context, db *dbv1.Database) (*corev1.Pod, error) {
	name := resources.StatefulSetName(db) + "-0"
	pod, err := apply.Live(ctx, s.client, client.ObjectKey{Namespace: db.Namespace, Name: name}, &corev1.Pod{})
	if err != nil {
		return nil, fmt.Errorf("getting Pod %s: %w", name, err)
	}
	if pod == nil || pod.Status.PodIP == "" || !pod.DeletionTimestamp.IsZero() || !instance.PodReady(pod) {
		return nil, nil
	}
	return pod, nil
}
