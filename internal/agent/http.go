package agent

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dbkeeper/dbkeeper/internal/agentapi"
)

// listen opens the endpoint's socket (HTTPS with the Database's server
// certificate when EnvTLSDir or EnvAPITLSDir is set).
func (a *Agent) listen() (*http.Server, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+agentapi.HealthPath, func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET "+agentapi.ReadyPath, a.handleReady)
	mux.Handle("GET "+agentapi.StatusPath, a.authenticated(a.handleStatus))
	mux.Handle("POST "+agentapi.BootstrapPath, a.authenticated(a.handleBootstrap))
	mux.Handle("POST "+agentapi.DemotePath, a.authenticated(a.handleDemote))
	mux.Handle("POST "+agentapi.PromotePath, a.authenticated(a.handlePromote))
	mux.Handle("POST "+agentapi.DetachPath, a.authenticated(a.handleDetach))
	mux.Handle("POST "+agentapi.RejoinPath, a.authenticated(a.handleRejoin))
	mux.Handle("POST "+agentapi.FailsafePath, a.authenticated(a.handleFailsafe))
	mux.Handle("POST "+agentapi.ParametersPath, a.authenticated(a.handleParameters))
	mux.Handle("POST "+agentapi.RestartPath, a.authenticated(a.handleRestart))
	mux.Handle("POST "+agentapi.BackupPath, a.authenticated(a.notDuringExpiry(a.handleBackup)))
	mux.Handle("PUT "+agentapi.BinaryPath, a.authenticated(a.handleBinary))
	mux.Handle("GET "+agentapi.MetricsPath, a.authenticated(a.metricsHandler().ServeHTTP))
	// every request's whole life is bounded: a client that sends slowly
	// or never reads holds no goroutine for ever (the longest handler,
	// a demote, promote or restart, runs within requestContext's 3
	// minutes)
	hs := &http.Server{Addr: a.cfg.Listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 30 * time.Second, WriteTimeout: 4 * time.Minute, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 1 << 16}
	if dir := a.cfg.apiTLSDir(); dir != "" {
		certs := &certFiles{cert: filepath.Join(dir, "tls.crt"), key: filepath.Join(dir, "tls.key")}
		if _, err := certs.get(nil); err != nil {
			return nil, err
		}
		hs.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.get}
	}
	return hs, nil
}

// serve serves hs until it is shut down.
func (a *Agent) serve(hs *http.Server) error {
	ln, err := net.Listen("tcp", hs.Addr)
	if err != nil {
		return err
	}
	if hs.TLSConfig != nil {
		err = hs.ServeTLS(ln, "", "")
	} else {
		err = hs.Serve(ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// metricsMaxInFlight bounds the scrapes of /metrics that run at once,
// each with its own connection to the server; more are answered 503. The
// manager scrapes each instance one at a time.
const metricsMaxInFlight = 2

// metricsHandler serves the local server's metrics (metricsCollector) in
// Prometheus' exposition formats, from a registry of their own: none of
// the agent's process metrics. The query asks for more
// (agentapi.ParseMetricsOptions); a bad one is a 400 that names it. At
// most metricsMaxInFlight scrapes run at once; more are answered 503.
func (a *Agent) metricsHandler() http.Handler {
	slots := make(chan struct{}, metricsMaxInFlight)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o, err := agentapi.ParseMetricsOptions(r.URL.Query())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
		default:
			http.Error(w, "too many scrapes at once", http.StatusServiceUnavailable)
			return
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(&metricsCollector{a: a, o: o})
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	})
}

// authenticated lets through requests bearing the agent token; an agent
// without a token lets none through.
func (a *Agent) authenticated(h http.HandlerFunc) http.Handler {
	want := []byte("Bearer " + a.cfg.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if a.cfg.Token == "" || subtle.ConstantTimeCompare(got, want) != 1 {
			http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		h(w, r)
	})
}

func (a *Agent) handleReady(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	running := a.state == agentapi.StateRunning
	a.mu.Unlock()
	if !running || a.ready.Do(r.Context()) != nil {
		http.Error(w, "the server does not accept connections", http.StatusServiceUnavailable)
		return
	}
	w.Write([]byte("ok\n"))
}

func (a *Agent) handleStatus(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, a.status(r.Context()))
}

func (a *Agent) handleBootstrap(w http.ResponseWriter, r *http.Request) {
	var req agentapi.BootstrapRequest
	if !readJSON(w, r, &req) {
		return
	}
	if err := a.bootstrap(req); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, a.status(r.Context()))
}

func (a *Agent) handleDemote(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := a.requestContext(r)
	defer cancel()
	resp, err := a.demote(ctx)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (a *Agent) handlePromote(w http.ResponseWriter, r *http.Request) {
	var req agentapi.PromoteRequest
	if !readJSON(w, r, &req) {
		return
	}
	// a member that confirmed a primary's failsafe promotes nothing until
	// the confirmation ran out (that primary may still serve).
	if a.keeper != nil {
		if why := a.keeper.failsafeHold(); why != "" {
			writeError(w, conflict("not promoting: %s", why))
			return
		}
	}
	ctx, cancel := a.requestContext(r)
	defer cancel()
	s, accepted, err := a.promote(ctx, req)
	if err != nil {
		writeError(w, err)
		return
	}
	if accepted {
		writeJSON(w, http.StatusAccepted, s)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

func (a *Agent) handleDetach(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := a.requestContext(r)
	defer cancel()
	if err := a.detach(ctx); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, a.status(ctx))
}

func (a *Agent) handleRejoin(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := a.requestContext(r)
	defer cancel()
	if err := a.rejoinStandby(ctx); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, a.status(ctx))
}

// requestContext is the context of a demote, promote or restart: a
// caller that hangs up does not stop it halfway, the agent's shutdown and
// a bound do.
func (a *Agent) requestContext(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 3*time.Minute)
	stop := context.AfterFunc(a.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	body := http.MaxBytesReader(w, r.Body, 1<<16)
	if err := json.NewDecoder(body).Decode(v); err != nil && !errors.Is(err, io.EOF) {
		http.Error(w, "decoding the request: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func writeError(w http.ResponseWriter, err error) {
	var oe *opError
	if errors.As(err, &oe) {
		http.Error(w, oe.msg, oe.code)
		return
	}
	http.Error(w, err.Error(), http.StatusInternalServerError)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
