package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/dbkeeper/dbkeeper/internal/agent"
	"github.com/dbkeeper/dbkeeper/internal/agentapi"
	"github.com/dbkeeper/dbkeeper/internal/logging"
	"github.com/dbkeeper/dbkeeper/internal/reposerver"
)

// subcommand runs `manager copy-self DIR`, `manager agent [flags] --
// COMMAND...`, `manager verify-backup [flags]` or `manager
// repository-server [flags]` when args name one; ok is false for the
// manager itself.
func subcommand(args []string) (ok bool, err error) {
	if len(args) == 0 {
		return false, nil
	}
	switch args[0] {
	case "copy-self":
		if len(args) != 2 {
			return true, errors.New("usage: manager copy-self DIR")
		}
		dst, err := agent.CopySelf(args[1])
		if err == nil {
			fmt.Println("copied the manager to", dst)
		}
		return true, err
	case agentapi.CopyEngineCommand:
		if len(args) != 3 {
			return true, errors.New("usage: manager " + agentapi.CopyEngineCommand + " MAJOR DIR")
		}
		msg, err := agent.CopyEngine(args[1], args[2])
		if err == nil {
			fmt.Println(msg)
		}
		return true, err
	case "agent":
		return true, runAgent(args[1:])
	case reposerver.Command:
		return true, runTool(reposerver.Main, args[1:])
	case agentapi.VerifyCommand:
		return true, runTool(agent.VerifyMain, args[1:])
	}
	return false, nil
}

// runTool runs a subcommand's main with the manager's logging flags bound
// to its flag set; -h is no error.
func runTool(main func(args []string, bindFlags func(*flag.FlagSet), newLog func() logr.Logger) error, args []string) error {
	zapOpts := zap.Options{TimeEncoder: zapcore.ISO8601TimeEncoder}
	err := main(args, func(fs *flag.FlagSet) { zapOpts.BindFlags(fs) },
		func() logr.Logger { return zapr.NewLogger(zap.NewRaw(zap.UseFlagOptions(&zapOpts))) })
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

// runAgent parses the agent's flags (with the manager's logging ones) and
// runs it until SIGTERM.
func runAgent(args []string) error {
	zapOpts := zap.Options{TimeEncoder: zapcore.ISO8601TimeEncoder}
	cfg, err := agent.ParseFlags(args, func(fs *flag.FlagSet) { zapOpts.BindFlags(fs) })
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if err := agent.Main(cfg, agentLogger(&zapOpts)); err != nil {
		if cfg.CheckTakeover {
			// a check the running agent runs: its own container's
			// termination message is not this one's to write
			return err
		}
		writeTerminationMessage(terminationMessagePath, err)
		return loggedError{err}
	}
	return nil
}

// agentLogger is the agent's logger: JSON lines of zap's production
// encoder on stderr (unless --zap-devel or --zap-encoder say otherwise),
// as the server's own lines are on stdout; agent.Main names the instance
// in each.
func agentLogger(o *zap.Options) logr.Logger {
	return logging.Capped(zapr.NewLogger(zap.NewRaw(zap.UseFlagOptions(o))))
}

// loggedError is an error its subcommand has logged already: main exits
// without printing it again (the agent's log stays JSON to its last
// line).
type loggedError struct{ error }

// Unwrap returns the error logged.
func (e loggedError) Unwrap() error { return e.error }

// terminationMessagePath is the kubelet's default terminationMessagePath,
// whose content becomes the container's termination message (the
// statefulset controller quotes it in the Database's condition when the
// instance crash-loops).
const terminationMessagePath = "/dev/termination-log"

// writeTerminationMessage writes why the agent exits to path, when path
// exists (the kubelet mounts it in a container; outside one it is not
// made).
func writeTerminationMessage(path string, err error) {
	f, openErr := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if openErr != nil {
		return
	}
	defer f.Close()
	_, _ = f.WriteString(err.Error())
}
