package agentapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/debug"
	"time"
)

// Level is the API level the agent speaks: raised when a request or a
// field changes meaning. The manager talks to agents of its own level and
// of the one before (docs/design/upgrades.md).
const Level = 1

// buildVersion, when set at link time (-ldflags "-X
// github.com/dbkeeper/dbkeeper/internal/agentapi.buildVersion=v1.2.3"),
// is the build's version instead of the one debug.ReadBuildInfo says.
var buildVersion string

// Version is this build's version: buildVersion when set, else the main
// module's version and VCS revision as the Go toolchain stamped them
// ("(devel)" and no revision for a build outside a repository).
func Version() string {
	if buildVersion != "" {
		return buildVersion
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return versionOf(bi)
}

// versionOf is the version of a build: its main module's version, with
// its VCS revision (and "-dirty" for a modified tree) when stamped.
func versionOf(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return v
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified == "true" {
		rev += "-dirty"
	}
	return v + "+" + rev
}

// BinaryPath receives a new agent binary (PUT, the executable as the
// body, HeaderVersion and HeaderSHA256 set): the agent checks it and
// replaces itself with it in place, the server running on
// (docs/design/upgrades.md, "The agent's in-place takeover").
const BinaryPath = "/agent/binary"

// The headers of a PUT BinaryPath.
const (
	// HeaderVersion is the version the binary says it is (Version).
	HeaderVersion = "X-Dbkeeper-Version"
	// HeaderSHA256 is the hex SHA-256 of the body.
	HeaderSHA256 = "X-Dbkeeper-SHA256"
)

// MaxBinarySize bounds the body of a PUT BinaryPath.
const MaxBinarySize = 512 << 20

// EnvHandover names, in the environment of an agent that replaced itself,
// its handover file: the new agent adopts the running server it
// describes instead of starting one.
const EnvHandover = "DBKEEPER_HANDOVER"

// CheckTakeoverFlag makes `manager agent` check that it could take over
// from the agent running with the same flags and environment (the data
// directory holds a cluster it can read), print its BuildInfo as JSON
// and exit.
const CheckTakeoverFlag = "check-takeover"

// BuildInfo is which agent runs: its build and API level.
type BuildInfo struct {
	// Version is the agent's build (Version).
	Version string `json:"version"`
	// Level is the API level it speaks (Level).
	Level int `json:"level"`
	// SHA256 is the hex SHA-256 of the agent's executable: what tells two
	// builds apart when their versions do not (two builds of a tree
	// without VCS information both say "(devel)"); empty until the agent
	// read it, shortly after it started.
	SHA256 string `json:"sha256,omitempty"`
	// LastTakeover is how this agent came to run, when it replaced an
	// earlier one in place, or tried to; nil after an ordinary start.
	LastTakeover *TakeoverReport `json:"lastTakeover,omitempty"`
}

// TakeoverReport is the last in-place takeover of an agent.
type TakeoverReport struct {
	// From is the version of the agent replaced.
	From string `json:"from,omitempty"`
	// At is when the replaced agent handed over.
	At time.Time `json:"at"`
	// Adopted says the new agent adopted the running server; false: it
	// did not (Message says why) and started the server as after a
	// restart.
	Adopted bool `json:"adopted"`
	// Message says why the server was not adopted.
	Message string `json:"message,omitempty"`
}

// TakeoverAnswer is the answer of a PUT BinaryPath the agent accepted: it
// replaces itself with Version once the answer is sent.
type TakeoverAnswer struct {
	// From is the version of the agent that answers.
	From string `json:"from"`
	// Version is the version of the binary it checked and switches to.
	Version string `json:"version"`
}

// PushBinary sends the agent at baseURL the binary body (size bytes, of
// hex SHA-256 sum, build version): the agent checks it and replaces
// itself with it. A refusal is an *Error: 409 when the binary is not
// taken (a bad sum, a failed check, an operation in flight: try later).
func (c Client) PushBinary(ctx context.Context, baseURL, version, sum string, body io.Reader, size int64) (TakeoverAnswer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, baseURL+BinaryPath, body)
	if err != nil {
		return TakeoverAnswer{}, fmt.Errorf("PUT %s%s: %w", baseURL, BinaryPath, err)
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set(HeaderVersion, version)
	req.Header.Set(HeaderSHA256, sum)
	b, _, err := c.send(req, 1<<20)
	if err != nil {
		return TakeoverAnswer{}, err
	}
	var a TakeoverAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		return TakeoverAnswer{}, fmt.Errorf("PUT %s%s: decoding the answer: %w", baseURL, BinaryPath, err)
	}
	return a, nil
}

// BuildName names a build in messages: its version, and the start of its
// executable's SHA-256 when known.
func BuildName(version, sum string) string {
	if len(sum) > 12 {
		sum = sum[:12]
	}
	if sum == "" {
		return version
	}
	return version + " (" + sum + ")"
}

// FileSHA256 is the hex SHA-256 of the file at path (an agent's
// executable) and its size.
func FileSHA256(path string) (sum string, size int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if size, err = io.Copy(h, f); err != nil {
		return "", 0, fmt.Errorf("reading %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), size, nil
}
