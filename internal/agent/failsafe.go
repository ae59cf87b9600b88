package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// The failsafe (as Patroni's failsafe_mode): a primary whose renews fail
// because the API server does not answer keeps serving past its renew
// deadline only while every other member of the lease (AnnotationMembers)
// confirms it, each round within LeaseRenewDeadline of the last. A member
// confirms only when it is not and is not becoming a primary and its
// last read of the lease names the asker; it then takes no lease and
// refuses promotes for LeaseDuration. The rules are in leaserules.go
// (answerFailsafe, shouldFenceAt, mayTake); docs/design/failover.md says
// why this keeps one primary.

// failsafeRequestTimeout bounds one member's answer: a member that does
// not answer in time did not confirm.
const failsafeRequestTimeout = time.Second

// failsafe runs a round every LeaseRetryPeriod while the agent holds the
// lease and its last renew failed for want of the API server, until ctx
// ends.
func (k *leaseKeeper) failsafe(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(agentapi.LeaseRetryPeriod):
		}
		if req, due := k.roundDue(); due {
			k.round(ctx, req)
		}
	}
}

// roundDue says whether a round is due, and what it asks: the agent holds
// the lease, its last renew failed for want of the API server, and the
// lease (as last read) has members.
func (k *leaseKeeper) roundDue() (agentapi.FailsafeRequest, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	rec := k.obs.Record
	due := k.holding && k.outage && k.ask != nil && rec.HasMembers && rec.Holder == k.self
	return agentapi.FailsafeRequest{Pod: k.self, HolderUID: k.uid, ResourceVersion: rec.ResourceVersion, Members: rec.Members}, due
}

// round asks every member but this one, in parallel, to confirm req; when
// all do, the round's start is the holder's new lastConfirmed. With no
// other member it succeeds at once: nobody could take the lease.
func (k *leaseKeeper) round(ctx context.Context, req agentapi.FailsafeRequest) {
	start := k.now()
	var others []string
	for _, m := range req.Members {
		if m != k.self {
			others = append(others, m)
		}
	}
	refusals := make([]string, len(others))
	var wg sync.WaitGroup
	for i, pod := range others {
		wg.Go(func() {
			actx, cancel := context.WithTimeout(ctx, failsafeRequestTimeout)
			defer cancel()
			if err := k.ask(actx, pod, req); err != nil {
				refusals[i] = pod + ": " + err.Error()
			}
		})
	}
	wg.Wait()
	var refused []string
	for _, r := range refusals {
		if r != "" {
			refused = append(refused, r)
		}
	}
	k.mu.Lock()
	confirmed := len(refused) == 0 && k.holding
	if confirmed && start.After(k.lastConfirmed) {
		k.lastConfirmed = start
	}
	k.mu.Unlock()
	if len(refused) > 0 {
		k.log.Info("Not every member confirmed the failsafe: fencing at the renew deadline unless the API server answers",
			"refusals", strings.Join(refused, "; "))
	}
}

// confirm answers, as a member, a primary's failsafe request
// (answerFailsafe); promoting and primary say what the agent does.
// Confirming, it takes no lease for LeaseDuration from now (mayTake). The
// answer and the grant are one step under the lock a take's verdict and
// write start under.
func (k *leaseKeeper) confirm(req agentapi.FailsafeRequest, promoting, primary bool) (bool, string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.now()
	ok, why := answerFailsafe(k.self, req, memberState{Holding: k.holding, Taking: k.taking,
		Promoting: promoting, Primary: primary, Obs: k.obs})
	if !ok {
		k.log.Info("Refusing to confirm a failsafe", "primary", req.Pod, "reason", why)
		return false, why
	}
	if !k.grant.active(now) || k.grant.Caller != req.Pod {
		k.log.Info("Confirming that a primary serves without the API server: taking no lease meanwhile",
			"primary", req.Pod, "resourceVersion", req.ResourceVersion, "why", why)
	}
	k.grant = failsafeGrant{Caller: req.Pod, At: now}
	return true, why
}

