package instance

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/pki"
	"github.com/dbkeeper/dbkeeper/internal/resources"
)

// Agents reaches the agents of a Database's instances (pods): what the
// replication controller learns from and asks of them. Every method
// returns an error when the agent does not answer or refuses.
type Agents interface {
	// Status is what the agent of pod reports.
	Status(ctx context.Context, db *dbv1.Database, pod *corev1.Pod) (agentapi.Status, error)
	// Bootstrap asks the agent of pod to fill its empty data directory.
	Bootstrap(ctx context.Context, db *dbv1.Database, pod *corev1.Pod, req agentapi.BootstrapRequest) (agentapi.Status, error)
	// Demote asks the agent of the primary pod to stop taking writes and
	// restart as a standby.
	Demote(ctx context.Context, db *dbv1.Database, pod *corev1.Pod) (agentapi.DemoteResponse, error)
	// Promote asks the agent of the standby pod to promote its server: a
	// switchover's once it replayed up to req.MinReplayedLSN (when not
	// empty), a failover's (req.Failover) once it took the primary lease
	// over, which the agent answers (202) before it is done.
	Promote(ctx context.Context, db *dbv1.Database, pod *corev1.Pod, req agentapi.PromoteRequest) (agentapi.Status, error)
	// Detach asks the agent of the standby pod to stop its WAL receiver
	// (a failover cuts the standbys off the lost primary first).
	Detach(ctx context.Context, db *dbv1.Database, pod *corev1.Pod) (agentapi.Status, error)
	// RejoinStandby asks the agent of a standby pod that cannot follow the
	// primary's timeline to rewind from it (pg_rewind), in the background.
	RejoinStandby(ctx context.Context, db *dbv1.Database, pod *corev1.Pod) (agentapi.Status, error)
	// Backup asks the agent of the primary pod to start a base backup
	// into the Database's repository (or returns the run of req's ID).
	Backup(ctx context.Context, db *dbv1.Database, pod *corev1.Pod, req agentapi.BackupRequest) (agentapi.BackupRun, error)
	// Parameters sends the agent of pod spec.postgresql.parameters, which
	// it writes with ALTER SYSTEM (PostgreSQL checking each) and reloads.
	Parameters(ctx context.Context, db *dbv1.Database, pod *corev1.Pod, req agentapi.ParametersRequest) (agentapi.ParametersResponse, error)
	// Restart asks the agent of pod to restart its server in place (same
	// role, the primary lease kept) and answers once it runs again.
	Restart(ctx context.Context, db *dbv1.Database, pod *corev1.Pod) (agentapi.Status, error)
	// PushBinary sends the agent of pod the build b, which it checks and
	// replaces itself with in place, its server running on; a 409 says it
	// did not take it.
	PushBinary(ctx context.Context, db *dbv1.Database, pod *corev1.Pod, b AgentBinary) (agentapi.TakeoverAnswer, error)
}

// agentTimeout bounds one call to an agent; a demote or promote waits for
// the server to stop or to accept writes.
const (
	agentStatusTimeout = 5 * time.Second
	agentActionTimeout = 90 * time.Second
)

// PodAgents is the Agents of a running manager: it calls the agent at the
// pod's IP (agentapi.Port), over HTTPS verified with the CA of the Database's
// TLS Secret for the pod's DNS name under the headless Service when the
// pod serves TLS, over HTTP otherwise, with the bearer token of the
// replication Secret. Secrets reads those Secrets from the API server
// (the cache holds only Secrets' metadata).
type PodAgents struct {
	Secrets client.Reader
}

var _ Agents = PodAgents{}

// Status implements Agents.
func (a PodAgents) Status(ctx context.Context, db *dbv1.Database, pod *corev1.Pod) (agentapi.Status, error) {
	return call(ctx, a, db, pod, agentStatusTimeout, func(c agentapi.Client, ctx context.Context, base string) (agentapi.Status, error) {
		return c.Status(ctx, base)
	})
}

