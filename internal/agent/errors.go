package agent

import (
	"errors"
	"fmt"
	"net/http"
)

// opError is a refusal or failure with the HTTP status to answer.
type opError struct {
	code int
	msg  string
}

func (e *opError) Error() string { return e.msg }

func conflict(format string, args ...any) error {
	return &opError{code: http.StatusConflict, msg: fmt.Sprintf(format, args...)}
}

// errBusy refuses a request while another operation runs.
var errBusy = &opError{code: http.StatusConflict, msg: "another bootstrap, demote or promote is running"}

// errNotPrimary refuses what only a running primary does.
var errNotPrimary = errors.New("this instance is not a running primary")
