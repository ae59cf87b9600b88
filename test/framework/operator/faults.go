package operator

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/dbkeeper/dbkeeper/test/framework"
)

// Faults makes a share of an operator's writes fail the way a busy API
// server makes them fail, at the transport, so every client of the manager
// (cache, direct client, status writer, event recorder) sees them:
//
//   - Conflict: the write is not sent; the answer is 409 Conflict, as when
//     another writer got there first.
//   - ServerError: a 500 answer. Half of them replace the answer of a write
//     the server did apply (the response was lost on the way back), so a
//     retry meets the effect of its own first attempt; the other half are
//     answered without sending.
//
// Reads are never touched. The zero value injects nothing; Disable stops
// the faults at once.
type Faults struct {
	// Conflict and ServerError are the shares of writes, in [0, 1], that
	// fail each way.
	Conflict, ServerError float64
	// Seed makes a run repeatable.
	Seed uint64

	off       atomic.Bool
	mu        sync.Mutex
	rng       *rand.Rand
	conflicts atomic.Int64
	errors    atomic.Int64
	writes    atomic.Int64
}

// Disable stops injecting: every later write goes through untouched.
func (f *Faults) Disable() { f.off.Store(true) }

// Injected returns how many writes were answered with a conflict and with
// a server error, and how many writes went through the transport in all.
func (f *Faults) Injected() (conflicts, serverErrors, writes int64) {
	return f.conflicts.Load(), f.errors.Load(), f.writes.Load()
}

// Wrap is a rest.Config WrapTransport.
func (f *Faults) Wrap(rt http.RoundTripper) http.RoundTripper {
	return framework.RoundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if !isWrite(req.Method) {
			return rt.RoundTrip(req)
		}
		f.writes.Add(1)
		switch fault, afterSending := f.draw(); fault {
		case http.StatusConflict:
			f.conflicts.Add(1)
			drain(req)
			return statusResponse(req, http.StatusConflict, "Conflict", "injected conflict: the object has been modified"), nil
		case http.StatusInternalServerError:
			f.errors.Add(1)
			if afterSending {
				resp, err := rt.RoundTrip(req)
				if err != nil {
					return nil, err
				}
				drainResponse(resp)
			} else {
				drain(req)
			}
			return statusResponse(req, http.StatusInternalServerError, "InternalError", "injected server error"), nil
		}
		return rt.RoundTrip(req)
	})
}

// draw picks the fate of one write: 0 (none), 409 or 500, and for a 500
// whether the write is sent first.
func (f *Faults) draw() (int, bool) {
	if f.off.Load() {
		return 0, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rng == nil {
		f.rng = rand.New(rand.NewPCG(f.Seed, f.Seed^0x9e3779b97f4a7c15))
	}
	switch p := f.rng.Float64(); {
	case p < f.Conflict:
		return http.StatusConflict, false
	case p < f.Conflict+f.ServerError:
		return http.StatusInternalServerError, f.rng.IntN(2) == 0
	}
	return 0, false
}

func isWrite(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

func drain(req *http.Request) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
}

func drainResponse(resp *http.Response) {
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
}

// statusResponse is the API server's answer for a failed request: a
// metav1.Status with the code and reason client-go classifies errors by.
func statusResponse(req *http.Request, code int, reason, message string) *http.Response {
	body := fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":%q,"reason":%q,"code":%d}`,
		message, reason, code)
	return &http.Response{
		StatusCode:    code,
		Status:        fmt.Sprintf("%d %s", code, http.StatusText(code)),
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": []string{"application/json"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}
