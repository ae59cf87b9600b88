package logging

import (
	"bytes"
	"testing"

	"github.com/go-logr/zapr"
	"github.com/stretchr/testify/assert"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func TestCappedDropsBodyLevels(t *testing.T) {
	var buf bytes.Buffer
	core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewDevelopmentEncoderConfig()), zapcore.AddSync(&buf), zapcore.Level(-10))
	l := Capped(zapr.NewLogger(zap.New(core))).WithName("op").WithValues("k", "v")

	l.V(1).Info("debug line")
	l.V(MaxVerbosity).Info("request summary")
	l.V(8).Info("Response Body", "body", "password=hunter2")
	l.WithValues("more", 1).V(9).Info("deeper", "body", "password=hunter2")

	out := buf.String()
	assert.Contains(t, out, "debug line")
	assert.Contains(t, out, "request summary")
	assert.NotContains(t, out, "hunter2")
	assert.False(t, l.V(MaxVerbosity+1).Enabled())
	assert.True(t, l.V(MaxVerbosity).Enabled())
}
