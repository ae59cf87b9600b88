package agentapi

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A build's version is its module's, with the VCS revision when stamped.
func TestVersionOf(t *testing.T) {
	assert.Equal(t, "v1.2.3", versionOf(&debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}))
	bi := &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}
	assert.Equal(t, "(devel)+0123456789ab-dirty", versionOf(bi))
	bi.Main.Version = "v0.0.0-2026"
	bi.Settings[1].Value = "false"
	assert.Equal(t, "v0.0.0-2026+0123456789ab", versionOf(bi))
	assert.NotEmpty(t, Version())
}

// PushBinary PUTs the body with the token, the version and the sum, and
// reads the answer; a refusal is an *Error with its code.
func TestPushBinary(t *testing.T) {
	var got struct {
		method, auth, version, sum string
		body                       []byte
		length                     int64
	}
	refuse := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.method, got.auth = r.Method+" "+r.URL.Path, r.Header.Get("Authorization")
		got.version, got.sum, got.length = r.Header.Get(HeaderVersion), r.Header.Get(HeaderSHA256), r.ContentLength
		got.body, _ = io.ReadAll(r.Body)
		if refuse {
			http.Error(w, "a base backup is under way", http.StatusConflict)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"from":"v1","version":"v2"}`))
	}))
	defer srv.Close()
	c := Client{Token: "tok"}
	a, err := c.PushBinary(context.Background(), srv.URL, "v2", "abc", strings.NewReader("binary"), 6)
	require.NoError(t, err)
	assert.Equal(t, TakeoverAnswer{From: "v1", Version: "v2"}, a)
	assert.Equal(t, "PUT "+BinaryPath, got.method)
	assert.Equal(t, "Bearer tok", got.auth)
	assert.Equal(t, "v2", got.version)
	assert.Equal(t, "abc", got.sum)
	assert.Equal(t, int64(6), got.length)
	assert.Equal(t, "binary", string(got.body))
	refuse = true
	_, err = c.PushBinary(context.Background(), srv.URL, "v2", "abc", strings.NewReader("binary"), 6)
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, http.StatusConflict, e.Code)
	assert.Contains(t, e.Message, "base backup")
}
