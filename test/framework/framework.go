// Package framework is the machinery the suites under test/ share, and the
// small pieces its own packages share:
//
//	envtest   the repository root, the cached control-plane binaries, envtest
//	cluster   the local cluster, on a fake node (e2e, helm, bench) or a real one (make demo)
//	operator  the manager run in-process or as a binary, its writes recorded
//	postgres  a throwaway PostgreSQL server
//	dbtest    Database helpers: create, get, patch, wait, children, namespaces
//
// This package holds free ports, a buffer for concurrent writers, the
// recorder of an API client's 403 answers and warnings, and the process
// attributes that tie a child process to the test.
package framework

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// FreePort returns a loopback port nobody listens on now and that it has
// not returned before in this process: two calls in a row may otherwise
// get the same port from the kernel before either is bound (an agent test
// once got one port for an agent and for its server, which then could not
// start: "could not bind IPv4 address ... Address already in use").
func FreePort() (int, error) {
	for range 1000 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		if err := l.Close(); err != nil {
			return 0, err
		}
		if _, taken := handedOut.LoadOrStore(port, true); !taken {
			return port, nil
		}
	}
	return 0, errors.New("no free loopback port that was not returned before")
}

// handedOut holds the ports FreePort returned.
var handedOut sync.Map

// SyncBuffer is a bytes.Buffer safe for concurrent writers.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Recorder collects lines from concurrent writers: the requests an API
// server refused (WrapTransport of RecordForbidden) or the warnings it gave
// (it is a rest.WarningHandler).
type Recorder struct {
	mu    sync.Mutex
	muted bool
	lines []string
}

// Add records line unless the recorder is muted.
func (r *Recorder) Add(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.muted {
		r.lines = append(r.lines, line)
	}
}

// Mute drops what is added until Unmute.
func (r *Recorder) Mute() { r.setMuted(true) }

// Unmute records again what is added.
func (r *Recorder) Unmute() { r.setMuted(false) }

func (r *Recorder) setMuted(m bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.muted = m
}

// All returns a copy of what was recorded.
func (r *Recorder) All() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...)
}

// HandleWarningHeader implements rest.WarningHandler: it records the text
// of every warning (code 299).
func (r *Recorder) HandleWarningHeader(code int, agent, text string) {
	if code == 299 {
		r.Add(text)
	}
}

// RecordForbidden returns a rest.Config WrapTransport that adds "METHOD URL"
// to r for every request the API server answers with 403 Forbidden.
func RecordForbidden(r *Recorder) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return RoundTripperFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil && resp.StatusCode == http.StatusForbidden {
				r.Add(req.Method + " " + req.URL.String())
			}
			return resp, err
		})
	}
}

// RoundTripperFunc is an http.RoundTripper made of a function.
type RoundTripperFunc func(*http.Request) (*http.Response, error)

// RoundTrip calls f.
func (f RoundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// GetMetrics GETs https://addr/metrics with the bearer token (none when
// empty), skipping verification of the manager's self-signed certificate,
// and returns the status code and body; a code of 0 and the error's text
// while nothing answers.
func GetMetrics(addr, token string) (int, string) {
	httpClient := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // the manager's self-signed certificate
	}
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err.Error()
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err.Error()
	}
	return resp.StatusCode, string(body)
}
