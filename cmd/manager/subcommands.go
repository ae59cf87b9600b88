package main

import (
	"errors"
	"flag"
	"fmt"

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
	log := logging.Capped(zapr.NewLogger(zap.NewRaw(zap.UseFlagOptions(&zapOpts))))
	return agent.Main(cfg, log)
}
