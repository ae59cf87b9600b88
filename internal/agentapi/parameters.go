package agentapi

import (
	"context"
	"net/http"
)

// ParametersPath is where the manager sends an instance the PostgreSQL
// parameters of spec.postgresql.parameters (POST, a ParametersRequest; 200
// and a ParametersResponse).
const ParametersPath = "/parameters"

// OwnedAutoConfParameters are the settings dbkeeper itself writes to
// postgresql.auto.conf (ALTER SYSTEM): the agent neither sets nor resets
// them for spec.postgresql.parameters (the API refuses their names there).
var OwnedAutoConfParameters = []string{"synchronous_standby_names"}

// ParametersRequest is every parameter spec.postgresql.parameters sets.
// The agent makes postgresql.auto.conf hold exactly these (beside
// OwnedAutoConfParameters) with ALTER SYSTEM, so that PostgreSQL itself
// checks each name and value, then reloads the configuration. A parameter
// PostgreSQL refuses is left as it was.
type ParametersRequest struct {
	Parameters map[string]string `json:"parameters"`
}

// ParametersResponse is what the instance did with a ParametersRequest.
type ParametersResponse struct {
	// Refused are the parameters PostgreSQL refused, by name, with its
	// message (and hint): an unknown name, a value out of range or of the
	// wrong unit; and those the agent refused itself (a list value that
	// does not parse, a name of OwnedAutoConfParameters). Each is left as
	// it was in postgresql.auto.conf.
	//
	// It also has the values the server did not start with: a value that
	// ALTER SYSTEM accepted but that stopped the server's next start (the
	// agent then put back the values the server last started with, of
	// the settings changed since, and started it again). Such a value is
	// not written again while the request asks for it again, together with
	// the others that were put back with it; its message names them and
	// quotes the server's line that says why it did not start: "the server
	// did not start with shared_buffers = '64GB': FATAL:  could not map
	// anonymous shared memory: Cannot allocate memory". A request that
	// asks for another value of one of them, or no longer asks for it,
	// has them written again.
	Refused map[string]string `json:"refused,omitempty"`
	// RestartOnly are the request's parameters PostgreSQL applies only at
	// a server start (pg_settings.context postmaster), written or not,
	// sorted.
	RestartOnly []string `json:"restartOnly,omitempty"`
	// PendingRestart are the parameters whose value the next start of
	// the server would change (written in a configuration file, or reset
	// there, and of context postmaster; a value the server's command line
	// overrides is not), sorted.
	PendingRestart []string `json:"pendingRestart,omitempty"`
}

// Parameters sends the agent at baseURL the Database's parameters.
func (c Client) Parameters(ctx context.Context, baseURL string, req ParametersRequest) (ParametersResponse, error) {
	var r ParametersResponse
	return r, c.do(ctx, http.MethodPost, baseURL+ParametersPath, req, &r)
}
