// Package logging keeps secrets out of dbkeeper's logs. client-go logs
// through the logger in the request's context, and at verbosity 8 and above
// it logs whole request and response bodies, which for Secrets means the
// passwords. Every logger dbkeeper hands out is capped below that.
package logging

import "github.com/go-logr/logr"

// MaxVerbosity is the highest V-level that reaches the log: enough for
// dbkeeper's own debug lines (V(1)) and client-go's request summaries, below
// the levels where client-go prints headers and bodies.
const MaxVerbosity = 5

// Capped returns l with every line above MaxVerbosity dropped, whatever
// level the underlying logger was configured with.
func Capped(l logr.Logger) logr.Logger {
	sink := l.GetSink()
	if sink == nil {
		return l
	}
	if _, done := sink.(cappedSink); done {
		return l
	}
	return l.WithSink(cappedSink{LogSink: sink})
}

type cappedSink struct {
	logr.LogSink
}

func (s cappedSink) Enabled(level int) bool {
	return level <= MaxVerbosity && s.LogSink.Enabled(level)
}

func (s cappedSink) Info(level int, msg string, keysAndValues ...any) {
	if level > MaxVerbosity {
		return
	}
	s.LogSink.Info(level, msg, keysAndValues...)
}

func (s cappedSink) WithValues(keysAndValues ...any) logr.LogSink {
	return cappedSink{LogSink: s.LogSink.WithValues(keysAndValues...)}
}

func (s cappedSink) WithName(name string) logr.LogSink {
	return cappedSink{LogSink: s.LogSink.WithName(name)}
}

// WithCallDepth keeps the caller's file and line right when the underlying
// sink reports them.
func (s cappedSink) WithCallDepth(depth int) logr.LogSink {
	if cd, ok := s.LogSink.(logr.CallDepthLogSink); ok {
		return cappedSink{LogSink: cd.WithCallDepth(depth + 1)}
	}
	return s
}
