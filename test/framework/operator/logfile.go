package operator

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/dbkeeper/dbkeeper/internal/logging"
)

// FileLogger is a logger for one operator run of a test: JSON lines, down
// to debug level, into a file of a temporary directory of its own, whose
// last tail lines the test prints if it fails. The file is removed when the
// test passes and kept when it fails (its path is printed), so that a
// failure seen once, in CI, can be read whole afterwards.
func FileLogger(t testing.TB, tail int) logr.Logger {
	t.Helper()
	dir := os.TempDir() // kept with the cluster, for a look afterwards
	if os.Getenv("DBKEEPER_KEEP_CLUSTER") != "1" {
		var err error
		dir, err = os.MkdirTemp("", "dbkeeper-operator-log-")
		require.NoError(t, err)
	}
	path := filepath.Join(dir, fmt.Sprintf("operator-%d.log", time.Now().UnixNano()))
	f, err := os.Create(path)
	require.NoError(t, err)
	core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewDevelopmentEncoderConfig()), zapcore.AddSync(f), zapcore.Level(-2))
	t.Cleanup(func() {
		f.Close()
		if !t.Failed() && os.Getenv("DBKEEPER_KEEP_CLUSTER") != "1" {
			_ = os.RemoveAll(dir)
			return
		}
		if t.Failed() {
			data, _ := os.ReadFile(path)
			lines := strings.Split(strings.TrimSpace(string(data)), "\n")
			t.Logf("last operator log lines (all in %s):\n%s", path, strings.Join(lines[max(0, len(lines)-tail):], "\n"))
		}
	})
	return logging.Capped(zapr.NewLogger(zap.New(core)))
}