// failsafeHold is why a promote is refused now: this member confirmed a
// primary's failsafe within LeaseDuration; "" when it did not.
func (k *leaseKeeper) failsafeHold() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.now()
	if !k.grant.active(now) {
		return ""
	}
	return fmt.Sprintf("%s is serving in failsafe: it checked in %s ago", k.grant.Caller, now.Sub(k.grant.At).Round(time.Second))
}

// handleFailsafe answers POST FailsafePath.
func (a *Agent) handleFailsafe(w http.ResponseWriter, r *http.Request) {
	var req agentapi.FailsafeRequest
	if !readJSON(w, r, &req) {
		return
	}
	if a.keeper == nil {
		writeError(w, conflict("this instance holds no primary lease"))
		return
	}
	a.mu.Lock()
	promoting := a.promoting || a.state == agentapi.StatePromoting
	running := a.srv != nil
	a.mu.Unlock()
	primary := running && !isStandby(a.cfg.PGData)
	ok, why := a.keeper.confirm(req, promoting, primary)
	if !ok {
		writeError(w, conflict("%s", why))
		return
	}
	writeJSON(w, http.StatusOK, agentapi.FailsafeAnswer{Pod: a.cfg.Pod, Reason: why})
}

// EnvPeerAgents, when set (tests, which run every instance on one host),
// is a JSON object of pod name to the base URL of its agent
// ("http://127.0.0.1:8011"), used instead of <pod>.<EnvPeerDomain> at the
// agents' port.
const EnvPeerAgents = "DBKEEPER_PEER_AGENTS"

// peerAsker asks other instances' agents to confirm a failsafe.
type peerAsker struct {
	cfg Config
	// port is the agents' port (every instance's is this one's).
	port string
	// agents is EnvPeerAgents; err says why it could not be read.
	agents map[string]string
	err    error
}

func newPeerAsker(cfg Config) *peerAsker {
	_, port, err := net.SplitHostPort(cfg.Listen)
	if err != nil || port == "" {
		port = strconv.Itoa(int(agentapi.Port))
	}
	p := &peerAsker{cfg: cfg, port: port}
	if v := os.Getenv(EnvPeerAgents); v != "" {
		if err := json.Unmarshal([]byte(v), &p.agents); err != nil {
			p.err = fmt.Errorf("reading $%s: %w", EnvPeerAgents, err)
		}
	}
	return p
}

// address is the base URL of pod's agent and the name its certificate
// carries: <pod>.<PeerDomain> at the agents' port (HTTPS with TLS), or
// what EnvPeerAgents says.
func (p *peerAsker) address(pod string) (base, serverName string, err error) {
	if p.err != nil {
		return "", "", p.err
	}
	if u, ok := p.agents[pod]; ok {
		return u, "localhost", nil
	}
	if p.cfg.PeerDomain == "" || !dnsLabel(pod) {
		return "", "", fmt.Errorf("cannot name the address of %q: no peer domain ($%s)", pod, agentapi.EnvPeerDomain)
	}
	host := pod + "." + p.cfg.PeerDomain
	scheme := "http"
	if p.cfg.apiTLSDir() != "" {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, p.port), host, nil
}

// ask posts req to pod's agent; nil is a confirmation.
func (p *peerAsker) ask(ctx context.Context, pod string, req agentapi.FailsafeRequest) error {
	base, serverName, err := p.address(pod)
	if err != nil {
		return err
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	// no proxy between instances, and no idle connection to a peer that
	// went away.
	transport.Proxy = nil
	transport.DisableKeepAlives = true
	if strings.HasPrefix(base, "https://") {
		caPEM, err := os.ReadFile(filepath.Join(p.cfg.apiTLSDir(), "ca.crt"))
		if err != nil {
			return fmt.Errorf("reading the CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return errors.New("ca.crt holds no certificate")
		}
		transport.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: serverName}
	}
	defer transport.CloseIdleConnections()
	_, err = agentapi.Client{HTTP: &http.Client{Transport: transport}, Token: p.cfg.Token}.Failsafe(ctx, base, req)
	return err
}
