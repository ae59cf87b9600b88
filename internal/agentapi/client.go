package agentapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Client calls agents' authenticated paths. BaseURL arguments are
// "https://<pod IP>:<Port>" (or http:// for a Database without TLS).
type Client struct {
	// HTTP is the client to use; its TLS configuration verifies the
	// agent's certificate (the Database's server certificate).
	HTTP *http.Client
	// Token is the bearer token (the replication Secret's agent-token).
	Token string
}

// Error is an agent's refusal: the HTTP status and its message.
type Error struct {
	Code    int
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("agent answered %d: %s", e.Code, e.Message) }

// Status returns the instance's status.
func (c Client) Status(ctx context.Context, baseURL string) (Status, error) {
	var s Status
	return s, c.do(ctx, http.MethodGet, baseURL+StatusPath, nil, &s)
}

// Bootstrap asks an agent with an empty data directory to fill it.
func (c Client) Bootstrap(ctx context.Context, baseURL string, req BootstrapRequest) (Status, error) {
	var s Status
	return s, c.do(ctx, http.MethodPost, baseURL+BootstrapPath, req, &s)
}

// Demote asks a primary's agent to stop taking writes and restart as a
// standby; it answers once the server is down and restarting.
func (c Client) Demote(ctx context.Context, baseURL string) (DemoteResponse, error) {
	var r DemoteResponse
	return r, c.do(ctx, http.MethodPost, baseURL+DemotePath, struct{}{}, &r)
}

// Promote asks a standby's agent to promote its server; it answers once
// the server accepts writes.
func (c Client) Promote(ctx context.Context, baseURL string, req PromoteRequest) (Status, error) {
	var s Status
	return s, c.do(ctx, http.MethodPost, baseURL+PromotePath, req, &s)
}

// Restart asks an agent to restart its server in place; it answers once
// the server accepts connections again.
func (c Client) Restart(ctx context.Context, baseURL string) (Status, error) {
	var s Status
	return s, c.do(ctx, http.MethodPost, baseURL+RestartPath, struct{}{}, &s)
}

// Detach asks a standby's agent to stop its WAL receiver.
func (c Client) Detach(ctx context.Context, baseURL string) (Status, error) {
	var s Status
	return s, c.do(ctx, http.MethodPost, baseURL+DetachPath, struct{}{}, &s)
}

// Rejoin asks a diverged standby's agent to rewind it from the primary;
// it answers (202) before it is done.
func (c Client) Rejoin(ctx context.Context, baseURL string) (Status, error) {
	var s Status
	return s, c.do(ctx, http.MethodPost, baseURL+RejoinPath, struct{}{}, &s)
}

// Backup asks a primary's agent to start a base backup (or returns the
// run of the request's ID); it answers (202) before the backup is done.
func (c Client) Backup(ctx context.Context, baseURL string, req BackupRequest) (BackupRun, error) {
	var r BackupRun
	return r, c.do(ctx, http.MethodPost, baseURL+BackupPath, req, &r)
}

// Failsafe asks a member's agent to confirm that the primary of req may
// serve without the API server; a refusal is an *Error (409) that says
// why.
func (c Client) Failsafe(ctx context.Context, baseURL string, req FailsafeRequest) (FailsafeAnswer, error) {
	var r FailsafeAnswer
	return r, c.do(ctx, http.MethodPost, baseURL+FailsafePath, req, &r)
}

func (c Client) do(ctx context.Context, method, url string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encoding %s %s: %w", method, url, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, url, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	b, _, err := c.send(req, 1<<20)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: decoding the answer: %w", method, url, err)
	}
	return nil
}

// send makes req with the bearer token and returns the answer's body, of
// at most limit bytes (a longer one is cut there), and its header; an
// answer other than 2xx is an *Error.
func (c Client) send(req *http.Request, limit int64) ([]byte, http.Header, error) {
	req.Header.Set("Authorization", "Bearer "+c.Token)
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: reading the answer: %w", req.Method, req.URL, err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, nil, &Error{Code: resp.StatusCode, Message: strings.TrimSpace(string(b))}
	}
	return b, resp.Header, nil
}