// Bootstrap implements Agents.
func (a PodAgents) Bootstrap(ctx context.Context, db *dbv1.Database, pod *corev1.Pod, req agentapi.BootstrapRequest) (agentapi.Status, error) {
	return call(ctx, a, db, pod, agentActionTimeout, func(c agentapi.Client, ctx context.Context, base string) (agentapi.Status, error) {
		return c.Bootstrap(ctx, base, req)
	})
}

// Demote implements Agents.
func (a PodAgents) Demote(ctx context.Context, db *dbv1.Database, pod *corev1.Pod) (agentapi.DemoteResponse, error) {
	return call(ctx, a, db, pod, agentActionTimeout, agentapi.Client.Demote)
}

// Promote implements Agents.
func (a PodAgents) Promote(ctx context.Context, db *dbv1.Database, pod *corev1.Pod, req agentapi.PromoteRequest) (agentapi.Status, error) {
	return call(ctx, a, db, pod, agentActionTimeout, func(c agentapi.Client, ctx context.Context, base string) (agentapi.Status, error) {
		return c.Promote(ctx, base, req)
	})
}

// Detach implements Agents.
func (a PodAgents) Detach(ctx context.Context, db *dbv1.Database, pod *corev1.Pod) (agentapi.Status, error) {
	return call(ctx, a, db, pod, agentActionTimeout, agentapi.Client.Detach)
}

// RejoinStandby implements Agents.
func (a PodAgents) RejoinStandby(ctx context.Context, db *dbv1.Database, pod *corev1.Pod) (agentapi.Status, error) {
	return call(ctx, a, db, pod, agentActionTimeout, agentapi.Client.Rejoin)
}

// Backup implements Agents.
func (a PodAgents) Backup(ctx context.Context, db *dbv1.Database, pod *corev1.Pod, req agentapi.BackupRequest) (agentapi.BackupRun, error) {
	return call(ctx, a, db, pod, agentStatusTimeout, func(c agentapi.Client, ctx context.Context, base string) (agentapi.BackupRun, error) {
		return c.Backup(ctx, base, req)
	})
}

// Parameters implements Agents.
func (a PodAgents) Parameters(ctx context.Context, db *dbv1.Database, pod *corev1.Pod, req agentapi.ParametersRequest) (agentapi.ParametersResponse, error) {
	return call(ctx, a, db, pod, agentStatusTimeout, func(c agentapi.Client, ctx context.Context, base string) (agentapi.ParametersResponse, error) {
		return c.Parameters(ctx, base, req)
	})
}

// Restart implements Agents.
func (a PodAgents) Restart(ctx context.Context, db *dbv1.Database, pod *corev1.Pod) (agentapi.Status, error) {
	return call(ctx, a, db, pod, agentActionTimeout, func(c agentapi.Client, ctx context.Context, base string) (agentapi.Status, error) {
		return c.Restart(ctx, base)
	})
}

// call makes one request f of pod's agent within timeout; f has the
// shape of agentapi.Client's methods as method expressions (receiver first).
func call[T any](ctx context.Context, a PodAgents, db *dbv1.Database, pod *corev1.Pod, timeout time.Duration,
	f func(agentapi.Client, context.Context, string) (T, error)) (T, error) {
	c, base, err := a.client(ctx, db, pod)
	if err != nil {
		var zero T
		return zero, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return f(c, ctx, base)
}

// client is the agent client of pod and its base URL.
func (a PodAgents) client(ctx context.Context, db *dbv1.Database, pod *corev1.Pod) (agentapi.Client, string, error) {
	if pod.Status.PodIP == "" {
		return agentapi.Client{}, "", fmt.Errorf("pod %s has no IP: %w", pod.Name, ErrNotReady)
	}
	if a.Secrets == nil {
		return agentapi.Client{}, "", fmt.Errorf("no reader for Secret %s", resources.ReplicationSecretName(db))
	}
	name := resources.ReplicationSecretName(db)
	sec := &corev1.Secret{}
	if err := a.Secrets.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, sec); err != nil {
		return agentapi.Client{}, "", fmt.Errorf("getting Secret %s for the agents' token: %w", name, err)
	}
	token := string(sec.Data[resources.AgentTokenKey])
	if token == "" {
		return agentapi.Client{}, "", fmt.Errorf("Secret %s lacks the key %s", name, resources.AgentTokenKey)
	}
	host := net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(agentapi.Port)))
	transport := http.DefaultTransport.(*http.Transport).Clone()
	// One transport per call: no idle connection may outlive it.
	transport.DisableKeepAlives = true
	base := "http://" + host
	if resources.PodAgentServesTLS(pod) {
		cfg, err := a.serverTLS(ctx, db, PodHost(db, pod.Name))
		if err != nil {
			return agentapi.Client{}, "", err
		}
		transport.TLSClientConfig = cfg
		base = "https://" + host
	}
	return agentapi.Client{HTTP: &http.Client{Transport: transport}, Token: token}, base, nil
}

func (a PodAgents) serverTLS(ctx context.Context, db *dbv1.Database, serverName string) (*tls.Config, error) {
	return caConfig(ctx, a.Secrets, db, serverName)
}

// PodHost is the DNS name of the Database's pod under the headless
// Service, which the server certificate covers.
func PodHost(db *dbv1.Database, pod string) string {
	return fmt.Sprintf("%s.%s.%s.svc", pod, resources.HeadlessServiceName(db), db.Namespace)
}

// caConfig is the verify-full configuration for serverName with the CA of
// db's TLS Secret, read with reader.
func caConfig(ctx context.Context, reader client.Reader, db *dbv1.Database, serverName string) (*tls.Config, error) {
	name := resources.TLSSecretName(db)
	if reader == nil {
		return nil, fmt.Errorf("no reader for Secret %s", name)
	}
	sec := &corev1.Secret{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, sec); err != nil {
		return nil, fmt.Errorf("getting Secret %s for the server's CA: %w", name, err)
	}
	cfg, err := pki.ClientConfig(sec.Data[resources.CACertKey], serverName)
	if err != nil {
		return nil, fmt.Errorf("Secret %s, key %s: %w", name, resources.CACertKey, err)
	}
	return cfg, nil
}

// SuperuserCertificateLifetime is how long the certificate of one of the
// manager's superuser sessions is valid (it is needed only to log in).
const SuperuserCertificateLifetime = time.Hour

// SuperuserCertificate adds to cfg (a TLS connection: every server with
// TLS takes client certificates), for login as the superuser, a
// certificate for login.User signed by the Database's CA (Secret
// <name>-ca, read with reader): such a server refuses the superuser's
// password over TCP. It adds nothing for another
// login, and a server that asks for no certificate (one started before
// dbkeeper used them) gets the password as before.
func SuperuserCertificate(ctx context.Context, reader client.Reader, db *dbv1.Database, login Login, cfg *tls.Config) error {
	if !login.Superuser {
		return nil
	}
	pair, err := IssueClient(ctx, reader, db, login.User, time.Now(), SuperuserCertificateLifetime)
	if err != nil {
		return err
	}
	cert, err := tls.X509KeyPair(pair.Cert, pair.Key)
	if err != nil {
		return fmt.Errorf("the client certificate just issued: %w", err)
	}
	cfg.Certificates = []tls.Certificate{cert}
	return nil
}

// IssueClient signs a client certificate for role with the CA of db
// (Secret <name>-ca, read with reader, which must read from the API
// server), valid from now for lifetime. A missing CA Secret is an error
// that apierrors.IsNotFound recognizes.
func IssueClient(ctx context.Context, reader client.Reader, db *dbv1.Database, role string, now time.Time, lifetime time.Duration) (pki.KeyPair, error) {
	name := resources.CASecretName(db)
	sec := &corev1.Secret{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: db.Namespace, Name: name}, sec); err != nil {
		return pki.KeyPair{}, fmt.Errorf("getting Secret %s for a client certificate: %w", name, err)
	}
	pair, err := pki.IssueClient(pki.KeyPair{Cert: sec.Data[resources.CACertKey], Key: sec.Data[resources.CAKeyKey]}, role, now, lifetime)
	if err != nil {
		return pki.KeyPair{}, fmt.Errorf("Secret %s: %w", name, err)
	}
	return pair, nil
}
